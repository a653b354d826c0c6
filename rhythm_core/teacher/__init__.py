"""Teachers and their trajectory files. By responsibility:

- `run`: the public entry `run_teacher` — plays every seed not yet in a JSONL file, appends each
  finished episode, resumes, and returns counts, tokens and cost (`TeacherRunResult`);
- `settings`: `TeacherSettings` (backend, endpoint, budget, prices) and the reasoning-model rule;
- `offline`: the offline teachers (free: the Bayesian `bayes` and the search `search`), played in
  lockstep, chunks side by side in worker processes;
- `openai_client`: an OpenAI-compatible chat model (paid): client, retries, request-shape learning;
- `budget`: usage counters and totals, and the cost guard (`CostBudget`);
- `records`: the step and episode records every teacher and the evaluation rollouts write;
- `trajectories`: the file's schema; reads, validates, appends (`TrajectoryWriter`) and replays it;
- `evidence`: the read-out of a teacher's stated beliefs (linear or innovation form) that the SFT dataset's rationale uses.

May import the environment (`rhythm_env.sim`, `.graders`, `.protocol`), `agents` and the top-level
`store`; never `data`, `training` or `evaluation`, which consume what a teacher writes.
"""
