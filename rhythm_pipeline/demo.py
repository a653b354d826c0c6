"""`make demo`: the whole lineage on the embedded default instance as one backfill, quietly.

The lineage spans three partitionings (teacher shards, the unpartitioned training half, evaluation
windows), so it is one asset backfill of the `rhythm` code location, as the UI's "Materialize all" makes
it: the demo starts `dagster dev` on the instance, launches the backfill through Dagster's GraphQL API
(the teacher shard `1000-2999`, the training half, evaluation window 0 and the registry), and the daemon
runs it, one run per piece, in dependency order. The terminal gets one line when each stage starts and
ends (stage i of n, seconds, what it made), then the result table and the asset checks. Everything else —
the server's and Dagster's output, library logs, the training subprocesses' output — goes to a log file
under the instance's storage, named at the start and the end. The backfill and its runs stay in the UI of
the same DAGSTER_HOME (`make ui`), where they re-execute like any other.

`RHYTHM_DEMO_RUN_CONFIG` (a JSON file of run config) overrides the asset defaults, and `RHYTHM_DEMO_SHARD`
the teacher shard, for a small run.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

# Before any library import: the training subprocesses inherit these, and transformers, datasets
# and tqdm read them when imported.
QUIET_ENV = {"TRANSFORMERS_VERBOSITY": "error", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1", "TQDM_DISABLE": "1",
             "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1", "PYTHONWARNINGS": "ignore"}



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
    """A line's shape: `[4/8] sft_checkpoint        done in N s: N steps, final loss L`."""
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


class Progress:
    """Progress lines from a stage's log messages: training's `{"step": ..}` entries as step / total
    and the time left at the pace of the last `window_s` seconds (SFT's short steps come first), at
    most one line every `every_s` seconds per stage; and each student's finished play."""

    def __init__(self, every_s: float = 10.0, window_s: float = 30.0):
        self.every_s, self.window_s = every_s, window_s
        self.total: dict[str, int] = {}
        self.seen: dict[str, list[tuple[float, int]]] = {}  # stage -> recent (time, step) entries
        self.last_said: dict[str, float] = {}

    def line(self, asset: str, message: str, now: float) -> str | None:
        if message.startswith("student") and " episodes in " in message:  # "student_sft on ood: 50 episodes in 12.1 s, ..."
            return message.split(", prompt tokens")[0]
        try:
            entry = json.loads(message)
        except ValueError:
            return None
        if not isinstance(entry, dict) or "step" not in entry:
            return None
        if "total_steps" in entry:
            self.total[asset] = int(entry["total_steps"])
        step, total = int(entry["step"]), self.total.get(asset)
        if not total or total < 1 or step <= 0:
            return None
        seen = self.seen.setdefault(asset, [])
        seen.append((now, step))
        while len(seen) > 2 and now - seen[1][0] >= self.window_s:
            seen.pop(0)
        if now - self.last_said.get(asset, seen[0][0]) < self.every_s or step >= total:
            return None
        self.last_said[asset] = now
        (then, before) = seen[0]
        if step <= before:
            return f"step {step}/{total}"
        left = (now - then) / (step - before) * (total - step)
        return f"step {step}/{total}, " + (f"about {round(left / 60)} min left" if left >= 90 else
                                           f"about {max(10, round(left, -1)):.0f} s left")


def _plain(metadata) -> dict:
    return {key: getattr(value, "value", value) for key, value in metadata.items()}


def _watch(instance, runs_of, assets: list[str], say, done: threading.Event) -> None:
    """Follow the events of the runs `runs_of()` lists (the backfill's, as the daemon launches them) and
    print the stages' progress. A stage starts with its first step (eval_rollouts has several: a plan and
    one play step per condition) and ends with its materialization; a failed step ends it too."""
    from dagster import DagsterEventType

    started: dict[str, float] = {}
    ended: set[str] = set()
    progress = Progress()
    seen: dict[str, int] = {}
    while True:
        finished = done.is_set()
        for run_id in runs_of():
            events = instance.all_logs(run_id)
            for entry in events[seen.get(run_id, 0):]:
                event = entry.dagster_event
                if event is None:
                    asset = (entry.step_key or "").split(".")[0]
                    if asset in assets and asset not in ended:
                        line = progress.line(asset, entry.user_message, entry.timestamp)
                        if line:
                            say(stage_line(assets.index(asset) + 1, len(assets), asset, line))
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
            seen[run_id] = len(events)
        if finished:
            return
        done.wait(1.0)


