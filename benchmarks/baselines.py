"""The references every student is judged against: random, the heuristic, a constant belief, the
fallback-only policy, the Bayesian teacher (and the same planning for v3), the search teacher and
the oracle, on the first 200 evaluation seeds of each condition, under v2 and v3; then the offline
teachers' stage rate (weeks per second writing training data).

    python benchmarks/baselines.py [--weeks 200] [--teacher-weeks 2000]

Each cell is `rhythm_core.evaluation.baselines.run_baselines` (what `rhythm baselines --json`
prints): mean final score, 95% CI, final belief MAE; plus ms of play per week for each agent.
Figures go to benchmarks/results/baselines.json.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from results_file import write_result

from rhythm_core.evaluation.baselines import BASELINE_AGENTS, run_baselines
from rhythm_env.sim.conditions import CONDITIONS, EVAL_SEEDS


def first_eval_seeds(condition: str, n: int) -> list[int]:
    return list(EVAL_SEEDS[condition])[:n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weeks", type=int, default=200, help="evaluation seeds per condition")
    parser.add_argument("--teacher-weeks", type=int, default=2000, help="weeks for the teacher stages; 0 skips them")
    args = parser.parse_args()

    table = {}
    for condition in CONDITIONS:
        seeds = first_eval_seeds(condition, args.weeks)
        for grader in ("v2", "v3"):
            result = run_baselines(condition, seeds, grader)
            table.setdefault(condition, {"seeds": f"{seeds[0]}-{seeds[-1]}", "graders": {}})["graders"][grader] = result["agents"]
        timing = {}
        for agent in BASELINE_AGENTS:
            start = time.perf_counter()
            run_baselines(condition, seeds[:50], "v3", [agent])
            timing[agent] = round((time.perf_counter() - start) * 1000 / 50, 2)
        table[condition]["ms_per_week"] = timing
        print(f"{condition}: " + ", ".join(f"{a} {m['final_score']:.3f}" for a, m in
                                           table[condition]["graders"]["v3"].items()), flush=True)

    teachers = {}
    if args.teacher_weeks:
        from rhythm_core.compute.threads import available_cores
        from rhythm_core.teacher.settings import TeacherSettings
        from rhythm_core.teacher.stage import teacher_stage

        seeds = f"1000-{1000 + args.teacher_weeks - 1}"
        for backend in ("bayes", "search"):
            with tempfile.TemporaryDirectory() as root:
                start = time.perf_counter()
                out = teacher_stage(TeacherSettings(backend=backend), "continuous", seeds, root)
                wall = time.perf_counter() - start
            teachers[backend] = {"weeks": out["n_episodes"], "wall_s": round(wall, 1),
                                 "weeks_per_s": round(out["n_episodes"] / wall, 1),
                                 "v3": round(out["mean_score"]["v3"], 4), "workers": available_cores()}
            print(f"teacher stage {backend}: {teachers[backend]}", flush=True)
    write_result("baselines", {"conditions": table, "teacher_stage": teachers},
                 question="What do the references score on the evaluation seeds, and how fast do the teachers write data?")


if __name__ == "__main__":
    main()
