"""Two recipes' students against each other, week by week, pooled over evaluation windows.

    python benchmarks/paired_students.py --a NAME=MODEL_DIR,... --b NAME=MODEL_DIR,... [--windows 0,4,5,6,7,8,9]
        [--reference bayes] [--out scores.json] [--a-belief-sum on|off|checkpoint] [--b-belief-sum ...]
        [--name NAME] [--played scores.json]
    python benchmarks/paired_students.py --components-of scores.json

`--a` and `--b` list students in pairs (the i-th of each trained alike but for the recipe's change,
e.g. the same SFT seed; or the same students, `--a-belief-sum off` against the product's decoding,
each belief the previous one plus the answer's increment). Each plays every window's weeks greedily; per condition the script prints,
for each pair and for all pairs together, the paired difference b − a of the v3 score and of the
final belief MAE, pooled over the windows' weeks, with its standard error. A window's condition is
15 to 100 weeks, too few to tell a +0.01 recipe from noise; pooled over five windows and two pairs
it is 150 to 1,000 paired weeks. A second table gives every student's paired difference from a
reference agent (`--reference`, the Bayesian teacher by default; '' for none) per window and pooled,
with the count of window cells above it, and a third splits each pooled difference into v3's belief
component and the rest, what the actions earned (`--components-of scores.json` prints only that, from
a saved run). Per-week figures go to `--out` as JSON; the tables' figures to
benchmarks/results/paired_<name>.json with `--name`. `--played` takes an earlier run's `--out` over the
same windows: the students named there are not played again (`NAME=` without a folder is enough).
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from results_file import write_result

BELIEF_SUM = {"checkpoint": None, "on": True, "off": False}


def _played(agent, condition: str, seeds) -> tuple[np.ndarray, np.ndarray]:
    """Per-week v3 score and final belief MAE of an agent's weeks."""
    from rhythm_core.agents.rollout import rollout
    from rhythm_env.graders import get_grader

    episodes = rollout(agent, condition, np.asarray(seeds))
    return get_grader("v3").grade_batch(episodes)[0], np.asarray(episodes.belief_mae(), dtype=float)


def week_figures(model_dir: str, condition: str, seeds: list[int], belief_sum: str = "checkpoint") -> tuple[np.ndarray, np.ndarray]:
    """Per-week v3 score and final belief MAE of a checkpoint playing greedily (`belief_sum`: each
    belief the previous one plus the answer's increment "on", "off", or as the checkpoint says)."""
    from rhythm_core.training.generation import SamplingConfig
    from rhythm_core.training.policy import LLMPolicyAgent

    summed = BELIEF_SUM[belief_sum]
    agent = LLMPolicyAgent.from_checkpoint(model_dir, sampling=SamplingConfig(temperature=0.0),
                                           **({} if summed is None else {"sum_beliefs": summed}))
    return _played(agent, condition, seeds)


