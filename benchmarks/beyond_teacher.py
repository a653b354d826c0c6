"""Which teacher the recipe distils: students of each offline teacher against the Bayesian teacher.

    python benchmarks/beyond_teacher.py --out /tmp/beyond [--teachers bayes,bayes_v3,search] \
        [--grpo-seeds 0] [--sft-seed 0] [--windows 0,5] [--students NAME=MODEL_DIR,...]

Per teacher backend: the demo's 2,000 training weeks, its dataset and SFT student (the demo recipe),
then GRPO from that student and its gate on the dataset's validation weeks. Every student then plays
the evaluation windows (0: the default evaluation seeds; 5: continuous 500-599, OOD 10250-10299,
discrete3 20075-20089, never tuned on), next to the references on the same seeds: the heuristic, the
fallback-only policy, the Bayesian teacher (`bayes`, the one the recipe distils), the same planning
for v3 (`bayes_v3`), the search teacher and the oracle. Prints one markdown table: v3 score, paired
difference from the Bayesian teacher with its standard error, belief MAE. (The GRPO rewards compared
on 2026-11-26 were run with `--rewards`, at commit 1d15a85; benchmarks/README.md has their table.)
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from report import print_markdown  # benchmarks/ is the script's own folder
from students_on_windows import play

REFERENCES = ("heuristic", "fallback", "bayes", "bayes_v3", "search", "oracle")


def reference_scores(name: str, condition: str, seeds: list[int]) -> tuple[np.ndarray, float]:
    from rhythm_core.agents import get_agent
    from rhythm_core.agents.rollout import rollout
    from rhythm_core.graders import get_grader

    agent = get_agent(name)
    episodes = rollout(agent, condition, np.asarray(seeds))
    mae = episodes.belief_mae()
    return get_grader("v3").grade_batch(episodes)[0], float(np.nanmean(mae)) if np.isfinite(mae).any() else float("nan")


def window_table(students: dict[str, str], windows: list[int], references=REFERENCES, paired_with: str = "bayes",
                 log=print) -> list[dict]:
    """Rows (window, condition, player, v3, paired Δ vs `paired_with` ± SE, belief MAE) of every
    reference and every student (name -> model dir) on the evaluation windows."""
    from rhythm_core.env.conditions import parse_seeds
    from rhythm_core.evaluation.rollouts import evaluation_window
    from rhythm_core.training.validation import paired_verdict

    rows = []
    for window in windows:
        for condition, spec in evaluation_window(window).items():
            seeds = parse_seeds(spec)
            played = {name: reference_scores(name, condition, seeds) for name in references}
            played.update({name: play(model_dir, condition, seeds) for name, model_dir in students.items()})
            base = played[paired_with][0]
            for name, (scores, mae) in played.items():
                verdict = paired_verdict(scores - base, name, paired_with)
                rows.append({"window": window, "condition": condition, "player": name, "v3": f"{scores.mean():.4f}",
                             f"Δ vs {paired_with}": "–" if name == paired_with else
                             f"{verdict['difference']:+.4f} ± {verdict['difference_se']:.4f}",
                             "belief MAE": "–" if not np.isfinite(mae) else f"{mae:.3f}"})
            log(f"window {window} {condition}: done")
    return rows


def train(teacher: str, seeds: list[int], out: Path, log, sft_seed: int = 0) -> dict[str, str]:
    """The SFT student distilled from `teacher` and a GRPO student per seed: name -> model dir."""
    from rhythm_core.artifacts import write_result
    from rhythm_core.data.stages import dataset_stage
    from rhythm_core.distill import DEFAULT_TEACHER_SEEDS
    from rhythm_core.teacher.settings import TeacherSettings
    from rhythm_core.teacher.stage import teacher_stage
    from rhythm_core.training.entry import run_stage
    from rhythm_core.training.publish import train_and_publish

    root = out / teacher
    started = time.perf_counter()
    trajectories = teacher_stage(TeacherSettings(backend=teacher), "continuous", DEFAULT_TEACHER_SEEDS, root)
    data = dataset_stage(trajectories, root)
    log(f"{teacher}: teacher and dataset in {time.perf_counter() - started:.0f} s, teacher v3 "
        f"{trajectories['mean_score']['v3']:.4f}")

    def stage(name: str, config: dict, init: str | None = None) -> dict:
        started = time.perf_counter()
        result = train_and_publish(root / name, name.split("-")[0] + "_checkpoint", lambda staged: write_result(
            staged, run_stage(name.split("-")[0], {**config, "report_to": "none"}, data["path"], str(staged), init)))
        log(f"{teacher} {name}: {time.perf_counter() - started:.0f} s" + (
            f", gate {result['validation']['difference']:+.4f} ± {result['validation']['difference_se']:.4f}"
            if result.get("validation") else ""))
        return result

    students = {f"{teacher}:sft": stage("sft", {"seed": sft_seed})["model_dir"]}
    for seed in seeds:
        result = stage(f"grpo-{seed}", {"seed": seed}, students[f"{teacher}:sft"])
        students[f"{teacher}:grpo:{seed}"] = result["model_dir"]
    return students


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--teachers", default="bayes,bayes_v3,search")
    parser.add_argument("--grpo-seeds", default="0", help="GRPO seeds, one student each ('' for none)")
    parser.add_argument("--sft-seed", type=int, default=0)
    parser.add_argument("--windows", default="0,5")
    parser.add_argument("--students", default="", help="already trained students to play too: name=model_dir,...")
    parser.add_argument("--paired-with", default="bayes", help="the player every difference is taken from")
    args = parser.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def log(line: str) -> None:
        print(line, flush=True)

    students = dict(pair.split("=", 1) for pair in args.students.split(",") if pair)
    for teacher in filter(None, args.teachers.split(",")):
        students.update(train(teacher, [int(s) for s in args.grpo_seeds.split(",") if s], out, log, args.sft_seed))
    (out / "students.json").write_text(json.dumps(students, indent=2) + "\n")
    rows = window_table(students, [int(w) for w in args.windows.split(",")], paired_with=args.paired_with, log=log)
    print_markdown(rows)
    (out / "table.json").write_text(json.dumps(rows, indent=2) + "\n")

if __name__ == "__main__":
    main()
