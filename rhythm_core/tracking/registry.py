"""The model registry: which evaluated student is registered, and when alias `champion` moves to it.

After an evaluation, the lineage's headline student (`headline_student`: the one GRPO's validation
gate chose on held-out training weeks, never on evaluation seeds) is registered as a version of
`rhythm-student`, once per checkpoint (a re-evaluation of a registered checkpoint adds its figures to that version's tags).
The promotion rule (`promotion_decision`, pure):

1. a checkpoint that already holds `champion` keeps it (its tags gain the new evaluation);
2. every blocking asset check behind it must have passed, else it gets alias `candidate`;
3. it must clear the references' floor on this evaluation: beat the better of the heuristic and the
   fallback-only policy on every condition, with at most the evaluation's `MAX_INVALID_RATE` invalid
   answers (what its warning checks ask of every student; both handed in by the caller), else it gets `candidate`: a student that
   trained badly never becomes the first champion;
4. with no champion yet, it becomes the champion;
5. otherwise it is compared with the champion on the same evaluation: the same seeds of every
   condition, the same grader, env version and sampling (`evaluation_key`). Every version's tags
   keep its headline score under each evaluation it had (`eval.<key>`), under every grader that
   evaluation graded with (the active one and v2), so a champion from an earlier run is compared on
   what it scored then. It is promoted only when it beats the champion by more than
   `min_improvement`; a champion never evaluated that way keeps its alias (no comparison on other
   seeds), and the new version gets `candidate`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

from .store import Tracker

REGISTERED_MODEL = "rhythm-student"
CHAMPION, CANDIDATE = "champion", "candidate"
STUDENTS = {"student_grpo": "grpo", "student_sft": "sft"}  # evaluated agent -> training stage


def evaluation_key(seeds: Mapping[str, str], grader: str, env_version: str, sampling: Mapping | None = None) -> str:
    """What makes two evaluations comparable: the seeds of every condition, grader, env version and
    the students' sampling settings (12 hex digits)."""
    blob = json.dumps({"seeds": dict(seeds), "grader": grader, "env_version": env_version,
                       "sampling": dict(sampling or {})}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def student_summaries(results: dict, margins: Mapping[str, float], max_invalid_rate: float) -> dict[str, dict]:
    """Each student's figures in an eval_results document (rhythm_core.evaluation.results): scores per
    condition under the active grader, the headline score (their mean), recovery, belief MAE, invalid
    rate, and its headline under every evaluation key the document supports (one per grader).

    The evaluation's own rules are handed in, so the registry holds none of them: `margins`, each
    "condition/student" score minus the better of the heuristic's and the fallback-only policy's
    (`evaluation.results.student_gaps(results)["score_vs_heuristic"]`), and `max_invalid_rate`, the
    most invalid answers a student may give (`evaluation.results.MAX_INVALID_RATE`); `below_floor`
    reads both from the summary."""
    provenance = results.get("provenance", {})
    conditions = results["conditions"]
    seeds = {c: block["seeds"] for c, block in conditions.items()}
    env_version, sampling = results.get("env_version", ""), provenance.get("sampling") or {}
    out = {}
    for agent, stage in STUDENTS.items():
        if not all(agent in block["agents"] for block in conditions.values()):
            continue
        figures = {c: block["agents"][agent] for c, block in conditions.items()}
        by_grader = {g: {c: m["by_grader"][g]["final_score"] for c, m in figures.items()}
                     for g in results.get("graders", [results["grader"]])
                     if all(g in m["by_grader"] for m in figures.values())}
        headline = {g: sum(scores.values()) / len(scores) for g, scores in by_grader.items()}
        out[agent] = {
            "agent": agent, "stage": stage, "grader": results["grader"], "seeds": seeds, "env_version": env_version,
            "checkpoint_version": provenance.get(f"{stage}_checkpoint_version"),
            "model_dir": provenance.get(f"{stage}_checkpoint"), "base_model": provenance.get("base_model"),
            "headline": headline[results["grader"]],
            "scores": {c: m["final_score"] for c, m in figures.items()},
            "recovery": {c: m.get("recovery") for c, m in figures.items()},
            "belief_mae": {c: m.get("belief_mae") for c, m in figures.items()},
            "invalid_rate": {c: m.get("invalid_rate") for c, m in figures.items()},
            "vs_references": {c: margins[f"{c}/{agent}"] for c in figures if f"{c}/{agent}" in margins},
            "max_invalid_rate": max_invalid_rate,
            "evaluations": {evaluation_key(seeds, g, env_version, sampling): {"grader": g, "headline": h}
                            for g, h in headline.items()},
            "evaluation_key": evaluation_key(seeds, results["grader"], env_version, sampling),
        }
    return out


def headline_student(summaries: dict[str, dict], gate: str | None = None) -> dict:
    """The student the lineage ships: the one GRPO's validation gate named (the better of GRPO and its
    SFT start on held-out *training* weeks, `grpo_checkpoint` metadata `headline_student`), so the
    choice never looks at evaluation seeds. Without a gate verdict (no GRPO, or an older evaluation),
    the student with the highest headline score, GRPO on a tie."""
    if not summaries:
        raise ValueError("no student in the evaluation results (expected student_grpo and/or student_sft)")
    if gate in summaries:
        return summaries[gate]
    order = [a for a in STUDENTS if a in summaries]
    return summaries[max(order, key=lambda a: (summaries[a]["headline"], -order.index(a)))]


def champion_score(tags: Mapping[str, str], key: str) -> float | None:
    value = tags.get(f"eval.{key}")
    return float(value) if value not in (None, "") else None


def promotion_decision(candidate: dict, champion: Mapping | None, checks: Mapping[str, bool | None], *,
                       min_improvement: float = 0.0) -> dict:
    """Where the aliases go for `candidate` (a `student_summaries` entry). `champion`: the current
    champion's version ({"version": ..., "tags": {...}}) or None; `checks`: every blocking asset check
    behind the candidate -> passed (None: never evaluated on the current materialization).

    Returns {"decision": "promoted" | "candidate" | "unchanged", "alias": the alias the candidate's
    version gets, "reason", "failed_checks", "comparison"}."""
    failed = sorted(name for name, passed in checks.items() if passed is not True)
    key = candidate["evaluation_key"]
    comparison = {"evaluation_key": key, "grader": candidate["grader"], "seeds": candidate["seeds"],
                  "candidate": candidate["agent"], "candidate_checkpoint": candidate["checkpoint_version"],
                  "candidate_score": round(candidate["headline"], 6), "champion_version": None,
                  "champion_checkpoint": None, "champion_score": None, "difference": None,
                  "min_improvement": min_improvement}

    def decide(decision: str, reason: str) -> dict:
        alias = CHAMPION if decision in ("promoted", "unchanged") else CANDIDATE
        return {"decision": decision, "alias": alias, "reason": reason, "failed_checks": failed,
                "checks": dict(checks), "comparison": comparison}

    if champion is not None:
        tags = champion.get("tags", {})
        score = champion_score(tags, key)
        comparison.update(champion_version=str(champion.get("version")), champion_checkpoint=tags.get("checkpoint_version"),
                          champion_score=None if score is None else round(score, 6))
        if score is not None:
            comparison["difference"] = round(candidate["headline"] - score, 6)
        if tags.get("checkpoint_version") and tags.get("checkpoint_version") == candidate["checkpoint_version"]:
            return decide("unchanged", "this checkpoint is the champion already; its tags gain this evaluation")
    if failed:
        return decide("candidate", f"blocking checks not passed: {', '.join(failed)}")
    if below := below_floor(candidate):
        return decide("candidate", f"below the references' floor: {below}")
    if champion is None:
        return decide("promoted", "no champion yet and every blocking check passed")
    if comparison["champion_score"] is None:
        return decide("candidate", f"the champion (version {comparison['champion_version']}) was never evaluated on "
                                   f"these seeds under {candidate['grader']} (evaluation {key}): no comparison, "
                                   "the champion stays")
    difference = comparison["difference"]
    if difference > min_improvement:
        return decide("promoted", f"beats the champion (version {comparison['champion_version']}) by "
                                  f"{difference:+.4f} on the same seeds under {candidate['grader']}")
    return decide("candidate", f"does not beat the champion (version {comparison['champion_version']}): "
                               f"{difference:+.4f} on the same seeds under {candidate['grader']}"
                               + (f" (needs > {min_improvement:+.4f})" if min_improvement else ""))


def below_floor(candidate: dict) -> str:
    """Where `candidate` does not clear the references' floor ("" when it does): a condition it does
    not beat the better of the heuristic and the fallback-only policy on, or answers invalidly above
    its `max_invalid_rate` on."""
    losing = [f"{c} {v:+.4f} vs the heuristic/fallback" for c, v in candidate.get("vs_references", {}).items() if v <= 0]
    invalid = [f"{c} {v:.1%} invalid answers" for c, v in candidate.get("invalid_rate", {}).items()
               if v is not None and v > candidate["max_invalid_rate"]]
    return "; ".join(losing + invalid)


def version_tags(candidate: dict, lineage: Mapping[str, object]) -> dict[str, str]:
    """The tags a registered version carries: the latest evaluation's scores, recovery, belief MAE,
    invalid rate, seeds and grader, its headline under every evaluation key, and the lineage."""
    def fmt(value):
        return "" if value is None else f"{value:.4f}" if isinstance(value, float) else str(value)

    tags = {"agent": candidate["agent"], "stage": candidate["stage"], "checkpoint_version": candidate["checkpoint_version"],
            "base_model": candidate.get("base_model"), "grader": candidate["grader"],
            "seeds": json.dumps(candidate["seeds"], sort_keys=True), "env_version": candidate.get("env_version"),
            "headline_score": fmt(candidate["headline"]), "evaluation_key": candidate["evaluation_key"]}
    for metric in ("scores", "recovery", "belief_mae", "invalid_rate"):
        for condition, value in candidate[metric].items():
            tags[f"{'score' if metric == 'scores' else metric}.{condition}"] = fmt(value)
    for key, evaluation in candidate["evaluations"].items():
        tags[f"eval.{key}"] = f"{evaluation['headline']:.6f}"
    tags.update({f"lineage.{k}": v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str)
                 for k, v in lineage.items() if v is not None})
    return {k: str(v) for k, v in tags.items() if v is not None}


