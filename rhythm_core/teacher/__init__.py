"""Teachers and their trajectory files: `run` plays the Bayesian teacher (offline, free) or an
OpenAI-compatible chat model (paid, behind a cost guard) on training seeds and appends each finished
episode to a JSONL file; `trajectories` defines that file's schema, reads and validates it, and
replays it against the env.

May import `env`, `agents`, `graders` and the top-level `protocol` / `artifacts`; never `data`,
`training` or `evaluation`, which consume what a teacher writes.
"""