def reference_figures(name: str, condition: str, seeds: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Per-week v3 score and final belief MAE of a reference agent (`rhythm_core.agents.get_agent`)."""
    from rhythm_core.agents import get_agent

    return _played(get_agent(name), condition, seeds)


def reference_table(figures: dict, spans: dict, reference: str, students: list[str]) -> dict:
    """Each student's paired difference from the reference, per window and pooled over the windows."""
    table: dict = {}
    print(f"\n| window | condition | {reference} v3 (belief MAE) | "
          + " | ".join(f"{n}: Δ ± SE (MAE)" for n in students) + " |")
    print("|---|---|---|" + "---|" * len(students))
    for condition, by_name in figures.items():
        above = dict.fromkeys(students, 0)
        for window, (lo, hi) in [*spans[condition], ("all", (0, len(by_name[reference][0])))]:
            ref_v3, ref_mae = (np.asarray(x[lo:hi]) for x in by_name[reference])
            cells = []
            for name in students:
                v3, mae = (np.asarray(x[lo:hi]) for x in by_name[name])
                if window != "all":
                    above[name] += int(v3.mean() > ref_v3.mean())
                cells.append(f"{_difference(v3 - ref_v3)} ({np.nanmean(mae):.3f})")
                table.setdefault(condition, {}).setdefault(str(window), {"reference": {
                    "v3": round(float(ref_v3.mean()), 4), "belief_mae": round(float(np.nanmean(ref_mae)), 4)}})[name] = {
                    **_summary(v3 - ref_v3), "belief_mae": round(float(np.nanmean(mae)), 4)}
            print(f"| {window} | {condition} | {ref_v3.mean():.4f} ({np.nanmean(ref_mae):.3f}) | " + " | ".join(cells) + " |")
        print(f"| windows above | {condition} | | " + " | ".join(f"{above[n]} of {len(spans[condition])}" for n in students) + " |")
    return table


def component_table(figures: dict, reference: str, students: list[str]) -> dict:
    """Each student's pooled difference from the reference split in two: v3's belief component
    (`belief_skill`: −weight × Δ belief MAE / the condition's prior MAE, per week) and the rest, what
    the actions earned (wellbeing, progress, crash avoidance)."""
    from rhythm_env.graders import get_grader
    from rhythm_env.graders.v3 import prior_stats

    weight = get_grader("v3").weights["belief_skill"]
    table: dict = {}
    print(f"\n| condition | student | v3 Δ from {reference} | belief component | the rest (actions) |\n|---|---|---|---|---|")
    for condition, by_name in figures.items():
        prior_mae = prior_stats(condition)[1]
        ref_v3, ref_mae = (np.asarray(x, dtype=float) for x in by_name[reference])
        for name in students:
            v3, mae = (np.asarray(x, dtype=float) for x in by_name[name])
            belief = -weight * (np.nan_to_num(mae, nan=prior_mae) - np.nan_to_num(ref_mae, nan=prior_mae)) / prior_mae
            print(f"| {condition} | {name} | {_difference(v3 - ref_v3)} | {_difference(belief)} | "
                  f"{_difference(v3 - ref_v3 - belief)} |")
            table.setdefault(condition, {})[name] = {"v3": _summary(v3 - ref_v3), "belief": _summary(belief),
                                                     "actions": _summary(v3 - ref_v3 - belief)}
    return table


def _students(spec: str) -> list[tuple[str, str]]:
    return [tuple(item.split("=", 1)) for item in spec.split(",") if item]


def _difference(diff: np.ndarray) -> str:
    return f"{diff.mean():+.4f} ± {diff.std(ddof=1) / np.sqrt(len(diff)):.4f}"


def _summary(diff: np.ndarray) -> dict:
    diff = np.asarray(diff, dtype=float)
    return {"mean": round(float(np.nanmean(diff)), 4),
            "se": round(float(np.nanstd(diff, ddof=1) / np.sqrt(np.isfinite(diff).sum())), 4), "weeks": len(diff)}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", default="", help="the reference recipe's students: name=model_dir,...")
    p.add_argument("--b", default="", help="the other recipe's students, in the same order")
    p.add_argument("--windows", default="0,4,5,6,7,8,9")
    p.add_argument("--reference", default="bayes", help="a reference agent every student is also compared with "
                   "('' for none)")
    p.add_argument("--out", type=Path, help="write the per-week figures here (JSON)")
    p.add_argument("--a-belief-sum", default="checkpoint", choices=list(BELIEF_SUM),
                   help="--a's beliefs as the sum of the increments: on, off, or as each checkpoint says")
    p.add_argument("--b-belief-sum", default="checkpoint", choices=list(BELIEF_SUM), help="the same for --b")
    p.add_argument("--name", help="write the tables' figures to benchmarks/results/paired_<name>.json")
    p.add_argument("--played", type=Path, help="an earlier run's --out over the same windows: its students' "
                   "figures are reused, not played again")
    p.add_argument("--components-of", type=Path, help="print only the split of every student's difference from "
                   "the reference in a saved --out file, playing nothing")
    args = p.parse_args(argv)
    if args.components_of:
        figures = json.loads(args.components_of.read_text())
        component_table(figures, args.reference, [n for n in next(iter(figures.values())) if n != args.reference])
        return
    a, b = _students(args.a), _students(args.b)
    if len(a) != len(b) or not a:
        raise SystemExit("--a and --b need the same number of students, at least one")
    names = [name for name, _ in a + b]
    if len(set(names)) != len(names) or args.reference in names:
        raise SystemExit(f"every student needs a name of its own, other than the reference's: got {', '.join(names)}")

    from rhythm_core.evaluation.rollouts import evaluation_window
    from rhythm_env.sim.conditions import parse_seeds

    figures: dict = {}  # condition -> player -> [scores, belief errors] over the windows' weeks
    played = json.loads(args.played.read_text()) if args.played else {}
    spans: dict = {}  # condition -> [(window, (first, end) index of its weeks)]
    for window in (int(w) for w in args.windows.split(",")):
        for condition, spec in evaluation_window(window).items():
            seeds = parse_seeds(spec)
            players = [(name, lambda c, s, d=model_dir, n=summed: week_figures(d, c, s, n))
                       for students, summed in ((a, args.a_belief_sum), (b, args.b_belief_sum)) for name, model_dir in students]
            if args.reference:
                players.append((args.reference, lambda c, s: reference_figures(args.reference, c, s)))
            for name, play in players:
                pooled = figures.setdefault(condition, {}).setdefault(name, [[], []])
                if name in played.get(condition, {}):  # the same weeks, in the same order, in the earlier run
                    done = len(pooled[0])
                    scores, errors = (np.asarray(x[done:done + len(seeds)], dtype=float) for x in played[condition][name])
                else:
                    scores, errors = play(condition, seeds)
                pooled[0] += scores.tolist()
                pooled[1] += errors.tolist()
            start = len(figures[condition][a[0][0]][0]) - len(seeds)
            spans.setdefault(condition, []).append((window, (start, start + len(seeds))))
            print(f"window {window} {condition}: played", flush=True)
    if args.out:
        args.out.write_text(json.dumps(figures) + "\n")
    print("| condition | pair (b − a) | weeks | v3 difference | belief MAE difference |\n|---|---|---|---|---|")
    result: dict = {"windows": args.windows, "reference": args.reference, "belief_sum": {
        "a": args.a_belief_sum, "b": args.b_belief_sum}, "pairs": {}}
    for condition, by_name in figures.items():
        pairs = [(np.asarray(by_name[nb][0]) - np.asarray(by_name[na][0]),
                  np.asarray(by_name[nb][1]) - np.asarray(by_name[na][1]), f"{nb} − {na}") for (na, _), (nb, _) in zip(a, b)]
        if len(pairs) > 1:
            # the pairs' mean difference per week (the pairs play the same weeks)
            pairs.append((np.mean([s for s, _, _ in pairs], axis=0), np.mean([e for _, e, _ in pairs], axis=0),
                          "mean of the pairs"))
        for scores, errors, label in pairs:
            print(f"| {condition} | {label} | {len(scores)} | {_difference(scores)} | {_difference(errors)} |")
            result["pairs"].setdefault(condition, {})[label] = {"v3": _summary(scores), "belief_mae": _summary(errors)}
    if args.reference:
        result["by_window"] = reference_table(figures, spans, args.reference, [name for name, _ in a + b])
        result["components"] = component_table(figures, args.reference, [name for name, _ in a + b])
    if args.name:
        write_result(f"paired_{args.name}", result, question="How do two recipes' students compare, week by week?")


if __name__ == "__main__":
    main()
