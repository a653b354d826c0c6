"""Grade stored evaluation rollouts: scores, components, belief MAE, wins vs the heuristic, invalid
answers and action distributions per condition and player; eval_results.json, plots, markdown."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from rhythm_env.graders import get_grader, mean_ci95
from rhythm_env.sim.conditions import CONDITIONS
from rhythm_env.sim.episode import EpisodeBatch
from rhythm_env.sim.profiles import prior_stats
from rhythm_env.sim.spec import ACTIONS, ENV_VERSION

from ..store import (
    atomic_write_text,
    files_digest,
    publish_dir,
    staging,
    verify_artifact,
)
from .rollouts import load_rollouts

RESULTS_SCHEMA = "rhythm-eval-results-1"
_METRICS = {
    "type": "object",
    "required": ["n_episodes", "final_score", "ci95", "components", "belief_mae", "wins_vs_heuristic",
                 "invalid_rate", "action_distribution", "by_grader"],
    "properties": {
        "n_episodes": {"type": "integer", "minimum": 1},
        "final_score": {"type": "number", "minimum": 0, "maximum": 1},
        "ci95": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2},
        "components": {"type": "object", "additionalProperties": {"type": "number"}},
        "belief_mae": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
        "wins_vs_heuristic": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
        "invalid_rate": {"type": "number", "minimum": 0, "maximum": 1},
        # (score - heuristic) / (teacher - heuristic), students only; null without both references.
        # The teacher is the condition's recovery_teacher (the one the students were distilled from
        # where it played); recovery_bayes measures against the Bayesian teacher whatever that was.
        "recovery": {"type": ["number", "null"]},
        "recovery_bayes": {"type": ["number", "null"]},
        # students: belief MAE minus the Bayesian teacher's, paired week by week on the same seeds
        "belief_gap_vs_teacher": {"type": ["object", "null"], "required": ["mean", "se", "n"],
                                  "properties": {"mean": {"type": "number"}, "se": {"type": "number", "minimum": 0},
                                                 "n": {"type": "integer", "minimum": 1}}},
        "action_distribution": {"type": "object", "propertyNames": {"enum": list(ACTIONS)},
                                "additionalProperties": {"type": "number", "minimum": 0, "maximum": 1}},
        "by_grader": {"type": "object", "additionalProperties": {
            "type": "object", "required": ["final_score", "ci95", "components"],
            "properties": {"final_score": {"type": "number"}, "ci95": {"type": "array"},
                           "components": {"type": "object"}}}},
    },
}
JSON_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["schema", "grader", "graders", "env_version", "conditions", "provenance"],
    "properties": {
        "schema": {"const": RESULTS_SCHEMA},
        "grader": {"type": "string"},
        "graders": {"type": "array", "items": {"type": "string"}},
        "env_version": {"type": "string"},
        "provenance": {"type": "object"},
        "conditions": {"type": "object", "additionalProperties": {
            "type": "object", "required": ["seeds", "n_episodes", "agents"],
            "properties": {"seeds": {"type": "string"}, "n_episodes": {"type": "integer"},
                           "recovery_teacher": {"type": ["string", "null"]},
                           "agents": {"type": "object", "additionalProperties": _METRICS}}}},
    },
}


def validate_results(results: dict) -> None:
    """Raise jsonschema.ValidationError if `results` does not have the published shape."""
    import jsonschema

    jsonschema.validate(results, JSON_SCHEMA)


# The teacher that recovery is measured against: the one the students were distilled from when it
# played the evaluation seeds (provenance `distilled_from`: an offline teacher's agent, or "teacher",
# the configured teacher with include_teacher), else the configured teacher, else the Bayesian one.
RECOVERY_TEACHERS = ("teacher", "bayes")


# A player identity's backend (the rollouts manifest's `players`) for a model checkpoint that played:
# a student, whatever its name (`rhythm eval --name grpo`, the pipeline's student_grpo and student_sft).
STUDENT_BACKEND = "checkpoint"


def is_student(identity: dict | None) -> bool:
    return (identity or {}).get("backend") == STUDENT_BACKEND


def student_names(results: dict) -> list[str]:
    """The students of an eval_results document, in playing order: the players whose identity (the
    rollouts manifest's, kept in the provenance) is a checkpoint. A document without identities (an
    older or a hand-made one): the players named student*."""
    players = results.get("provenance", {}).get("players")
    agents = dict.fromkeys(a for block in results["conditions"].values() for a in block["agents"])
    if players is None:
        return [a for a in agents if a.startswith("student")]
    return [a for a in agents if is_student(players.get(a))]


def recovery(score: float, heuristic: float, teacher: float) -> float | None:
    """How much of the teacher's margin over the heuristic a player recovers: (score - heuristic) /
    (teacher - heuristic). 1.0 matches the teacher, 0 the heuristic, below 0 is worse than the
    heuristic. None when the teacher does not beat the heuristic (no margin to recover)."""
    margin = teacher - heuristic
    return None if margin <= 0 else (score - heuristic) / margin


def paired_belief_gap(student: EpisodeBatch, teacher: EpisodeBatch) -> dict:
    """The student's belief MAE minus the teacher's, week by week on the seeds both played (a week
    without a stated belief counts as MAE 1.0): mean, standard error and count."""
    by_seed = dict(zip(teacher.seeds.tolist(), teacher.belief_mae().tolist()))
    diffs = np.array([(1.0 if np.isnan(s) else s) - by_seed[seed]
                      for seed, s in zip(student.seeds.tolist(), student.belief_mae().tolist()) if seed in by_seed])
    se = float(diffs.std(ddof=1) / np.sqrt(len(diffs))) if len(diffs) > 1 else 0.0
    return {"mean": float(diffs.mean()), "se": se, "n": int(len(diffs))}


def compute_results(rollouts_dir, grader: str, *, compare_grader: str = "v2", provenance: dict | None = None) -> dict:
    manifest, rollouts = load_rollouts(rollouts_dir)
    graders = list(dict.fromkeys([grader, compare_grader]))
    conditions = [c for c in CONDITIONS if any(cond == c for _, cond in rollouts)]
    out = {"schema": RESULTS_SCHEMA, "grader": grader, "graders": graders, "env_version": ENV_VERSION,
           "provenance": {**manifest.get("provenance", {}), **(provenance or {}), "players": manifest["players"],
                          "sampling": manifest["sampling"]},
           "conditions": {}}
    for condition in conditions:
        players = [p for p in manifest.get("player_order", manifest["players"]) if (p, condition) in rollouts]
        batches = {p: EpisodeBatch.from_records(condition, rollouts[(p, condition)], p) for p in players}
        # (scores, components) of every player under every grader, each graded once
        graded = {p: {g: get_grader(g).grade_batch(batch) for g in graders} for p, batch in batches.items()}
        heuristic = graded.get("heuristic")
        distilled_from = out["provenance"].get("distilled_from")
        reference = next((p for p in (distilled_from, *RECOVERY_TEACHERS) if p in graded), None)
        students = {p for p in players if is_student(manifest["players"].get(p))}
        agents = {}
        for player, batch in batches.items():
            by_grader = {}
            for g, (scores, parts) in graded[player].items():
                mean, lo, hi = mean_ci95(scores)
                by_grader[g] = {"final_score": mean, "ci95": [lo, hi],
                                "components": {k: float(v.mean()) for k, v in parts.items()}}
            main = by_grader[grader]
            mae = batch.belief_mae()
            counts = np.bincount(batch.actions.ravel(), minlength=len(ACTIONS)) / batch.actions.size
            wins = rec = rec_bayes = None
            if heuristic is not None and player != "heuristic":
                wins = float(np.mean(graded[player][grader][0] > heuristic[grader][0]))
                base = float(heuristic[grader][0].mean())
                if reference is not None and player in students:
                    rec = recovery(main["final_score"], base, float(graded[reference][grader][0].mean()))
                if "bayes" in graded and player in students:
                    rec_bayes = recovery(main["final_score"], base, float(graded["bayes"][grader][0].mean()))
            agents[player] = {
                "n_episodes": len(batch), "final_score": main["final_score"], "ci95": main["ci95"],
                "components": main["components"],
                "belief_mae": float(np.nanmean(mae)) if batch.has_belief.any() else None,
                "wins_vs_heuristic": wins, "invalid_rate": float(batch.invalid.mean()), "recovery": rec,
                "recovery_bayes": rec_bayes,
                "action_distribution": {a: float(c) for a, c in zip(ACTIONS, counts)},
                "by_grader": by_grader,
            }
            if player in students and "bayes" in batches:
                agents[player]["belief_gap_vs_teacher"] = paired_belief_gap(batch, batches["bayes"])
            if player == "teacher":  # the configured teacher played on these seeds (include_teacher)
                agents[player]["teacher_id"] = manifest["players"].get(player, {}).get("id")
        out["conditions"][condition] = {"seeds": manifest["seeds"][condition], "n_episodes": len(batches[players[0]]),
                                        "recovery_teacher": reference if heuristic is not None else None,
                                        "agents": agents}
    validate_results(out)
    return out


def headline_figures(results: dict, decimals: int = 4) -> dict[str, float]:
    """Every figure of an evaluation worth tracking (its MLflow run's metrics), flat as
    "condition/agent/metric": every agent's `final_score` (active grader), `belief_mae` where it states
    beliefs, `invalid_rate` of the agents that answer in text (the students and an API teacher: the
    other references are code), and each student's `recovery`; rounded to `decimals`."""
    answering = {*student_names(results), "teacher"}
    out = {}
    for condition, block in results["conditions"].items():
        for agent, m in block["agents"].items():
            key = f"{condition}/{agent}"
            out[f"{key}/final_score"] = m["final_score"]
            if m["belief_mae"] is not None:
                out[f"{key}/belief_mae"] = m["belief_mae"]
            if agent in answering:
                out[f"{key}/invalid_rate"] = m["invalid_rate"]
            if m.get("recovery") is not None:
                out[f"{key}/recovery"] = m["recovery"]
    return {k: round(float(v), decimals) for k, v in out.items()}


# Dagster's Plots view charts every numeric metadata entry of an asset, two to a row, in the order of
# their labels by code point (dagster-webserver 1.13's AssetMaterializationGraphs sorts them), so the
# labels set the order: rank 1, each student's score and recovery per condition side by side, before
# rank 2, its belief MAE and invalid rate.
PLOTTED = (("1", ("final_score", "recovery")), ("2", ("belief_mae", "invalid_rate")))


def plotted_figures(results: dict, decimals: int = 4) -> dict[str, float]:
    """The students' figures to chart across evaluations, as "<rank> <student>/<condition>/<metric>"
    (PLOTTED) in the order a view sorting labels shows them: every student's score and recovery per
    condition first. The references are not charted: their scores are the same every week on the same
    seeds, and the results table and the evaluation's MLflow run keep them."""
    figures = headline_figures(results, decimals)
    out = {}
    for rank, metrics in PLOTTED:
        for student in student_names(results):
            for condition in results["conditions"]:
                for metric in metrics:
                    value = figures.get(f"{condition}/{student}/{metric}")
                    if value is not None:
                        out[f"{rank} {student}/{condition}/{metric}"] = value
    return dict(sorted(out.items()))


def evaluation_metrics(results: dict) -> dict[str, float]:
    """What an evaluation's MLflow run logs: per condition and agent the final score under the active
    grader (`{condition}/{agent}/final_score`) and under every other grader it was graded with
    (`.../final_score.v2`), belief MAE, recovery and invalid rate (students and API teachers)."""
    out = dict(headline_figures(results, decimals=6))
    for condition, block in results["conditions"].items():
        for agent, m in block["agents"].items():
            for grader, graded in m.get("by_grader", {}).items():
                if grader != results["grader"]:
                    out[f"{condition}/{agent}/final_score.{grader}"] = round(float(graded["final_score"]), 6)
    return out


MAX_INVALID_RATE = 0.05  # the most invalid answers a student may give (the evaluation check, the registry's floor)


def student_gaps(results: dict) -> dict[str, dict[str, float]]:
    """What the evaluation checks measure, per "condition/student": `score_vs_heuristic` (final
    score minus the better of the heuristic's and the fallback-only policy's, since a student whose
    every answer is unusable already earns the fallback's; want > 0), `belief_mae_vs_teacher`
    (belief MAE minus the Bayesian teacher's, a student that states no belief counting as MAE 1.0;
    want <= 0.02), `belief_gap_se` (that gap's standard error, paired week by week) and
    `invalid_rate` (want <= MAX_INVALID_RATE)."""
    out = {"score_vs_heuristic": {}, "belief_mae_vs_teacher": {}, "belief_gap_se": {}, "invalid_rate": {}}
    students = set(student_names(results))
    for condition, block in results["conditions"].items():
        agents = block["agents"]
        references = [agents[r]["final_score"] for r in ("heuristic", "fallback") if r in agents]
        for agent, m in agents.items():
            if agent not in students:
                continue
            key = f"{condition}/{agent}"
            out["invalid_rate"][key] = round(m["invalid_rate"], 4)
            if references:
                out["score_vs_heuristic"][key] = round(m["final_score"] - max(references), 4)
            if "bayes" in agents:
                mae = 1.0 if m["belief_mae"] is None else m["belief_mae"]
                out["belief_mae_vs_teacher"][key] = round(mae - agents["bayes"]["belief_mae"], 4)
                if m.get("belief_gap_vs_teacher"):  # results written before the paired gap: no SE
                    out["belief_gap_se"][key] = round(m["belief_gap_vs_teacher"]["se"], 4)
    return out


def markdown_table(results: dict) -> str:
    grader = results["grader"]
    other = [g for g in results["graders"] if g != grader]
    header = f"| condition | agent | {grader} score | 95% CI |" + "".join(f" {g} score |" for g in other)
    teachers = {b.get("recovery_teacher") for b in results["conditions"].values()} - {None}
    header += f" recovery ({', '.join(sorted(teachers)) or 'teacher'}) | belief MAE | wins vs heuristic | invalid |"
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for condition, block in results["conditions"].items():
        for agent, m in block["agents"].items():
            mae = "–" if m["belief_mae"] is None else f"{m['belief_mae']:.3f}"
            wins = "–" if m["wins_vs_heuristic"] is None else f"{m['wins_vs_heuristic']:.0%}"
            extra = "".join(f" {m['by_grader'][g]['final_score']:.3f} |" for g in other)
            rec = "–" if m.get("recovery") is None else f"{m['recovery']:.0%}"
            if m.get("recovery_bayes") is not None and block.get("recovery_teacher") not in (None, "bayes"):
                rec += f" ({m['recovery_bayes']:.0%} of bayes')"
            name = f"{agent} ({m['teacher_id']})" if m.get("teacher_id") else agent
            lines.append(f"| {condition} | {name} | {m['final_score']:.3f} | [{m['ci95'][0]:.3f}, {m['ci95'][1]:.3f}] |"
                         f"{extra} {rec} | {mae} | {wins} | {m['invalid_rate']:.1%} |")
    return "\n".join(lines) + "\n"


def plot_results(results: dict, out_dir) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    conditions = list(results["conditions"])
    agents = list(dict.fromkeys(a for c in conditions for a in results["conditions"][c]["agents"]))
    width = 0.8 / max(len(agents), 1)
    paths = {}
    for name, key, ylabel in (("final_scores.png", "final_score",
                               f"final score ({results['grader']}); students: recovery"),
                              ("belief_accuracy.png", "belief_mae", "belief MAE (lower is better)")):
        fig, ax = plt.subplots(figsize=(8, 4), dpi=100)
        for i, agent in enumerate(agents):
            xs, ys, errs = [], [], []
            for j, condition in enumerate(conditions):
                m = results["conditions"][condition]["agents"].get(agent)
                if m is None or m[key] is None:
                    continue
                xs.append(j + (i - (len(agents) - 1) / 2) * width)
                ys.append(m[key])
                errs.append((m["ci95"][1] - m["ci95"][0]) / 2 if key == "final_score" else 0.0)
            if xs:
                ax.bar(xs, ys, width, yerr=errs if key == "final_score" else None, capsize=2, label=agent)
            if key == "final_score":  # each student's recovery of the teacher's margin, above its bar
                for j, condition in enumerate(conditions):
                    m = results["conditions"][condition]["agents"].get(agent)
                    if m is not None and m.get("recovery") is not None:
                        ax.text(j + (i - (len(agents) - 1) / 2) * width, m["ci95"][1] + 0.01,
                                f"{m['recovery']:.0%}", ha="center", va="bottom", fontsize=6, rotation=90)
        if key == "belief_mae":
            for j, condition in enumerate(conditions):
                ax.hlines(prior_stats(condition)[1], j - 0.45, j + 0.45, colors="k", linestyles="dashed",
                          label="constant prior mean" if j == 0 else None)
        ax.set_xticks(range(len(conditions)), conditions)
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7, ncol=2)
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        fig.savefig(out / name)
        plt.close(fig)
        paths[name] = str(out / name)
    return paths


