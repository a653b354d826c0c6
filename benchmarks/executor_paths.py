"""The whole lineage two ways, in one run: its runs in-process (`python -m rhythm_pipeline.ops lineage`) vs
Dagster's default executor path (`dagster job execute` of each piece: the teacher shard, the training half,
evaluation window 0, on the multiprocess executor the UI's backfills use). Prints the wall time of each, the
ratio, and every step's duration side by side. Asserts nothing.

    python benchmarks/executor_paths.py                              # demo settings
    python benchmarks/executor_paths.py --variant spawn='{"forkserver": false}' \\
        --variant torch2='{"torch_steps_at_once": 2}'                 # executor settings side by side
    python benchmarks/executor_paths.py --variant main='{}' --skip-in-process
    python benchmarks/executor_paths.py --reevaluate      # then the weekly `reevaluate` job both ways
    python benchmarks/executor_paths.py --regrade --skip-multiprocess   # then `regrade` under v2 (target < 10%)

Every path runs in a fresh process on its own temporary DAGSTER_HOME, one after the other (never
at the same time). A variant is executor config (`execution: config:` of rhythm_multiprocess:
max_concurrent, torch_steps_at_once, forkserver). `--config` adds run config to every path (e.g.
smaller seeds for a quick look).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_file import write_result

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
RUN_TIMEOUT_S = 3600


def fresh_home(root: Path, name: str) -> Path:
    home = root / name
    home.mkdir(parents=True)
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    return home


def run_path(home: Path, command: list[str], **extra_env: str) -> float:
    env = {**os.environ, "DAGSTER_HOME": str(home), **extra_env}
    env.pop("RHYTHM_ARTIFACTS", None)  # artifacts under the instance's storage, like a user's run
    log = home / "run.log"
    start = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.run(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=RUN_TIMEOUT_S)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise SystemExit(f"{' '.join(command)} failed with {proc.returncode} (DAGSTER_HOME={home}):\n{tail}")
    return wall


STEP_TIMES = """
import json, dagster as dg
from dagster import DagsterEventType
instance = dg.DagsterInstance.get()
runs = instance.get_runs()  # every run since the last read: the pieces of one path
seen = json.loads(open(".seen").read()) if __import__("os").path.exists(".seen") else []
runs = [r for r in runs if r.run_id not in seen]
open(".seen", "w").write(json.dumps(seen + [r.run_id for r in runs]))
starts, times = {}, {}
for record in [r for run in runs for r in instance.all_logs(run.run_id)]:
    event = record.dagster_event
    if event is None or event.step_key is None:
        continue
    if event.event_type == DagsterEventType.STEP_START:
        starts[event.step_key] = record.timestamp
    elif event.event_type in (DagsterEventType.STEP_SUCCESS, DagsterEventType.STEP_FAILURE):
        times[event.step_key] = [starts.get(event.step_key), record.timestamp, event.event_type_value]