def main() -> int:
    os.environ.update({k: v for k, v in QUIET_ENV.items() if k not in os.environ})
    from rhythm_core.processes import sigterm_interrupts

    with sigterm_interrupts():  # `kill` stops the run as Ctrl-C does; every process it started dies with it
        return _run_demo()


# The demo's backfill: the teacher's default weeks as one shard, evaluation window 0, everything between.
DEMO_SHARD = "1000-2999"
DEMO_WINDOW = "0"
DEMO_TAG = "rhythm/demo"


def demo_partitions(assets: list[str], partitioned: dict[str, str], shard: str = DEMO_SHARD) -> dict[str, list[str] | None]:
    """Each asset of the backfill with its partitions: the demo's shard, its window, or None (unpartitioned)."""
    chosen = {"teacher_shards": [shard], "eval_windows": [DEMO_WINDOW]}
    return {asset: chosen[partitioned[asset]] if asset in partitioned else None for asset in assets}


def _run_demo() -> int:
    import logging
    import warnings

    import dagster as dg

    from rhythm_core import CPU_KERNELS
    from rhythm_core.errors import UserError
    from rhythm_core.evaluation.steps import remove_run_staging
    from rhythm_core.teacher.shards import shard_range
    from rhythm_pipeline.backfills import FINISHED, backfill_status, cancel_backfill, launch_asset_backfill
    from rhythm_pipeline.definitions import defs
    from rhythm_pipeline.defs.partitions import BACKFILL_TAG, TEACHER_SHARDS
    from rhythm_pipeline.defs.resources import artifact_store_from_env
    from rhythm_pipeline.dev_server import dev_server

    instance = dg.DagsterInstance.get()  # DAGSTER_HOME (the Makefile points it at ./dagster_home)
    try:  # a store that cannot be used is one line before any work (RHYTHM_ARTIFACTS)
        artifact_store_from_env().store(instance)
    except UserError as exc:
        print(f"rhythm demo: {exc}", file=sys.stderr)
        return 2
    log_dir = Path(instance.storage_directory()) / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"demo-{datetime.now():%Y%m%d-%H%M%S}.log"
    terminal = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)

    def say(line: str = "") -> None:
        terminal.write(line + "\n")

    specs = {spec.key.to_user_string(): spec for spec in defs.resolve_all_asset_specs()}
    assets = [key.to_user_string() for key in defs.resolve_asset_graph().toposorted_asset_keys]
    partitioned = {name: ("teacher_shards" if spec.partitions_def == TEACHER_SHARDS else "eval_windows")
                   for name, spec in specs.items() if spec.partitions_def is not None}
    run_config = {"execution": {"config": {"in_process": True}}}  # each run's steps in its own process, every core
    if os.environ.get("RHYTHM_DEMO_RUN_CONFIG"):
        run_config.update(json.loads(Path(os.environ["RHYTHM_DEMO_RUN_CONFIG"]).read_text()))
    shard = os.environ.get("RHYTHM_DEMO_SHARD") or DEMO_SHARD
    try:
        shard_range(shard)
    except ValueError as exc:
        print(f"rhythm demo: RHYTHM_DEMO_SHARD: {exc}", file=sys.stderr)
        return 2
    if shard not in instance.get_dynamic_partitions(TEACHER_SHARDS.name):
        instance.add_dynamic_partitions(TEACHER_SHARDS.name, [shard])
    say(f"rhythm demo: one backfill of {len(assets)} stages, teacher shard {shard}, evaluation window "
        f"{DEMO_WINDOW} (DAGSTER_HOME={instance.root_directory})")
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

    start = time.perf_counter()
    backfill_id, status = None, "not launched"

    def runs_of() -> list[str]:
        if backfill_id is None:
            return []
        records = instance.get_run_records(filters=dg.RunsFilter(tags={BACKFILL_TAG: backfill_id}))
        return [r.dagster_run.run_id for r in sorted(records, key=lambda r: r.create_timestamp)]

    done = threading.Event()
    watcher = threading.Thread(target=_watch, args=(instance, runs_of, assets, say, done), daemon=True)
    interrupted = False
    with dev_server(Path(instance.root_directory), log_path) as server:
        try:
            backfill_id = launch_asset_backfill(server, demo_partitions(assets, partitioned, shard), run_config=run_config,
                                                title="make demo", tags={DEMO_TAG: "true"})
            say(f"backfill {backfill_id}: its runs start as the daemon launches them")
            watcher.start()
            while (status := backfill_status(server, backfill_id)) not in FINISHED:
                time.sleep(2)
        except KeyboardInterrupt:
            interrupted, status = True, "interrupted"
            if backfill_id is not None:
                with contextlib.suppress(Exception):  # the server stops next, and every run with it
                    cancel_backfill(server, backfill_id)
        finally:
            done.set()
            if watcher.is_alive():
                watcher.join(timeout=30)
    if interrupted:  # the server and its runs are gone: say so in the instance, and drop what they staged
        for run_id in runs_of():
            run = instance.get_run_by_id(run_id)
            if run is not None and not run.is_finished:
                instance.report_run_failed(run)
            remove_run_staging(artifact_store_from_env().store(instance), run_id)
    wall = time.perf_counter() - start

    run_ids = runs_of()
    runs = [instance.get_run_by_id(run_id) for run_id in run_ids]
    success = status in ("COMPLETED", "COMPLETED_SUCCESS") and all(
        run.status == dg.DagsterRunStatus.SUCCESS for run in runs)
    events = [entry.dagster_event for run_id in run_ids for entry in instance.all_logs(run_id)
              if entry.dagster_event is not None]
    outcome = "SUCCESS" if success else f"FAILURE ({status})"
    say(f"\nbackfill {backfill_id}: {outcome} in {wall:.0f} s ({len(runs)} runs)")
    materialized = {}
    for event in events:
        if event.event_type == dg.DagsterEventType.ASSET_MATERIALIZATION:
            meta = event.event_specific_data.materialization.metadata
            materialized[event.asset_key.to_user_string()] = meta
            if "results" in meta:
                say(meta["results"].value)
                say(f"eval_results.json, final_scores.png, belief_accuracy.png in "
                    f"{str(meta['artifact_path'].value).rsplit('/', 1)[0]}")
    evaluations = [{"asset": e.asset_key.to_user_string(), "check": e.check_name, "passed": e.passed,
                    "severity": e.severity.value, "description": e.description}
                   for e in (event.event_specific_data for event in events
                             if event.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION)]
    if evaluations:
        say("asset checks:")
        for line in check_lines(evaluations):
            say(line)
    if not success:
        for event in events:
            if event.is_step_failure:
                error = event.step_failure_data.error
                say(f"{event.step_key} failed: {error.message.strip() if error else 'see the log'}")
    for line in where_to_look(materialized, backfill_id):
        say(line)
    say(f"full log: {log_path}")
    return 130 if interrupted else 0 if success else 1


def where_to_look(materialized: dict, backfill_id: str | None) -> list[str]:
    """The closing lines: where the students are and how to open the backfill."""
    lines = []
    for asset, name in (("grpo_checkpoint", "GRPO student"), ("sft_checkpoint", "SFT student")):
        if asset in materialized and "artifact_path" in materialized[asset]:
            lines.append(f"{name}: {materialized[asset]['artifact_path'].value}")
    lines.append(f"trace a score to its data: .venv/bin/rhythm lineage eval_results; the backfill in the UI: make ui, "
                 f"then http://127.0.0.1:3000/runs/b/{backfill_id}")
    return lines

if __name__ == "__main__":
    sys.exit(main())
