"""Research: miners, the model's hypotheses and patches, priorities, reflection."""