print(json.dumps({"status": ",".join(sorted({run.status.value for run in runs})), "steps": times}))
"""


def step_times(home: Path) -> dict:
    """Per step of the runs since the last call: (start, end, outcome) from their event logs, read in a
    process of its own."""
    out = subprocess.run([sys.executable, "-c", STEP_TIMES.replace(".seen", str(home / "seen.json"))], cwd=REPO,
                         env={**os.environ, "DAGSTER_HOME": str(home)}, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", action="append", default=[],
                        help="NAME=JSON executor config for the multiprocess path; repeatable (default: one variant "
                             "'default' with the definitions' own settings)")
    parser.add_argument("--config", default="{}", help="run config JSON for every path (ops: ...)")
    parser.add_argument("--skip-in-process", action="store_true")
    parser.add_argument("--reevaluate", action="store_true",
                        help="after the lineage, run the `reevaluate` job (the weekly schedule's, next seed window) "
                             "the same way on each instance")
    parser.add_argument("--regrade", action="store_true",
                        help="after the in-process lineage, switch to grader v2 and run the `regrade` job (the "
                             "unsynced assets re-materialized from stored trajectories)")
    parser.add_argument("--skip-multiprocess", action="store_true", help="run no multiprocess variant")
    parser.add_argument("--keep", type=Path, default=None, help="keep the instances under this folder")
    args = parser.parse_args()
    variants = dict(v.split("=", 1) for v in args.variant) or {"default": "{}"}
    run_config = json.loads(args.config)

    shard = "1000-2999"  # the demo's

    def partition(key: str) -> list[str]:
        return ["--tags", json.dumps({"dagster/partition": key})]
    root = Path(tempfile.mkdtemp(prefix="rhythm-executor-")) if args.keep is None else args.keep
    results: dict[str, dict] = {}

    def record(path: str, home: Path, wall: float) -> None:
        results[path] = {"wall_s": wall, **step_times(home)}
        print(f"{path}: {wall:.1f} s", flush=True)

    if not args.skip_in_process:
        home = fresh_home(root, "in_process")
        ops = [sys.executable, "-m", "rhythm_pipeline.ops"]
        record("in_process", home, run_path(home, [*ops, "lineage", "--shards", shard, "--window", "0", "--config",
                                                   json.dumps(run_config)]))
        if args.reevaluate:
            record("in_process reevaluate", home, run_path(home, [*ops, "run", "reevaluate", "--partition", "1"]))
        if args.regrade:
            record("in_process regrade (v2)", home, run_path(home, [*ops, "run", "regrade", "--partition", "0"],
                                                             RHYTHM_GRADER="v2"))
    for name, executor in ({} if args.skip_multiprocess else variants).items():
        home = fresh_home(root, f"multiprocess_{name}")
        execution = {"execution": {"config": json.loads(executor)}} if json.loads(executor) else {}
        execute = [str(BIN / "dagster"), "job", "execute", "-m", "rhythm_pipeline.definitions", "-j"]
        started = time.perf_counter()
        run_path(home, [str(BIN / "rhythm"), "shards", "add", shard])
        for job, extra in (("teacher_data", partition(shard)), ("training", []), ("reevaluate", partition("0"))):
            config_file = home / f"{job}.json"  # YAML is a superset of JSON
            ops = {k: v for k, v in (run_config.get("ops") or {}).items()
                   if (k == "teacher_trajectories") == (job == "teacher_data")
                   and (k == "eval_rollouts") == (job == "reevaluate")}
            config_file.write_text(json.dumps({**({"ops": ops} if ops else {}), **execution}))
            run_path(home, [*execute, job, *extra, "-c", str(config_file)])
        record(f"multiprocess:{name}", home, time.perf_counter() - started)
        if args.reevaluate:
            (home / "reevaluate.json").write_text(json.dumps(execution))
            record(f"multiprocess:{name} reevaluate", home, run_path(home, [
                *execute, "reevaluate", *partition("1"), "-c", str(home / "reevaluate.json")]))

    paths = list(results)
    steps = sorted({s for r in results.values() for s in r["steps"]},
                   key=lambda s: min(r["steps"][s][0] or 0 for r in results.values() if s in r["steps"]))
    print(f"\n{os.cpu_count()} CPUs; instances under {root}\n")
    print("| step | " + " | ".join(paths) + " |")
    print("|---|" + "---|" * len(paths))
    for step in steps:
        cells = []
        for path in paths:
            start, end, outcome = results[path]["steps"].get(step, (None, None, None))
            cells.append("–" if end is None else f"{end - start:.1f}" + ("" if outcome == "STEP_SUCCESS" else " FAILED"))
        print(f"| {step} | " + " | ".join(cells) + " |")
    print("| **whole run (wall s)** | " + " | ".join(f"**{results[p]['wall_s']:.1f}**" for p in paths) + " |")
    for path in paths:
        base = "in_process reevaluate" if path.endswith("reevaluate") else "in_process"
        if path.startswith("multiprocess") and base in results:
            print(f"{path} / {base} = {results[path]['wall_s'] / results[base]['wall_s']:.2f}x "
                  f"(status {results[path]['status']})")
    figures = {path: {"wall_s": round(r["wall_s"], 1), "status": r["status"],
                      "steps_s": {step: (None if end is None or start is None else round(end - start, 1))
                                  for step, (start, end, _outcome) in r["steps"].items()}}
               for path, r in results.items()}
    write_result("executor_paths", {"variants": variants, "run_config": run_config, "paths": figures},
                 question="What does the UI's multiprocess path cost against the in-process run of the same lineage?")
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
