"""Remote compute backends for the training entry point (no Dagster here).

May import `training` (the entry point it runs) and `artifacts`.
"""

from .hf_jobs import HFJobError, HFJobSpec, build_wheel, render_job_script, run_training_job

__all__ = ["HFJobError", "HFJobSpec", "build_wheel", "render_job_script", "run_training_job"]
