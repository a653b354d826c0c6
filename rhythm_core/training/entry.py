"""The training entry point: one process runs one stage (sft or grpo) and writes result.json.

    python -m rhythm_core.training.entry --stage sft --config config.json --dataset DIR --out DIR
    python -m rhythm_core.training.entry --stage grpo --config config.json --dataset DIR --init DIR --out DIR

The same command runs in a local subprocess (Dagster Pipes wraps it in rhythm_pipeline) and inside
a Hugging Face Job, so local and remote training share one code path. Each training log entry is
printed as a line `RHYTHM_LOG {json}`; the result is `<out>/result.json`. Under torchrun
(rhythm_core.compute.launch) every rank runs it; rank 0 alone prints the log and writes the result.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..processes import die_with_parent, parent_pid
from ..store import LOG_PREFIX, write_result
from .distributed import is_main, process_group


def run_stage(stage: str, config: dict, dataset: str, out: str, init: str | None = None, on_log=None,
              provenance: dict | None = None) -> dict:
    """One stage on this process, or on this rank of a data-parallel launch (then rank 0's `on_log`
    alone is called, and the other ranks' result is only their rank and steps)."""
    if not is_main():
        on_log = None
    with process_group():
        return _run_stage(stage, config, dataset, out, init, on_log, provenance)


def _run_stage(stage, config, dataset, out, init, on_log, provenance) -> dict:
    if stage == "sft":
        from .sft import SFTRunConfig, run_sft

        return run_sft(SFTRunConfig(**config), dataset, out, on_log=on_log, provenance=provenance)
    if stage == "grpo":
        from .grpo import GRPORunConfig, run_grpo

        if not init:
            raise ValueError("the grpo stage needs --init (the SFT checkpoint's model directory)")
        return run_grpo(GRPORunConfig(**config), dataset, init, out, on_log=on_log, provenance=provenance)
    raise ValueError(f"unknown stage {stage!r}; allowed: sft, grpo")


def run_stage_launched(stage: str, config: dict, dataset: str, out, init: str | None, provenance: dict | None,
                       processes: int, on_log=None) -> dict:
    """run_stage on `processes` data-parallel processes of this machine (this module under torchrun),
    this machine's cores split between them; rank 0's log entries reach `on_log`; returns its result."""
    import tempfile

    from ..compute.launch import run_launched
    from ..compute.threads import available_cores, thread_env

    on_log = on_log or (lambda entry: None)
    with tempfile.TemporaryDirectory(prefix="rhythm-stage-") as scratch:
        files = {"config": Path(scratch) / "config.json", "provenance": Path(scratch) / "provenance.json"}
        files["config"].write_text(json.dumps(config))
        files["provenance"].write_text(json.dumps(provenance or {}, default=str))
        args = ["--stage", stage, "--config", str(files["config"]), "--dataset", str(dataset), "--out", str(out),
                "--provenance", str(files["provenance"]), *(["--init", str(init)] if init else [])]

        def line(text: str) -> None:
            if text.startswith(LOG_PREFIX):
                on_log(json.loads(text[len(LOG_PREFIX):]))

        run_launched(__name__, args, processes, on_line=line,
                     env=thread_env(max(1, available_cores() // processes)))
    return json.loads((Path(out) / "result.json").read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rhythm_core.training.entry")
    parser.add_argument("--stage", required=True, choices=["sft", "grpo"])
    parser.add_argument("--config", required=True, help="JSON file with the stage's config fields")
    parser.add_argument("--dataset", required=True, help="saved sft_dataset directory")
    parser.add_argument("--init", default=None, help="model directory to start from (grpo)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--provenance", default=None, help="JSON file recorded in the model card")
    args = parser.parse_args(argv)
    die_with_parent(parent_pid())  # in a job, the process that started it
    config = json.loads(Path(args.config).read_text())
    provenance = json.loads(Path(args.provenance).read_text()) if args.provenance else None

    def emit(entry: dict) -> None:
        print(LOG_PREFIX + json.dumps(entry, default=str), flush=True)

    result = run_stage(args.stage, config, args.dataset, args.out, args.init, on_log=emit, provenance=provenance)
    if is_main():
        write_result(args.out, result)
    return 0


if __name__ == "__main__":
    from torch.distributed.elastic.multiprocessing.errors import record  # a failed rank's error reaches torchrun

    sys.exit(record(main)())
