"""`make demo`: run the main job (the whole lineage) on the embedded default instance, quietly.

The terminal gets one line when each stage starts and ends (stage i of n, seconds, what it made),
then the result table and the asset checks. Everything else — Dagster's event stream, library logs
and warnings, the training subprocesses' output, progress bars — goes to a log file under the
instance's storage, named at the start and the end. The run and its events are in the Dagster UI of
the same DAGSTER_HOME as always (`make ui`); only this entry point is quiet.

`RHYTHM_DEMO_RUN_CONFIG` (a JSON file of run config) overrides the asset defaults, for a small run.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path

# Before any library import: the training subprocesses inherit these, and transformers, datasets
# and tqdm read them when imported.
QUIET_ENV = {"TRANSFORMERS_VERBOSITY": "error", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1", "TQDM_DISABLE": "1",
             "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1", "PYTHONWARNINGS": "ignore"}

JOB = "rhythm_lineage"


def stage_summary(asset: str, metadata: dict) -> str:
    """A few words from an asset's materialization metadata (plain values) for its progress line."""
    def get(key, fmt="{}"):
        value = metadata.get(key)
        return None if value is None else fmt.format(value)

    parts = {
        "teacher_trajectories": [get("episodes", "{} teacher weeks"), get("invalid_answer_rate", "invalid {:.1%}")],
        "reeval_report": [get("episodes", "{} weeks re-graded"), get("teacher_mean", "teacher {:.3f}"),
                          get("heuristic_mean", "heuristic {:.3f}")],
        "sft_dataset": [get("examples_train", "{} training examples"), get("episodes_validation", "{} validation weeks")],
        "sft_checkpoint": [get("steps", "{} steps"), get("final_train_loss", "final loss {:.3f}")],
        "grpo_checkpoint": [get("steps", "{} steps"), get("validation_difference", "vs SFT on validation {:+.4f}"),
                            get("headline_student", "headline {}")],
        "eval_rollouts": [get("episodes", "{} weeks played")],
        "eval_results": [get("headline_student", "headline {}")],
        "registered_student": [get("decision"), get("alias", "alias {}")],
    }.get(asset, [])
    return ", ".join(p for p in parts if p)


def stage_line(index: int, total: int, asset: str, state: str, seconds: float | None = None, summary: str = "") -> str:
    """`[3/8] sft_checkpoint  done in 412 s: 240 steps, final loss 0.812`."""
    line = f"[{index}/{total}] {asset:<21} {state}"
    if seconds is not None:
        line += f" in {seconds:.0f} s"
    return line + (f": {summary}" if summary else "")


def check_lines(evaluations) -> list[str]:
    """One line per asset check: passed, or failed with its severity and description."""
    lines = []
    for evaluation in evaluations:
        status = "passed" if evaluation["passed"] else f"FAILED ({evaluation['severity']})"
        lines.append(f"  {evaluation['asset']}.{evaluation['check']}: {status}"
                     + ("" if evaluation["passed"] else f": {evaluation['description']}"))
    return lines


def _plain(metadata) -> dict:
    return {key: getattr(value, "value", value) for key, value in metadata.items()}


def _watch(instance, run_id: str, assets: list[str], say, done: threading.Event) -> None:
    """Follow the run's events in the instance's event log and print the stages' progress. A stage
    starts with its first step (eval_rollouts has several: a plan and one play step per condition)
    and ends with its materialization; a failed step ends it too."""
    from dagster import DagsterEventType

    started: dict[str, float] = {}
    ended: set[str] = set()
    seen = 0
    while True:
        finished = done.is_set()
        events = instance.all_logs(run_id)
        for entry in events[seen:]:
            event = entry.dagster_event
            if event is None:
                continue
            if event.event_type == DagsterEventType.ASSET_MATERIALIZATION:
                asset = event.asset_key.to_user_string()
            else:
                asset = (event.step_key or "").split(".")[0]
            if asset not in assets:
                continue
            index, total = assets.index(asset) + 1, len(assets)
            if event.event_type == DagsterEventType.STEP_START and asset not in started:
                started[asset] = entry.timestamp
                say(stage_line(index, total, asset, "running"))
            elif event.event_type == DagsterEventType.STEP_SUCCESS and "." in event.step_key and asset not in ended:
                say(stage_line(index, total, asset, f"{event.step_key.split('.', 1)[1]} done",
                               entry.timestamp - started.get(asset, entry.timestamp)))
            elif event.event_type == DagsterEventType.ASSET_MATERIALIZATION:
                ended.add(asset)
                metadata = _plain(event.event_specific_data.materialization.metadata)
                say(stage_line(index, total, asset, "done", entry.timestamp - started.get(asset, entry.timestamp),
                               stage_summary(asset, metadata)))
            elif event.event_type == DagsterEventType.STEP_FAILURE:
                say(stage_line(index, total, asset, f"FAILED ({event.step_key})",
                               entry.timestamp - started.get(asset, entry.timestamp)))
        seen = len(events)
        if finished:
            return
        done.wait(1.0)


