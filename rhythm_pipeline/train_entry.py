"""The training subprocess behind ComputeResource(backend="local"), speaking Dagster Pipes.

It runs rhythm_core.training.entry.run_stage with the extras the asset sent, streams every training
log entry into the Dagster run, and writes result.json; a crash here fails the step, never the
Dagster process. On N processes (ComputeResource.processes, under rhythm_core.compute.launch) every
rank runs it; rank 0 alone speaks Pipes (the others only read the extras) and writes the result.
"""

import json
import logging
import os
import sys
import traceback

from dagster_pipes import PipesDefaultContextLoader, PipesEnvVarParamsLoader, open_dagster_pipes

from rhythm_core.processes import die_with_parent, parent_pid
from rhythm_core.store import write_result
from rhythm_core.training.distributed import is_main
from rhythm_core.training.entry import run_stage


def _train(extras: dict, on_log=None) -> dict:
    return run_stage(extras["stage"], extras["config"], extras["dataset"], extras["out"], extras.get("init"),
                     on_log=on_log, provenance=extras.get("provenance"))


def _other_rank() -> int:
    with PipesDefaultContextLoader().load_context(PipesEnvVarParamsLoader().load_context_params()) as context:
        extras = context["extras"]
    _train(extras)
    return 0


def main() -> int:
    die_with_parent(parent_pid())  # a stopped run leaves no model running on
    if not is_main():
        return _other_rank()
    with open_dagster_pipes() as pipes:
        extras = pipes.extras
        ranks = os.environ.get("WORLD_SIZE", "1")
        pipes.log.info(f"training {extras['stage']} in {extras['out']} (pid {os.getpid()}, {ranks} process(es))")
        # rhythm_core's warnings (a tracking failure, training data cut to max_length) reach the run's
        # log; training goes on.
        forward = logging.Handler(logging.WARNING)
        forward.emit = lambda record: pipes.log.warning(record.getMessage())
        logging.getLogger("rhythm_core").addHandler(forward)

        def on_log(entry: dict) -> None:
            pipes.log.info(json.dumps({k: (round(v, 5) if isinstance(v, float) else v) for k, v in entry.items()}))

        try:
            result = _train(extras, on_log)
        except Exception as exc:
            # The subprocess's stderr only reaches the compute logs; say why in the run's event log.
            pipes.log.error(f"training failed: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}")
            raise
        write_result(extras["out"], result)
    return 0


if __name__ == "__main__":
    from torch.distributed.elastic.multiprocessing.errors import record  # a failed rank's error reaches torchrun

    sys.exit(record(main)())
