"""The loop: hypotheses, the LLM, patches, fleets, waves, statistics, winners and provenance."""

import kb  # noqa: F401,E402  (first: kb keeps the sqlite-utils import light; see kb/__init__.py)
