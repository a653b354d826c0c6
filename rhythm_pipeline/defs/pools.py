"""Dagster concurrency pools, shared by every run of the instance: a step that loads a model takes a slot
of `gpu` (training, the GRPO gate, the students' play), a step that calls the teacher a slot of
`teacher_api`. Their limits are the instance's (`concurrency: pools:` in dagster.yaml: one of each in the
embedded default), so a scheduled re-evaluation waits for a training run instead of sharing its GPU."""

GPU_POOL = "gpu"
TEACHER_POOL = "teacher_api"
