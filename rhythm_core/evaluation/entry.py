"""The evaluation entry point: one process plays students (checkpoints) on one condition's evaluation
seeds and writes their trajectory files, where training runs (a local subprocess or a Hugging Face
Job), so no Dagster process loads a model.

    python -m rhythm_core.evaluation.entry --config config.json --checkpoints DIR --out DIR

config.json: {"condition", "seeds", "sampling", "players": {name: folder under --checkpoints}, and
optionally "recorded_as": {name: the model path the records name} and "threads"}. The
files are `<out>/<player>__<condition>.jsonl`; `<out>/result.json` holds their manifest entries
(`files`). Each finished player is printed as a line `RHYTHM_LOG {json}`, as training logs are.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ..processes import die_with_parent, parent_pid
from ..store import LOG_PREFIX, write_result
from .rollouts import play_condition


def play_students(config: dict, checkpoints: dict[str, str], out, *, on_log: Callable[[dict], None] | None = None,
                  threads: int | None = None) -> dict:
    """Play each checkpoint (name -> model folder) on `config`'s condition and seeds into `out`;
    returns {"files": manifest entries, "wall_s"}. `threads`: the torch threads to use (default: as set)."""
    from ..compute.threads import limit_threads
    from ..training.generation import SamplingConfig

    if threads is not None:
        limit_threads(threads)
    start = time.perf_counter()
    on_log = on_log or (lambda entry: None)
    Path(out).mkdir(parents=True, exist_ok=True)
    files = play_condition(checkpoints, config["condition"], config["seeds"], out,
                           sampling=SamplingConfig(**config.get("sampling", {})), baselines=[],
                           log=lambda line: on_log({"played": line}), recorded_as=config.get("recorded_as"))
    return {"files": files, "condition": config["condition"], "generation": generation_settings(),
            "wall_s": round(time.perf_counter() - start, 3)}


def generation_settings() -> dict:
    """How the students generated here: the attention kernels and whether prompt states were reused
    (always where the model allows it; on CUDA within training/prompt_cache.prompt_cache_budget)."""
    from ..training.generation import attention_backend
    from ..training.models import device_name

    device = device_name()
    return {"device": device, "attention": attention_backend(device), "prompt_cache": True}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rhythm_core.evaluation.entry")
    parser.add_argument("--config", required=True, help="JSON file: condition, seeds, sampling, players")
    parser.add_argument("--checkpoints", required=True, help="folder holding each player's model folder")
    parser.add_argument("--out", required=True, help="folder the trajectory files and result.json go to")
    args = parser.parse_args(argv)
    die_with_parent(parent_pid())  # in a job, the process that started it
    config = json.loads(Path(args.config).read_text())
    checkpoints = {name: str(Path(args.checkpoints) / folder) for name, folder in config["players"].items()}

    def emit(entry: dict) -> None:
        print(LOG_PREFIX + json.dumps(entry, default=str), flush=True)

    result = play_students(config, checkpoints, args.out, on_log=emit, threads=config.get("threads"))
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
