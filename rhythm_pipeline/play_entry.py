"""The evaluation subprocess behind ComputeResource(backend="local").play, speaking Dagster Pipes.

It plays the students of one condition with rhythm_core.evaluation.entry.play_students (a model is
loaded here, never in the Dagster step), streams each finished player into the run's log and
reports the files' manifest entries as its custom message; a crash (a CUDA OOM) fails the step only.
"""

import os
import sys
import traceback

from dagster_pipes import open_dagster_pipes

from rhythm_core.evaluation.entry import play_students
from rhythm_core.processes import die_with_parent, parent_pid


def main() -> int:
    die_with_parent(parent_pid())  # a stopped run leaves no model running on
    with open_dagster_pipes() as pipes:
        extras = pipes.extras
        worker = f"{extras['worker']}: " if extras.get("worker") else ""  # one of several (ComputeResource.play_workers)
        pipes.log.info(f"{worker}playing {', '.join(extras['checkpoints'])} on {extras['config']['condition']} "
                       f"(pid {os.getpid()})")
        try:
            result = play_students(extras["config"], extras["checkpoints"], extras["out"], threads=extras.get("threads"),
                                   on_log=lambda entry: pipes.log.info(worker + entry["played"]))
        except Exception as exc:
            pipes.log.error(f"{worker}playing failed: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}")
            raise
        pipes.report_custom_message(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
