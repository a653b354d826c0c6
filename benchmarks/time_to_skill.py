"""Time to skill: how much inference the default recipe's student has after how many seconds of SFT.

    python benchmarks/time_to_skill.py                       # the asset defaults (what make demo trains)
    python benchmarks/time_to_skill.py --preset long --snapshots 500,1000,2000,3000
    python benchmarks/time_to_skill.py --eval-seeds '{"continuous": "500-599", "ood": "15000-15049", "discrete3": "25000-25014"}'

One SFT run of the recipe (the Bayesian teacher's weeks, the default dataset format, the default
SFTRunConfig plus the preset's overrides) saves the student at a few steps along the way
(`snapshot_steps`); each snapshot and the final student then play the evaluation seeds greedily.
Prints, per snapshot: SFT seconds so far, and per condition the v3 score, recovery = (student -
heuristic) / (teacher - heuristic) and belief MAE (the constant 0.5 belief's beside it); writes
time_to_skill.png (recovery and belief MAE against SFT seconds) and time_to_skill.json.
Seconds are wall time on this machine: run it on a quiet one.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rhythm_core.data.stages import dataset_stage  # noqa: E402
from rhythm_core.distill import PRESETS  # noqa: E402
from rhythm_core.evaluation.results import eval_results_stage  # noqa: E402
from rhythm_core.evaluation.rollouts import eval_rollouts_stage  # noqa: E402
from rhythm_core.teacher.settings import TeacherSettings  # noqa: E402
from rhythm_core.teacher.stage import teacher_stage  # noqa: E402
from rhythm_core.training.sft import SFTRunConfig, run_sft  # noqa: E402


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for condition in rows[0]["conditions"]:
        seconds = [r["train_s"] for r in rows]
        left.plot(seconds, [100 * r["conditions"][condition]["recovery"] for r in rows], marker="o", label=condition)
        right.plot(seconds, [r["conditions"][condition]["belief_mae"] for r in rows], marker="o", label=condition)
        right.axhline(rows[0]["conditions"][condition]["constant_belief_mae"], linestyle=":", linewidth=1)
    left.set(xlabel="SFT seconds", ylabel="recovery of the teacher's margin (%)", title="Recovery")
    right.set(xlabel="SFT seconds", ylabel="belief MAE (dotted: constant 0.5)", title="Belief MAE")
    left.legend()
    left.grid(alpha=0.3)
    right.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=list(PRESETS), default="demo")
    p.add_argument("--snapshots", default=None, help="comma-separated SFT steps to evaluate besides the last "
                                                     "(counted through both phases; default: a quarter, a "
                                                     "half and three quarters of the run)")
    p.add_argument("--sft", default="{}", help="SFTRunConfig overrides as JSON")
    p.add_argument("--teacher-seeds", default=None)
    p.add_argument("--eval-seeds", default=None, help="JSON {condition: seed spec}; default: the preset's")
    p.add_argument("--out", default=None, help="output root (default runs/time-to-skill-<preset>)")
    args = p.parse_args(argv)
    spec = copy.deepcopy(PRESETS[args.preset])
    sft = {**spec["sft"], **json.loads(args.sft)}
    config = SFTRunConfig(**sft)
    steps = ([int(s) for s in args.snapshots.split(",")] if args.snapshots else
             [(config.short_steps + config.max_steps) * k // 4 for k in (1, 2, 3)])
    total = config.short_steps + config.max_steps
    config = SFTRunConfig(**{**sft, "snapshot_steps": [s for s in steps if 0 < s < total]})
    eval_seeds = json.loads(args.eval_seeds) if args.eval_seeds else spec["eval_seeds"]
    out = Path(args.out or REPO / "runs" / f"time-to-skill-{args.preset}")

    start = time.perf_counter()
    traj = teacher_stage(TeacherSettings(backend=spec["teacher"]), "continuous", args.teacher_seeds or spec["teacher_seeds"], out)
    data = dataset_stage(traj, out, **spec.get("dataset", {}))
    print(f"teacher {traj['n_episodes']} weeks + dataset: {time.perf_counter() - start:.1f} s", flush=True)
    result = run_sft(config, data["path"], out / "sft", on_log=lambda e: None)
    print(f"SFT {result['steps']} steps: {result['wall_s']:.1f} s (training and the validity probes), "
          f"{result['total_parameters']} parameters", flush=True)

    students = {}
    for snap in sorted((out / "sft" / "snapshots").glob("step-*"), key=lambda d: int(d.name.split("-")[1])):
        info = json.loads((snap / "rhythm_checkpoint.json").read_text())["snapshot"]
        students[f"student_step{info['step']}"] = (str(snap), info["train_s"])
    students[f"student_step{result['steps']}"] = (result["model_dir"], result["train_s"])
    rollouts = eval_rollouts_stage({name: path for name, (path, _) in students.items()}, eval_seeds, out)
    results = json.loads(Path(eval_results_stage(rollouts["dir"], "v3", out)["json"]).read_text())

    rows = []
    print("\n| SFT step | SFT s | condition | v3 | recovery | belief MAE (constant) | invalid |")
    print("|---|---|---|---|---|---|---|")
    for name, (_, seconds) in students.items():
        row = {"student": name, "step": int(name.removeprefix("student_step")), "train_s": seconds, "conditions": {}}
        for condition, block in results["conditions"].items():
            m = block["agents"][name]
            constant = block["agents"]["heuristic_const_belief"]["belief_mae"]
            row["conditions"][condition] = {"v3": m["final_score"], "recovery": m["recovery"],
                                            "belief_mae": m["belief_mae"], "constant_belief_mae": constant,
                                            "invalid_rate": m["invalid_rate"]}
            print(f"| {row['step']} | {seconds} | {condition} | {m['final_score']:.3f} | {m['recovery']:.0%} | "
                  f"{m['belief_mae']:.3f} ({constant:.3f}) | {m['invalid_rate']:.1%} |")
        rows.append(row)
    (out / "time_to_skill.json").write_text(json.dumps({"preset": args.preset, "sft": sft, "eval_seeds": eval_seeds,
                                                        "rows": rows}, indent=2) + "\n")
    plot(rows, out / "time_to_skill.png")
    print(f"\nwrote {out / 'time_to_skill.png'} and time_to_skill.json; whole run {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
