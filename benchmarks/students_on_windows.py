"""A run's SFT and GRPO students side by side on evaluation windows, paired week by week.

    python benchmarks/students_on_windows.py --sft RUN/sft_checkpoint/<v>/model \
        --grpo RUN/grpo_checkpoint/<v>/model [--windows 5,0]

Per window (`evaluation_window`: 0 = the default evaluation seeds, 5 = continuous 500-599, OOD
10250-10299, discrete3 20075-20089) and condition it prints one JSON line: the heuristic's, the
fallback-only policy's and the Bayesian teacher's v3 scores on those seeds (and the teacher's belief MAE), each student's score, recovery of the teacher's margin
and final belief MAE (greedy), and the paired GRPO − SFT difference with its standard error. These
are report-only seeds: nothing is tuned on them.
"""

from __future__ import annotations

import argparse
import json

import numpy as np


def play(model_dir: str, condition: str, seeds: list[int]) -> tuple[np.ndarray, float]:
    """Per-week v3 scores and the mean final belief MAE of a checkpoint playing greedily."""
    from rhythm_core.agents.rollout import rollout
    from rhythm_core.graders import get_grader
    from rhythm_core.training.generation import SamplingConfig
    from rhythm_core.training.policy import LLMPolicyAgent

    agent = LLMPolicyAgent.from_checkpoint(model_dir, sampling=SamplingConfig(temperature=0.0))
    episodes = rollout(agent, condition, seeds)
    return get_grader("v3").grade_batch(episodes)[0], float(np.nanmean(episodes.belief_mae()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sft", required=True, help="the SFT checkpoint's model directory")
    parser.add_argument("--grpo", required=True, help="the GRPO checkpoint's model directory")
    parser.add_argument("--windows", default="5,0", help="evaluation windows, e.g. 5,0")
    args = parser.parse_args()

    from rhythm_core.env.conditions import parse_seeds
    from rhythm_core.evaluation.baselines import run_baselines
    from rhythm_core.evaluation.results import recovery
    from rhythm_core.evaluation.rollouts import evaluation_window
    from rhythm_core.training.validation import paired_verdict

    def rounded(value, digits):
        return None if value is None else round(float(value), digits)

    for window in (int(w) for w in args.windows.split(",")):
        for condition, spec in evaluation_window(window).items():
            seeds = parse_seeds(spec)
            refs = run_baselines(condition, seeds, "v3", agents=("heuristic", "fallback", "bayes"))["agents"]
            heuristic, teacher = refs["heuristic"]["final_score"], refs["bayes"]["final_score"]
            fallback = refs["fallback"]["final_score"]
            (sft, sft_mae), (grpo, grpo_mae) = play(args.sft, condition, seeds), play(args.grpo, condition, seeds)
            verdict = paired_verdict(grpo - sft, "grpo", "sft")
            print(json.dumps({"window": window, "condition": condition, "seeds": spec, "heuristic": heuristic,
                              "fallback": fallback, "teacher": teacher, "belief_mae_teacher": refs["bayes"]["belief_mae"], "sft": rounded(sft.mean(), 4), "grpo": rounded(grpo.mean(), 4),
                              "recovery_sft": rounded(recovery(sft.mean(), heuristic, teacher), 3),
                              "recovery_grpo": rounded(recovery(grpo.mean(), heuristic, teacher), 3),
                              "belief_mae_sft": round(sft_mae, 4), "belief_mae_grpo": round(grpo_mae, 4),
                              "grpo_minus_sft": verdict["difference"], "se": verdict["difference_se"]}), flush=True)

if __name__ == "__main__":
    main()