def register_student(tracker: Tracker, candidate: dict, *, checks: Mapping[str, bool | None],
                     source_run_id: str, lineage: Mapping[str, object] | None = None,
                     name: str = REGISTERED_MODEL, min_improvement: float = 0.0) -> dict:
    """Register `candidate` (once per checkpoint; its model directory logged as `model` into
    `source_run_id`), decide with `promotion_decision` and move the alias. Raises on registry errors
    (the caller decides whether that fails its work)."""
    from mlflow.exceptions import MlflowException

    client = tracker.client
    try:
        client.create_registered_model(name, description="RhythmEnv students distilled by the rhythm pipeline; "
                                                          "alias champion = the promoted one (rhythm_core.tracking.registry).")
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    try:
        current = client.get_model_version_by_alias(name, CHAMPION)
        champion = {"version": current.version, "tags": dict(current.tags)}
    except MlflowException:
        champion = None
    decision = promotion_decision(candidate, champion, checks, min_improvement=min_improvement)
    tags = version_tags(candidate, {**(lineage or {}), "blocking_checks": dict(checks)})
    tags.update({"decision": decision["decision"], "decision_reason": decision["reason"]})
    existing = client.search_model_versions(
        f"name = '{name}' and tags.checkpoint_version = '{candidate['checkpoint_version']}'")
    if existing:
        version = max(existing, key=lambda v: int(v.version))
        for key, value in tags.items():  # eval.<key> tags accumulate; the rest is the latest evaluation
            client.set_model_version_tag(name, version.version, key, value)
        new = False
    else:
        run = client.get_run(source_run_id)
        if "://" in str(candidate["model_dir"]):  # in an object store: the version points at it, nothing copied
            source = str(candidate["model_dir"])
        else:
            if not client.list_artifacts(source_run_id, "model"):
                client.log_artifacts(source_run_id, str(Path(candidate["model_dir"])), "model")
            source = f"{run.info.artifact_uri}/model"
        version = client.create_model_version(name, source=source, run_id=source_run_id,
                                              tags=tags, description=(
                                                  f"{candidate['agent']} {candidate['checkpoint_version']} "
                                                  f"({candidate.get('base_model')}): headline "
                                                  f"{candidate['headline']:.4f} under {candidate['grader']}"))
        new = True
    if decision["decision"] != "unchanged":
        client.set_registered_model_alias(name, decision["alias"], version.version)
    if decision["alias"] == CHAMPION:
        aliases = client.get_registered_model(name).aliases
        if str(aliases.get(CANDIDATE)) == str(version.version):
            client.delete_registered_model_alias(name, CANDIDATE)
    return {**decision, "registered_model": name, "version": str(version.version), "new_version": new,
            "source_run_id": source_run_id, "model_url": tracker.model_url(name, version.version)}
