"""Re-grade teacher episodes under any grader, next to baselines on the same seeds.

The teacher's stored trajectories are graded as they are (no model call); random, heuristic and
heuristic_const_belief and fallback are replayed on the same seeds (deterministic, offline, seconds).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from rhythm_env.graders import get_grader, mean_ci95

from ..agents import get_agent
from ..agents.rollout import rollout
from ..store import atomic_write_json, atomic_write_text, publish_dir, staging
from ..teacher.trajectories import read_trajectories, to_episode_batch

REEVAL_BASELINES = ("random", "heuristic", "heuristic_const_belief", "fallback")
TEACHER = "teacher"


@dataclass
class ReevalReport:
    per_episode: pl.DataFrame  # condition, seed, agent, grader, final_score, belief_mae, invalid_rate, components
    per_condition: pl.DataFrame  # condition, agent, grader, n, mean, ci95_lo, ci95_hi, belief_mae, wins_vs_heuristic
    graders: list[str]
    teacher: str

    def summary(self, grader: str) -> dict:
        """{condition: {agent: mean final score}} under one grader."""
        out: dict[str, dict[str, float]] = {}
        for row in self.per_condition.filter(pl.col("grader") == grader).iter_rows(named=True):
            out.setdefault(row["condition"], {})[row["agent"]] = row["mean"]
        return out

    def markdown(self) -> str:
        lines = []
        for grader in self.graders:
            lines += [f"**grader {grader}** (teacher: {self.teacher})", "",
                      "| condition | agent | n | mean | 95% CI | belief MAE | wins vs heuristic |",
                      "|---|---|---|---|---|---|---|"]
            for r in self.per_condition.filter(pl.col("grader") == grader).iter_rows(named=True):
                mae = "–" if r["belief_mae"] is None else f"{r['belief_mae']:.3f}"
                wins = "–" if r["wins_vs_heuristic"] is None else f"{r['wins_vs_heuristic']:.0%}"
                lines.append(f"| {r['condition']} | {r['agent']} | {r['n']} | {r['mean']:.3f} | "
                             f"[{r['ci95_lo']:.3f}, {r['ci95_hi']:.3f}] | {mae} | {wins} |")
            lines.append("")
        return "\n".join(lines)


def reeval_records(records: list[dict], grader: str, *, compare_grader: str = "v2",
                   baselines=REEVAL_BASELINES) -> ReevalReport:
    graders = list(dict.fromkeys([grader, compare_grader]))
    graders_objs = {g: get_grader(g) for g in graders}
    if not records:
        raise ValueError("no teacher episodes to re-grade")
    teacher_id = records[0]["teacher"]["id"]
    rows = []
    for condition in sorted({r["condition"] for r in records}):
        teacher = to_episode_batch(records, condition, TEACHER)
        episodes = {TEACHER: teacher}
        for name in baselines:
            episodes[name] = rollout(get_agent(name), condition, teacher.seeds)
        for gname, g in graders_objs.items():
            for agent, batch in episodes.items():
                scores, parts = g.grade_batch(batch)
                mae = batch.belief_mae()
                invalid = batch.invalid.mean(axis=1)
                for i, seed in enumerate(batch.seeds):
                    rows.append({
                        "condition": condition, "seed": int(seed), "agent": agent, "grader": gname,
                        "final_score": float(scores[i]),
                        "belief_mae": None if np.isnan(mae[i]) else float(mae[i]),
                        "invalid_rate": float(invalid[i]),
                        **{f"c_{k}": float(v[i]) for k, v in parts.items()},
                    })
    per_episode = pl.from_dicts(rows, infer_schema_length=None)
    heuristic = per_episode.filter(pl.col("agent") == "heuristic").select(
        "condition", "seed", "grader", pl.col("final_score").alias("heuristic_score"))
    per_episode = per_episode.join(heuristic, on=["condition", "seed", "grader"], how="left").with_columns(
        (pl.col("final_score") > pl.col("heuristic_score")).alias("beats_heuristic")).drop("heuristic_score")
    per_condition = _per_condition(per_episode)
    return ReevalReport(per_episode, per_condition, graders, teacher_id)


def _per_condition(per_episode: pl.DataFrame) -> pl.DataFrame:
    rows = []
    for (condition, agent, grader), group in per_episode.group_by(["condition", "agent", "grader"], maintain_order=True):
        mean, lo, hi = mean_ci95(group["final_score"].to_numpy())
        mae = group["belief_mae"].drop_nulls()
        rows.append({
            "condition": condition, "agent": agent, "grader": grader, "n": group.height,
            "mean": mean, "ci95_lo": lo, "ci95_hi": hi,
            "belief_mae": float(mae.mean()) if len(mae) else None,
            "wins_vs_heuristic": None if agent == "heuristic" else float(group["beats_heuristic"].mean()),
            "invalid_rate": float(group["invalid_rate"].mean()),
        })
    order = {name: i for i, name in enumerate([TEACHER, *REEVAL_BASELINES])}
    return pl.from_dicts(rows, infer_schema_length=None).sort(
        ["grader", "condition", pl.col("agent").replace_strict(order, default=99)])


def write_report(report: ReevalReport, out_dir) -> dict:
    """Write per_episode.parquet, per_condition.parquet, report.json and report.md; return paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report.per_episode.write_parquet(out / "per_episode.parquet")
    report.per_condition.write_parquet(out / "per_condition.parquet")
    atomic_write_json(out / "report.json", {
        "teacher": report.teacher,
        "graders": report.graders,
        "per_condition": report.per_condition.to_dicts(),
        "summary": {g: report.summary(g) for g in report.graders},
    })
    atomic_write_text(out / "report.md", report.markdown())
    return {"dir": str(out), "per_episode": str(out / "per_episode.parquet"),
            "per_condition": str(out / "per_condition.parquet"), "json": str(out / "report.json")}


def reeval_file(jsonl, grader: str, out_dir, *, compare_grader: str = "v2", overwrite: bool = False) -> ReevalReport:
    """Re-grade a trajectory file into the folder `out_dir`, written beside it and renamed into place
    (an existing folder is replaced only if it is an earlier report, empty, or `overwrite` is set)."""
    records = read_trajectories(jsonl, allow_truncated_tail=False).records
    report = reeval_records(records, grader, compare_grader=compare_grader)
    out_dir = Path(out_dir)
    with staging(out_dir.parent) as staged:
        write_report(report, staged)
        publish_dir(staged, out_dir, kind="reeval_report", overwrite=overwrite)
    return report


def teacher_beats_heuristic(report: ReevalReport, grader: str) -> dict[str, tuple[float, float]]:
    """{condition: (teacher mean, heuristic mean)} under `grader`."""
    summary = report.summary(grader)
    return {c: (agents[TEACHER], agents["heuristic"]) for c, agents in summary.items()}


def seeds_where_teacher_beats_heuristic(records: list[dict], grader: str) -> set[int]:
    """Seeds whose teacher episode out-scored the heuristic on the same seed under `grader`."""
    per_episode = reeval_records(records, grader, compare_grader=grader, baselines=("heuristic",)).per_episode
    rows = per_episode.filter((pl.col("agent") == TEACHER) & (pl.col("grader") == grader) & pl.col("beats_heuristic"))
    return set(rows["seed"].to_list())

