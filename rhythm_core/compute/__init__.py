"""Remote compute backends for the training entry point (no Dagster here).

May import `training` (the entry point it runs) and `artifacts`. `hf_job_script` is the script a
Hugging Face job runs (`hf_jobs` ships its source); it imports nothing from rhythm_core.
"""

from .hf_jobs import HFJobError, HFJobSpec, build_wheel, render_job_script, run_training_job

__all__ = ["HFJobError", "HFJobSpec", "build_wheel", "render_job_script", "run_training_job"]