def eval_results_stage(rollouts_dir, grader: str, root, *, provenance: dict | None = None,
                       files_digest_recorded: str | None = None) -> dict:
    verify_artifact(rollouts_dir, files_digest_recorded)  # the rollouts as they were published
    results = compute_results(rollouts_dir, grader, provenance=provenance)
    stage_root = Path(root) / "eval_results"
    with staging(stage_root) as staged:
        # Insertion order (conditions, then players as played) is part of the published shape.
        atomic_write_text(staged / "eval_results.json", json.dumps(results, indent=2, allow_nan=False) + "\n")
        markdown = markdown_table(results)
        atomic_write_text(staged / "eval_results.md", markdown)
        plot_results(results, staged)
        version = hashlib.sha256((staged / "eval_results.json").read_bytes()).hexdigest()[:16]
        final = publish_dir(staged, stage_root / version, kind="eval_results", published=True)
    return {"dir": str(final), "version": version, "files_digest": files_digest(final), "json": str(final / "eval_results.json"),
            "final_scores_png": str(final / "final_scores.png"),
            "belief_accuracy_png": str(final / "belief_accuracy.png"), "markdown": markdown, "results": results}


def load_results(path) -> dict:
    return json.loads(Path(path).read_text())


def evaluation_rows(results: dict, *, window: str, rollouts_version: str) -> list[dict]:
    """One evaluation's rows of the history table, one per condition and agent (plain values, for metadata)."""
    return [{"window": window, "grader": results["grader"], "rollouts": rollouts_version, "condition": condition,
             "seeds": block["seeds"], "agent": agent, "n": m["n_episodes"], "final_score": m["final_score"],
             "ci95_lo": m["ci95"][0], "ci95_hi": m["ci95"][1], "belief_mae": m["belief_mae"],
             "invalid_rate": m["invalid_rate"]}
            for condition, block in results["conditions"].items() for agent, m in block["agents"].items()]


