"""The loop: hypotheses, the LLM, patches, fleets, waves, statistics, winners and provenance."""
