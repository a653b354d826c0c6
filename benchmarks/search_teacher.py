"""Beyond the teacher (issue 46): the Bayesian teacher before and after it plans for grader v3, the
search teacher (Monte-Carlo rollouts under the posterior mean, heuristic or planner rollout
policy), the oracle and the heuristic, on 200 weeks per condition. Prints the table; asserts nothing.

    python benchmarks/search_teacher.py [--weeks 200 --planner-weeks 200 --teacher-weeks 2000]

Each cell: the mean v3 score, its paired difference from the Bayesian teacher before this change
(`bayes_own_utility`: the planner's own utility) ± the standard error over weeks, the final belief
MAE, and milliseconds of play per week (lockstep chunks of 64 weeks, one process). Then each offline
teacher backend's weeks per second as the demo's teacher stage plays them (`teacher_stage`:
2,000 training weeks, explanations and records included, one forked process per core, published
and graded).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from rhythm_core.agents import BayesAgent, SearchAgent, get_agent  # noqa: E402
from rhythm_core.agents.rollout import rollout  # noqa: E402
from rhythm_core.graders import get_grader  # noqa: E402

CONDITIONS = [("continuous", 0), ("continuous", 200), ("ood", 10_000), ("discrete3", 20_000)]  # (condition, first seed)
PLAYERS = {
    "bayes_own_utility": lambda: BayesAgent(grader=None),  # the teacher before 2026-11-26
    "bayes (v3 score-to-go)": lambda: BayesAgent(),
    "search (heuristic rollouts)": lambda: SearchAgent(),
    "search (planner rollouts)": lambda: SearchAgent(rollout_policy="planner"),
    "oracle": lambda: get_agent("oracle"),
    "oracle (v3 score-to-go)": lambda: get_agent("oracle", grader="v3"),
    "heuristic": lambda: get_agent("heuristic"),
}
REFERENCE = "bayes_own_utility"


def play(name: str, condition: str, seeds: np.ndarray) -> tuple[np.ndarray, float | None, float]:
    """(v3 score per week, mean final belief MAE or None, ms of play per week)."""
    start = time.perf_counter()
    episodes = rollout(PLAYERS[name](), condition, seeds, chunk_size=64)
    ms = (time.perf_counter() - start) * 1000 / len(seeds)
    mae = float(episodes.belief_mae().mean()) if episodes.has_belief.all() else None
    return get_grader("v3").grade_batch(episodes)[0], mae, ms


def score_table(weeks: int, planner_weeks: int) -> None:
    print(f"grader v3, {weeks} weeks per condition (the search with planner rollouts: the first {planner_weeks}); "
          f"Δ: paired difference from {REFERENCE} ± its standard error; ms: play per week, one process\n")
    print(f"| condition | seeds | player | v3 score | Δ vs {REFERENCE} | belief MAE | ms/week |")
    print("|---|---|---|---|---|---|---|")
    for condition, first in CONDITIONS:
        reference = None
        for name in PLAYERS:
            n = planner_weeks if "planner" in name else weeks
            scores, mae, ms = play(name, condition, np.arange(first, first + n))
            if name == REFERENCE:
                reference = scores
            diff = scores - reference[:n]
            delta = "–" if name == REFERENCE else f"{diff.mean():+.4f} ± {diff.std(ddof=1) / np.sqrt(n):.4f}"
            belief = "–" if mae is None else f"{mae:.3f}"
            print(f"| {condition} | {first}-{first + n - 1} | {name} | {scores.mean():.4f} | {delta} | {belief} | "
                  f"{ms:.1f} |", flush=True)


def teacher_rates(weeks: int) -> None:
    from rhythm_core.compute.threads import available_cores
    from rhythm_core.teacher.settings import TeacherSettings
    from rhythm_core.teacher.stage import teacher_stage

    seeds = f"1000-{1000 + weeks - 1}"
    print(f"\nteacher stage, {weeks} continuous training weeks ({seeds}), {available_cores()} worker processes:")
    for backend in ("bayes", "search"):
        with tempfile.TemporaryDirectory() as root:
            start = time.perf_counter()
            out = teacher_stage(TeacherSettings(backend=backend), "continuous", seeds, root)
            wall = time.perf_counter() - start
        print(f"- {backend}: {out['n_episodes']} weeks in {wall:.1f} s (play and records {out['run']['wall_s']:.1f} s) "
              f"= {out['n_episodes'] / wall:.0f} weeks/s; teacher v3 {out['mean_score']['v3']:.4f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weeks", type=int, default=200, help="weeks per condition")
    parser.add_argument("--planner-weeks", type=int, default=200,
                        help="weeks per condition for the search with planner rollouts (~0.3 s a week)")
    parser.add_argument("--teacher-weeks", type=int, default=2000, help="weeks for the teacher stages; 0 skips them")
    args = parser.parse_args()
    score_table(args.weeks, min(args.planner_weeks, args.weeks))
    if args.teacher_weeks:
        teacher_rates(args.teacher_weeks)


if __name__ == "__main__":
    main()
