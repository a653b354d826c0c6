"""Runs started from Python (`make demo`) that the UI treats as its own: the run carries the origin of
the workspace's code location (`rhythm`, workspace.yaml), so it shows on the Overview timeline and
"Re-execute" launches it again from the UI; its steps run in this process, one at a time.

Dagster's `execute_in_process` records no code origin, and `execute_job` only the Python one; this
creates the run as a launch from the UI would (the job's snapshot, its execution plan, both origins)
and executes it here with the executor's `in_process` mode.
"""

from __future__ import annotations

import sys
from pathlib import Path

import dagster as dg

DEFINITIONS_MODULE = "rhythm_pipeline.definitions"
LOCATION_NAME = "rhythm"  # workspace.yaml's location_name
REPO_ROOT = Path(__file__).resolve().parents[1]


def execute_here(job_name: str, run_config: dict, instance: dg.DagsterInstance, run_id: str | None = None) -> str:
    """Execute `job_name` from this process as a run of the `rhythm` code location, its steps one at a
    time in this process unless `run_config` names an `execution` config of its own (the multiprocess
    executor: a process per step); returns the run id."""
    from dagster._core.definitions.reconstruct import ReconstructableRepository
    from dagster._core.execution.api import create_execution_plan, execute_run
    from dagster._core.remote_origin import InProcessCodeLocationOrigin, RemoteJobOrigin, RemoteRepositoryOrigin
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

    target = LoadableTargetOrigin(executable_path=sys.executable, module_name=DEFINITIONS_MODULE,
                                  working_directory=str(REPO_ROOT))
    repository = ReconstructableRepository.for_module(DEFINITIONS_MODULE, "defs", working_directory=str(REPO_ROOT))
    job = repository.get_reconstructable_job(job_name)
    config = {"execution": {"config": {"in_process": True}}, **run_config}
    plan = create_execution_plan(job, run_config=config, instance_ref=instance.get_ref())
    origin = RemoteJobOrigin(
        repository_origin=RemoteRepositoryOrigin(
            code_location_origin=InProcessCodeLocationOrigin(loadable_target_origin=target, location_name=LOCATION_NAME),
            repository_name=repository.get_definition().name),
        job_name=job_name)
    run = instance.create_run_for_job(job_def=job.get_definition(), execution_plan=plan, run_config=config,
                                      run_id=run_id, remote_job_origin=origin, job_code_origin=job.get_python_origin())
    execute_run(job, run, instance)
    return run.run_id
