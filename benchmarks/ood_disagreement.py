"""Where students lose OOD weeks to a reference: the weeks split by how much a profile's factors
disagree within each belief dimension (OOD profiles are less correlated than any training week's).

    python benchmarks/ood_disagreement.py SCORES.json --windows 4,6 [--condition ood] [--quartiles 4]

SCORES.json is `benchmarks/paired_students.py --out` of a run over the same windows (with its
`--reference`, the Bayesian teacher by default). Per quartile of disagreement (the mean over the three
belief dimensions of the standard deviation of their factors, each oriented as its dimension), prints
the reference's belief MAE and each student's belief-MAE and v3 differences from it. Prints figures;
asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rhythm_core.env.conditions import parse_seeds  # noqa: E402
from rhythm_core.env.profiles import FACTOR_SIGN, sample_factors  # noqa: E402
from rhythm_core.env.spec import BELIEF_WEIGHTS  # noqa: E402
from rhythm_core.evaluation.rollouts import evaluation_window  # noqa: E402


def disagreement(factors: np.ndarray) -> np.ndarray:
    """Per profile, the mean over belief dimensions of the spread of that dimension's oriented factors."""
    oriented = np.where(FACTOR_SIGN > 0, factors, 1.0 - factors)
    return np.mean([oriented[:, BELIEF_WEIGHTS[d] != 0].std(axis=1) for d in range(len(BELIEF_WEIGHTS))], axis=0)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("scores", type=Path)
    p.add_argument("--windows", required=True, help="the windows the scores were played on, in their order")
    p.add_argument("--condition", default="ood")
    p.add_argument("--reference", default="bayes")
    p.add_argument("--quartiles", type=int, default=4)
    args = p.parse_args(argv)
    figures = json.loads(args.scores.read_text())[args.condition]
    seeds = [s for w in args.windows.split(",") for s in parse_seeds(evaluation_window(int(w))[args.condition])]
    spread = disagreement(sample_factors(args.condition, seeds))
    ref_v3, ref_mae = (np.asarray(x) for x in figures[args.reference])
    if len(ref_v3) != len(seeds):
        raise SystemExit(f"{args.scores}: {len(ref_v3)} weeks, the windows {args.windows} hold {len(seeds)}")
    groups = np.array_split(np.argsort(spread), args.quartiles)
    students = [name for name in figures if name != args.reference]
    print(f"| quartile | disagreement | {args.reference} belief MAE | "
          + " | ".join(f"{n}: belief Δ, v3 Δ" for n in students) + " |")
    print("|---|---|---|" + "---|" * len(students))
    for k, index in enumerate(groups, 1):
        cells = []
        for name in students:
            v3, mae = (np.asarray(x) for x in figures[name])
            cells.append(f"{(mae[index] - ref_mae[index]).mean():+.3f}, {(v3[index] - ref_v3[index]).mean():+.3f}")
        print(f"| {k} | {spread[index].mean():.3f} | {ref_mae[index].mean():.3f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
