"""Where models run and what it costs (no Dagster here): the CPU threads a process may use
(`threads`), prices and job budgets (`costs`) and Hugging Face Jobs (`hf_jobs`, which ships the
wheels `wheels` builds and `hf_job_script` as the job's script; that script imports nothing from
rhythm_core).

Below the stages it serves: `teacher`, `evaluation` and `training` size their threads here, and the
jobs run those stages' entry points by module name, never by import. May import `rhythm_env.sim`,
`errors` and the artifact modules only. Nothing is imported here, so a stage that only needs `threads` does not
load (or depend on) the Hugging Face Jobs client. The GPU check, which runs every stage, is above
them all: `rhythm_core.gpu_check`.
"""
