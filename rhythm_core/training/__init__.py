"""Training: the offline tiny base model, SFT and GRPO with TRL, and LLM policies (no Dagster)."""
