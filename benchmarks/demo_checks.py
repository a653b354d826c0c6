"""The demo (`make demo`) over SFT seeds and CPU kernel settings: its table, times and every asset check.

    python benchmarks/demo_checks.py --seeds 0,1,2        # what docs/results.md shows: demo.json
    python benchmarks/demo_checks.py --seeds 0 --kernels avx2,native --name demo_kernels

Each (kernels, seed) runs `python -m rhythm_pipeline.demo` (the lineage as one backfill with the asset
defaults, `sft_checkpoint.seed` set) in a fresh process on a fresh instance, then reads from that
instance (every run of the backfill): wall seconds and each stage's seconds, the SFT and GRPO checkpoint versions, the SFT loss,
the GRPO gate, every player's figures in eval_results.json (v3 and v2 score, CI, recovery of the
search / the Bayesian teacher's margin, belief MAE, wins, invalid answers), every asset check, and
the SFT student's belief MAE on the same weeks without the belief's sum (each belief as the student
wrote it, `LLMPolicyAgent.from_checkpoint(..., sum_beliefs=False)`). Figures:
benchmarks/results/<name>.json (`make results` turns them into the README's table and docs/results.md).
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
STAGES = ("teacher_trajectories", "reeval_report", "sft_dataset", "sft_checkpoint", "grpo_checkpoint",
          "eval_rollouts", "eval_results", "registered_student")


def run(home: Path, kernels: str, seed: int) -> dict:
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home), "RHYTHM_CPU_KERNELS": kernels}
    for name in ("ATEN_CPU_CAPABILITY", "RHYTHM_ARTIFACTS", "RHYTHM_GRADER", "RHYTHM_DEMO_RUN_CONFIG"):
        env.pop(name, None)
    if seed != 0:
        config = home / "run_config.json"
        config.write_text(json.dumps({"ops": {"sft_checkpoint": {"config": {"seed": seed}}}}))
        env["RHYTHM_DEMO_RUN_CONFIG"] = str(config)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "rhythm_pipeline.demo"], cwd=REPO, env=env, capture_output=True,
                          text=True)
    wall = round(time.perf_counter() - start, 1)
    if done.returncode not in (0, 1):
        raise RuntimeError(done.stdout[-3000:] + done.stderr[-3000:])
    return {"kernels": kernels, "seed": seed, "wall_s": wall, "success": done.returncode == 0, **summary(home)}


def summary(home: Path) -> dict:
    import dagster as dg

    from rhythm_core.evaluation.results import load_results, student_gaps

    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs = instance.get_runs()  # the demo's backfill: a run per piece

        def latest(key):
            return instance.get_latest_materialization_event(dg.AssetKey(key)).asset_materialization

        sft, grpo, results = latest("sft_checkpoint"), latest("grpo_checkpoint"), latest("eval_results")
        checks, starts, stage_s = {}, {}, {}
        for record in [r for run in runs for r in instance.all_logs(run.run_id)]:
            event = record.dagster_event
            if event is None:
                continue
            data = event.event_specific_data
            if event.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION:
                checks[f"{data.asset_key.to_user_string()}.{data.check_name}"] = (
                    "passed" if data.passed else f"FAILED ({data.severity.value})")
            elif event.event_type == dg.DagsterEventType.STEP_START:
                starts[event.step_key] = record.timestamp
            elif event.event_type == dg.DagsterEventType.STEP_SUCCESS and event.step_key in starts:
                stage = event.step_key.split(".")[0]  # an asset's steps (eval_rollouts.play_ood) count as the asset
                first, last = stage_s.get(stage, (starts[event.step_key], record.timestamp))
                stage_s[stage] = (min(first, starts[event.step_key]), max(last, record.timestamp))
        sft_model = str(Path(sft.metadata["artifact_path"].value))
    evaluated = load_results(results.metadata["artifact_path"].value)
    gaps = student_gaps(evaluated)
    players = {}
    for condition, block in evaluated["conditions"].items():
        for agent, m in block["agents"].items():
            players.setdefault(condition, {})[agent] = {
                "v3": m["final_score"], "ci95": m["ci95"], "v2": m["by_grader"].get("v2", {}).get("final_score"),
                "recovery": m.get("recovery"), "recovery_bayes": m.get("recovery_bayes"),
                "belief_mae": m["belief_mae"], "wins_vs_heuristic": m["wins_vs_heuristic"],
                "invalid_rate": m["invalid_rate"]}
    return {"sft_version": sft.tags.get("dagster/data_version"), "grpo_version": grpo.tags.get("dagster/data_version"),
            "final_train_loss": round(sft.metadata["final_train_loss"].value, 4),
            "gate": round(grpo.metadata["validation_difference"].value, 4),
            "gate_se": round(grpo.metadata["validation_difference_se"].value, 4)
            if "validation_difference_se" in grpo.metadata else None,
            "headline": evaluated["provenance"].get("headline_student", "student_grpo"),
            "stage_s": {stage: round(stage_s[stage][1] - stage_s[stage][0], 1) if stage in stage_s else None
                        for stage in STAGES},
            "seeds": {c: b["seeds"] for c, b in evaluated["conditions"].items()},
            "players": players, "belief_gap": {k: [v, gaps["belief_gap_se"].get(k)]
                                               for k, v in gaps["belief_mae_vs_teacher"].items()},
            "sft_without_belief_sum": without_sum(sft_model, {c: b["seeds"] for c, b in evaluated["conditions"].items()}),
            "checks": checks, "runs": len(runs)}


def without_sum(model_dir: str, seeds: dict[str, str]) -> dict:
    """The SFT student's v3 and final belief MAE on the same weeks with each belief as it wrote it."""
    import numpy as np

    from rhythm_core.agents.rollout import rollout
    from rhythm_core.training.generation import SamplingConfig
    from rhythm_core.training.policy import LLMPolicyAgent
    from rhythm_env.graders import get_grader
    from rhythm_env.sim.conditions import eval_seed_list

    agent = LLMPolicyAgent.from_checkpoint(model_dir, sampling=SamplingConfig(temperature=0.0), sum_beliefs=False)
    out = {}
    for condition, spec in seeds.items():
        episodes = rollout(agent, condition, np.asarray(eval_seed_list(condition, spec)))
        out[condition] = {"v3": round(float(get_grader("v3").grade_batch(episodes)[0].mean()), 4),
                          "belief_mae": round(float(np.nanmean(episodes.belief_mae())), 4)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--kernels", default="avx2")
    parser.add_argument("--name", default="demo", help="the result file: benchmarks/results/<name>.json")
    parser.add_argument("--keep", type=Path, help="keep the instances under this folder")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="rhythm-demo-checks-"))
    runs = []
    try:
        for kernels in args.kernels.split(","):
            for seed in map(int, args.seeds.split(",")):
                runs.append(run(root / f"home-{kernels}-{seed}", kernels, seed))
                print(json.dumps({k: runs[-1][k] for k in ("kernels", "seed", "wall_s", "sft_version", "gate")}),
                      flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    write_result(args.name, {"runs": runs},
                 question="What does the demo train, in how long, and does every asset check pass?")
    return 0


if __name__ == "__main__":
    sys.exit(main())
