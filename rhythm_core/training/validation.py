"""Held-out validation of students on training weeks: the gate GRPO passes before it is published.

The weeks are the SFT dataset's validation split: training seeds (never evaluation seeds), played by
the teacher but trained on by neither SFT (its validation split) nor GRPO (its prompts come from the
train split and from student episodes on other seeds). Each student plays them greedily in lockstep
and is graded under the given grader; the comparison is paired (the same weeks), so its noise is the
standard error of the per-week differences.
"""

from __future__ import annotations

import numpy as np

from rhythm_env.graders import DEFAULT_GRADER, get_grader

from ..agents.rollout import rollout
from .generation import SamplingConfig
from .policy import LLMPolicyAgent
from .side_by_side import run_side_by_side

NOISE_SE = 2.0  # "worse beyond noise": the mean paired difference is below -2 standard errors
# The candidate is the better one only when it is ahead by at least one standard error: GRPO runs
# ahead by less lost on the evaluation seeds (benchmarks/README.md, D27).
GAIN_SE = 1.0


def validation_weeks(dataset_dir, limit: int = 64) -> dict[str, list[int]]:
    """Up to `limit` weeks of the dataset's validation split, by condition (sorted seeds)."""
    import datasets

    data = datasets.load_from_disk(str(dataset_dir))["validation"]
    weeks = sorted(set(zip(data["condition"], (int(s) for s in data["seed"]))))[:limit]
    by_condition: dict[str, list[int]] = {}
    for condition, seed in weeks:
        by_condition.setdefault(condition, []).append(seed)
    return by_condition


def compare_students(candidate: tuple[str, str], reference: tuple[str, str], weeks: dict[str, list[int]],
                     grader: str = DEFAULT_GRADER, max_new_tokens: int | None = None) -> dict:
    """Play two checkpoints — (name, model dir) each — on `weeks` and compare them under `grader`.
    Returns each one's mean score, the paired difference candidate - reference with its standard
    error, whether the candidate is worse beyond noise, and which of the two is better."""
    # the two students play side by side, each in a process of its own on its share of the cores
    played = run_side_by_side(_week_scores, [(name, model_dir, weeks, grader, max_new_tokens)
                                             for name, model_dir in (candidate, reference)])
    scores = {name: week_scores for (name, _), week_scores in zip((candidate, reference), played)}
    return {"grader": grader, "weeks": sum(len(seeds) for seeds in weeks.values()),
            "seeds": {condition: f"{min(seeds)}-{max(seeds)} ({len(seeds)} weeks)" for condition, seeds in weeks.items()},
            "score": {name: round(float(s.mean()), 4) for name, s in scores.items()},
            **paired_verdict(scores[candidate[0]] - scores[reference[0]], candidate[0], reference[0])}


def _week_scores(name: str, model_dir: str, weeks: dict[str, list[int]], grader: str,
                 max_new_tokens: int | None) -> np.ndarray:
    """One checkpoint's greedy score on each of `weeks` (conditions in order, seeds in order)."""
    sampling = SamplingConfig(max_new_tokens=max_new_tokens, temperature=0.0)
    agent = LLMPolicyAgent.from_checkpoint(model_dir, sampling=sampling, name=name)
    return np.concatenate([get_grader(grader).grade_batch(rollout(agent, condition, seeds))[0]
                           for condition, seeds in weeks.items()])


def paired_verdict(diff: np.ndarray, candidate: str, reference: str) -> dict:
    """The verdict on per-week differences candidate - reference: their mean and standard error,
    whether the candidate is worse beyond noise (below -NOISE_SE standard errors) and which one is
    better (the candidate only when ahead by GAIN_SE standard errors or more)."""
    se = float(diff.std(ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else float("inf")
    mean = float(diff.mean())
    return {"difference": round(mean, 4), "difference_se": round(se, 4),
            "worse_beyond_noise": bool(mean < -NOISE_SE * se),
            "better": candidate if mean > 0 and mean >= GAIN_SE * se else reference}
