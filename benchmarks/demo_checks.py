"""The demo's lineage over SFT seeds and CPU kernel settings: its figures and every asset check.

    python benchmarks/demo_checks.py --out /tmp/checks --seeds 0,1,2 --kernels avx2,native

Each (kernels, seed) runs the `rhythm_lineage` job (the demo's defaults, `sft_checkpoint.seed` set)
in a fresh process on its own instance, then prints one JSON line: wall seconds, the SFT checkpoint's
data version, SFT loss, the GRPO gate, each student's recovery and belief MAE per condition, the
belief gap to the teacher with its standard error, and every asset check's outcome. The teacher's
weeks are shared through RHYTHM_ARTIFACTS' teacher work file, so only the first run plays them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(home: Path, artifacts: Path, kernels: str, seed: int) -> dict:
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home), "RHYTHM_ARTIFACTS": str(artifacts), "RHYTHM_CPU_KERNELS": kernels}
    env.pop("ATEN_CPU_CAPABILITY", None)
    config = {"ops": {"sft_checkpoint": {"config": {"seed": seed}}}}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "rhythm_pipeline.ops", "run", "rhythm_lineage", "--config",
                           json.dumps(config)], cwd=REPO, env=env, capture_output=True, text=True)
    wall = round(time.perf_counter() - start, 1)
    if done.returncode not in (0, 1):
        raise RuntimeError(done.stderr[-3000:])
    return {"wall_s": wall, **summary(home, json.loads(done.stdout.strip().splitlines()[-1])["run_id"])}


def summary(home: Path, run_id: str) -> dict:
    import dagster as dg

    from rhythm_core.evaluation.results import load_results, student_gaps

    with dg.DagsterInstance.from_config(str(home)) as instance:
        def latest(key):
            return instance.get_latest_materialization_event(dg.AssetKey(key)).asset_materialization

        sft, grpo, results = latest("sft_checkpoint"), latest("grpo_checkpoint"), latest("eval_results")
        checks = {}
        for event in instance.all_logs(run_id):
            data = getattr(event.dagster_event, "event_specific_data", None) if event.dagster_event else None
            if type(data).__name__ == "AssetCheckEvaluation":
                checks[f"{data.asset_key.to_user_string()}.{data.check_name}"] = (
                    "passed" if data.passed else f"FAILED ({data.severity.value})")
    evaluated = load_results(results.metadata["artifact_path"].value)
    gaps = student_gaps(evaluated)
    figures = {f"{c}/{a}": {"score": round(m["final_score"], 3), "recovery": round(m["recovery"], 3),
                            "belief_mae": round(m["belief_mae"], 3)}
               for c, block in evaluated["conditions"].items() for a, m in block["agents"].items()
               if a.startswith("student")}
    return {"sft_version": sft.tags.get("dagster/data_version"),
            "final_train_loss": round(sft.metadata["final_train_loss"].value, 4),
            "gate": round(grpo.metadata["validation_difference"].value, 4), "students": figures,
            "belief_gap": {k: [v, gaps["belief_gap_se"].get(k)] for k, v in gaps["belief_mae_vs_teacher"].items()},
            "checks": checks}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--kernels", default="avx2,native")
    args = parser.parse_args()
    artifacts = args.out / "artifacts"
    for kernels in args.kernels.split(","):
        for seed in map(int, args.seeds.split(",")):
            figures = run(args.out / f"home-{kernels}-{seed}", artifacts, kernels, seed)
            print(json.dumps({"kernels": kernels, "seed": seed, **figures}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