def history_rows(evaluations) -> object:
    """The history table (polars) of `evaluations`, each (run id, timestamp, its `evaluation_rows`): every row
    with its evaluation's run and time, sorted by time; a run that evaluated twice keeps its latest rows."""
    import polars as pl

    latest: dict[object, tuple] = {}
    for index, (run_id, timestamp, rows) in enumerate(evaluations):
        key = (run_id, rows[0]["window"] if rows else "") if run_id else index  # a runless report is its own
        if key not in latest or timestamp >= latest[key][1]:
            latest[key] = (run_id, timestamp, rows)
    table = [{"timestamp": timestamp, "run_id": run_id, **row} for run_id, timestamp, rows in latest.values()
             for row in rows]
    if not table:
        return pl.DataFrame()
    return pl.from_dicts(table, infer_schema_length=None).sort(["timestamp", "condition", "agent"])


def history_markdown(history, agent_prefix: str = "student", last: int = 10) -> str:
    import datetime

    import polars as pl

    if history.is_empty():
        return "no evaluation yet\n"
    rows = history.filter(pl.col("agent").str.starts_with(agent_prefix)).tail(last * 6)
    lines = ["| when (UTC) | window | grader | condition | seeds | agent | score | belief MAE |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows.iter_rows(named=True):
        when = datetime.datetime.fromtimestamp(r["timestamp"], datetime.UTC).strftime("%Y-%m-%d %H:%M")
        mae = "–" if r["belief_mae"] is None else f"{r['belief_mae']:.3f}"
        lines.append(f"| {when} | {r.get('window', '')} | {r['grader']} | {r['condition']} | {r['seeds']} | {r['agent']} | "
                     f"{r['final_score']:.3f} | {mae} |")
    return "\n".join(lines) + "\n"
