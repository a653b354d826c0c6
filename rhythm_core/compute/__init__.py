"""Where training runs (no Dagster here): the CPU threads a process may use (`threads`) and
Hugging Face Jobs (`hf_jobs`, which ships `hf_job_script` as the job's script; that script imports
nothing from rhythm_core).

May import `training` (the entry point it runs) and `artifacts`. Nothing is imported here, so a stage
that only needs `threads` does not load (or depend on) the Hugging Face Jobs client.

`gpu_check` (`rhythm gpu-check`, run before paying for GPU time) is the exception: it runs every stage
of the recipe on the machine at hand, so like `evaluation` it may import every package; only the CLI
imports it.
"""