def main() -> int:
    os.environ.update({k: v for k, v in QUIET_ENV.items() if k not in os.environ})
    import logging
    import warnings

    import dagster as dg

    from rhythm_core import CPU_KERNELS
    from rhythm_pipeline.definitions import defs

    instance = dg.DagsterInstance.get()  # DAGSTER_HOME (the Makefile points it at ./dagster_home)
    log_dir = Path(instance.storage_directory()) / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"demo-{datetime.now():%Y%m%d-%H%M%S}.log"
    terminal = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)

    def say(line: str = "") -> None:
        terminal.write(line + "\n")

    job = defs.resolve_job_def(JOB)
    order = [key.to_user_string() for key in defs.resolve_asset_graph().toposorted_asset_keys]
    assets = [a for a in order if dg.AssetKey(a) in job.asset_layer.executable_asset_keys]
    run_config = {}
    if os.environ.get("RHYTHM_DEMO_RUN_CONFIG"):
        run_config = json.loads(Path(os.environ["RHYTHM_DEMO_RUN_CONFIG"]).read_text())
    run_id = str(uuid.uuid4())  # known before the run starts, so the watcher can follow it
    say(f"rhythm demo: job {JOB}, run {run_id}, {len(assets)} stages (DAGSTER_HOME={instance.root_directory})")
    say(f"full log: {log_path}")
    say(f"cpu kernels: {CPU_KERNELS}")

    # Everything this process and its subprocesses write to stdout/stderr goes to the log file; the
    # progress lines go to the saved terminal.
    sys.stdout.flush()
    sys.stderr.flush()
    log_file = open(log_path, "a", buffering=1)  # noqa: SIM115 - open for the whole run
    os.dup2(log_file.fileno(), sys.stdout.fileno())
    os.dup2(log_file.fileno(), sys.stderr.fileno())
    logging.captureWarnings(True)
    warnings.simplefilter("default")

    done = threading.Event()
    watcher = threading.Thread(target=_watch, args=(instance, run_id, assets, say, done), daemon=True)
    watcher.start()
    start = time.perf_counter()
    try:
        result = job.execute_in_process(instance=instance, run_config=run_config, run_id=run_id, raise_on_error=False)
    finally:
        done.set()
        watcher.join(timeout=30)
    wall = time.perf_counter() - start

    say(f"\nrun {run_id}: {'SUCCESS' if result.success else 'FAILURE'} in {wall:.0f} s")
    for event in result.get_asset_materialization_events():
        meta = event.event_specific_data.materialization.metadata
        if "results" in meta:
            say(meta["results"].value)
            say(f"eval_results.json, final_scores.png, belief_accuracy.png in {Path(meta['artifact_path'].value).parent}")
    evaluations = [{"asset": e.asset_key.to_user_string(), "check": e.check_name, "passed": e.passed,
                    "severity": e.severity.value, "description": e.description}
                   for e in result.get_asset_check_evaluations()]
    if evaluations:
        say("asset checks:")
        for line in check_lines(evaluations):
            say(line)
    if not result.success:
        for event in result.all_events:
            if event.is_step_failure:
                error = event.step_failure_data.error
                say(f"{event.step_key} failed: {error.message.strip() if error else 'see the log'}")
    say(f"full log: {log_path}")
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main())
