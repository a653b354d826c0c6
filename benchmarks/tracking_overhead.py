"""What MLflow tracking costs a training run: the same small SFT with report_to mlflow and with
report_to none, side by side, each in a fresh process as the sft_checkpoint asset runs it (the
`rhythm_core.training.entry` command; the parent opens the MLflow run and hands its id over in the
environment, as the asset does), plus the one-time costs: importing mlflow and creating a fresh
SQLite store.

    python benchmarks/tracking_overhead.py                 # 40 + 20 short-context steps, 2 repeats
    python benchmarks/tracking_overhead.py --steps 120 --short-steps 0 --repeats 3

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_file import write_result


def timed(command: list[str], env: dict | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--short-steps", type=int, default=20)
    parser.add_argument("--logging-steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    from rhythm_core.data.stages import dataset_stage
    from rhythm_core.teacher.settings import TeacherSettings
    from rhythm_core.teacher.stage import teacher_stage
    from rhythm_core.tracking import Tracker, local_store_uri

    root = Path(tempfile.mkdtemp(prefix="tracking-overhead-"))
    trajectories = teacher_stage(TeacherSettings(backend="bayes"), "continuous", f"1000-{999 + args.episodes}", root)
    dataset = dataset_stage(trajectories, root)
    config = {"max_steps": args.steps, "short_context_steps": args.short_steps, "logging_steps": args.logging_steps}

    python = sys.executable
    import_s = timed([python, "-c", "import mlflow"])
    create_s = timed([python, "-c", "import sys; from rhythm_core.tracking import Tracker; "
                                    "assert Tracker.for_root(sys.argv[1]).experiment_id()", str(root)])
    reuse_s = timed([python, "-c", "import sys; from rhythm_core.tracking import Tracker; "
                                   "assert Tracker.for_root(sys.argv[1]).experiment_id()", str(root)])
    tracker = Tracker.for_root(root)
    print(f"store {local_store_uri(root)}")
    print(f"import mlflow (fresh process): {import_s:.1f} s; create the SQLite store + experiment: {create_s:.1f} s "
          f"(once per storage root); open the existing store: {reuse_s:.1f} s")

    walls: dict[str, list[float]] = {"none": [], "mlflow": []}
    for repeat in range(args.repeats):
        for report_to in ("none", "mlflow"):
            out = root / f"sft-{report_to}-{repeat}"
            (root / "config.json").write_text(json.dumps({**config, "report_to": report_to}))
            run_id = tracker.start_run(f"benchmark-{report_to}-{repeat}", params=config) if report_to == "mlflow" else None
            env = tracker.subprocess_env(run_id)
            wall = timed([python, "-m", "rhythm_core.training.entry", "--stage", "sft", "--config",
                          str(root / "config.json"), "--dataset", dataset["path"], "--out", str(out)], env)
            result = json.loads((out / "result.json").read_text())
            points = ""
            if run_id:
                tracker.finish_training(run_id, result)
                history = tracker.client.get_metric_history(run_id, "loss")
                points = f", {len(history)} loss points in MLflow"
            walls[report_to].append(wall)
            print(f"report_to={report_to:6s} repeat {repeat}: process {wall:.1f} s, train_s {result['train_s']} s, "
                  f"run_sft wall {result['wall_s']} s{points}")
    none, mlflow = statistics.median(walls["none"]), statistics.median(walls["mlflow"])
    print(f"median process wall: none {none:.1f} s, mlflow {mlflow:.1f} s, difference {mlflow - none:+.1f} s "
          f"({(mlflow - none) / none:+.1%}); steps {args.short_steps} + {args.steps}, logging every "
          f"{args.logging_steps}")
    write_result("tracking_overhead", {
        "steps": args.steps, "short_steps": args.short_steps, "logging_steps": args.logging_steps,
        "repeats": args.repeats, "import_mlflow_s": round(import_s, 1), "create_store_s": round(create_s, 1),
        "open_store_s": round(reuse_s, 1), "process_wall_s": {k: [round(w, 1) for w in v] for k, v in walls.items()},
        "median_difference_s": round(mlflow - none, 1), "median_difference": round((mlflow - none) / none, 3)},
        question="What does MLflow tracking cost a training run?")


if __name__ == "__main__":
    main()
