"""Other forms of the evidence chain, measured against the product's linear read-out: how close a
student that followed each exactly would come to the person (the chain's final belief). Prints
figures; asserts nothing.

    python benchmarks/readout_forms.py [--weeks 3000] [--windows 0,5,7]

Forms, each fitted on the Bayesian teacher's weeks 1000.. (90% of them, as a dataset does):
- linear: the product's (`teacher/evidence.py`): each increment a fixed linear function of the
  anomaly row, by the action and slot that caused it, fitted on the teacher's final beliefs;
- linear_truth: the same fitted on the true profiles of the training weeks;
- linear_counts: the same with a constant per (action, slot) added to each increment;
- innovation: the product's other form (`teacher/evidence.fit_innovation_readout`, the long preset's):
  the increment also depends on the previous belief and the step t.
A student of either form: `benchmarks/distillation.py --preset demo|long --readout-form linear|innovation`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from evidence_readout import play, teacher_weeks  # noqa: E402

from rhythm_core.env import VectorRhythmEnv  # noqa: E402
from rhythm_core.env.conditions import parse_seeds  # noqa: E402
from rhythm_core.env.spec import ACTIONS, SLOTS  # noqa: E402
from rhythm_core.evaluation.rollouts import evaluation_window  # noqa: E402
from rhythm_core.teacher.evidence import (  # noqa: E402
    RIDGE,
    _evidence,
    _features,
    fit_evidence_readout,
    fit_innovation_readout,
    stated_final_belief,
)

PAIRS = len(ACTIONS) * len(SLOTS)


def _ridge(x: np.ndarray, y: np.ndarray, ridge: float) -> np.ndarray:
    penalty = ridge * np.eye(x.shape[1])
    penalty[-1, -1] = 0.0
    return np.linalg.solve(x.T @ x + penalty, x.T @ y)


def _counts(observations, upto: int) -> np.ndarray:
    counts = np.zeros(PAIRS)
    for t in range(1, upto + 1):
        action, _ = _evidence(observations[t], t)
        counts[action * len(SLOTS) + (t - 1) % len(SLOTS)] += 1
    return counts


def fit_linear_variant(weeks, target: str) -> callable:
    """The final belief of the linear read-out fitted on the truth or with per-(action, slot) constants."""
    rows, targets = [], []
    for (record, observations), truth in weeks:
        t, stated = stated_final_belief(record)
        extra = _counts(observations, t) if target == "counts" else []
        rows.append(np.concatenate([_features(observations, t), extra, [1.0]]))
        targets.append(truth if target == "truth" else stated)
    x = np.asarray(rows)
    coef = _ridge(x, np.asarray(targets), RIDGE * len(x))

    def final(observations):
        upto = len(observations) - 1
        extra = _counts(observations, upto) if target == "counts" else []
        return np.clip(np.concatenate([_features(observations, upto), extra, [1.0]]) @ coef, 0.0, 1.0)
    return final


def ceilings(n_weeks: int, windows: list[int]) -> None:
    weeks = teacher_weeks(range(1000, 1000 + n_weeks))
    cut = int(0.9 * n_weeks)
    env = VectorRhythmEnv("continuous")
    env.reset(np.arange(1000, 1000 + n_weeks))
    with_truth = list(zip(weeks[:cut], env.true_belief[:cut]))
    linear = fit_evidence_readout(weeks[:cut])
    forms = {"linear": lambda h: linear.chain(h)[1][-1],
             "linear_truth": fit_linear_variant(with_truth, "truth"),
             "linear_counts": fit_linear_variant(with_truth, "counts"),
             "innovation": (lambda r: lambda h: r.chain(h)[1][-1])(fit_innovation_readout(weeks[:cut]))}
    print("| window | condition | teacher | " + " | ".join(forms) + " |")
    print("|---|---|---|" + "---|" * len(forms))
    for window in windows:
        for condition, spec in evaluation_window(window).items():
            histories, teacher, truth = play(condition, np.asarray(parse_seeds(spec)), "teacher")
            cells = [f"{np.abs(np.array([f(h) for h in histories]) - truth).mean():.3f}" for f in forms.values()]
            print(f"| {window} | {condition} | {np.abs(teacher - truth).mean():.3f} | " + " | ".join(cells) + " |",
                  flush=True)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--weeks", type=int, default=3000)
    p.add_argument("--windows", default="0,5,7")
    args = p.parse_args(argv)
    ceilings(args.weeks, [int(w) for w in args.windows.split(",")])


if __name__ == "__main__":
    main()
