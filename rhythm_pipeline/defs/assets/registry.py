"""registered_student: the lineage's headline student as a version of the MLflow registered model
`rhythm-student`, and the promotion rule for its alias `champion` (rhythm_core.tracking.registry)."""

import hashlib
import json

import dagster as dg

from rhythm_core.evaluation.results import MAX_INVALID_RATE, load_results, student_gaps
from rhythm_core.tracking.registry import headline_student, register_student, student_summaries
from rhythm_pipeline.defs.resources import ArtifactStoreResource
from rhythm_pipeline.defs.tracking import TrackingResource
from rhythm_pipeline.lineage import lineage_metadata, versioned_output
from rhythm_pipeline.settings import GRADING_AUTOMATION, GRADING_TAGS, code_version


def asset_graph(context: dg.AssetExecutionContext):
    """The whole asset graph of the code location running this step, checks included. A job that
    selects part of it (reevaluate, regrade) does not hold the checks of the assets it leaves out."""
    try:
        return context.repository_def.asset_graph  # the UI, the daemon, `dagster asset materialize`
    except Exception:  # noqa: BLE001 - execute_in_process runs without a repository (Dagster's internal CheckError)
        pass
    job = context.job_def
    while job.asset_selection_data:
        job = job.asset_selection_data.parent_job_def
    if not job.name.startswith("__"):  # a named job of this project (demo, rhythm_pipeline.ops)
        from rhythm_pipeline.definitions import defs

        try:
            defs.resolve_job_def(job.name)
            return defs.resolve_asset_graph()
        except dg.DagsterInvariantViolationError:
            pass
    return job.asset_layer.asset_graph  # an ad-hoc job (dg.materialize): every asset and check it was given


def blocking_checks(context: dg.AssetExecutionContext) -> dict[str, dict]:
    """Every blocking asset check on the assets upstream of this one, with its latest evaluation:
    passed only when it passed on the asset's current (latest) materialization."""
    graph = asset_graph(context)
    ancestors = graph.get_ancestor_asset_keys(context.asset_key)
    keys = sorted((k for k in graph.asset_check_keys if k.asset_key in ancestors and graph.get_check_spec(k).blocking),
                  key=lambda k: k.to_user_string())
    instance = context.instance
    latest = instance.event_log_storage.get_latest_asset_check_execution_by_key(keys) if keys else {}
    out = {}
    for key in keys:
        record = latest.get(key)
        name = f"{key.asset_key.to_user_string()}.{key.name}"
        evaluation = record.event.dagster_event.event_specific_data if record and record.event else None
        if evaluation is None or not hasattr(evaluation, "passed"):
            out[name] = {"passed": None, "note": "never evaluated"}
            continue
        materialized = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key.asset_key), limit=1).records
        target = evaluation.target_materialization_data
        current = bool(materialized) and target is not None and target.storage_id == materialized[0].storage_id
        out[name] = {"passed": bool(evaluation.passed) if current else None, "run_id": record.run_id,
                     **({} if current else {"note": "not evaluated on the current materialization"})}
    return out


@dg.asset(
    group_name="evaluation",
    code_version=code_version("registered-student", register_student, load_results),
    # Re-decided when the grades change: the regrade job (assets tagged rhythm/grades) includes it. It
    # does not grade, so its code version holds no grader: a grader change leaves it synced.
    tags=GRADING_TAGS,
    automation_condition=GRADING_AUTOMATION,
    kinds={"mlflow"},
    description=(
        "The lineage's headline student (the better of GRPO and its SFT start on held-out training weeks, "
        "the grpo_not_worse_than_sft gate's verdict; never chosen on evaluation seeds), "
        "registered as a version of the MLflow model `rhythm-student` (once per checkpoint) with its scores, "
        "recovery, seeds, grader and lineage as tags. Alias `champion` moves to it only when every blocking "
        "asset check behind it passed, it beats the heuristic and the fallback-only policy on every condition "
        "with at most 5% invalid answers, and it beats the current champion on the same evaluation seeds "
        "under the same grader; otherwise it gets alias `candidate`. The decision and the comparison are in the "
        "metadata."
    ),
)
def registered_student(context: dg.AssetExecutionContext, eval_results: dict,
                       tracking: TrackingResource, artifacts: ArtifactStoreResource) -> dg.Output[dict]:
    results = load_results(artifacts.store(context.instance).fetch_value(eval_results)["json"])
    provenance = results.get("provenance", {})
    summaries = student_summaries(results, student_gaps(results)["score_vs_heuristic"], MAX_INVALID_RATE)
    candidate = headline_student(summaries, gate=provenance.get("headline_student"))
    checks = blocking_checks(context)
    tracker = tracking.tracker(context)
    if tracker is None:
        raise dg.Failure("registered_student needs MLflow: the tracking resource is disabled (enabled: false)")
    stage_asset = f"{candidate['stage']}_checkpoint"
    trained = tracking.training_run_of(tracker, stage_asset, candidate["checkpoint_version"])
    source_run = (trained.info.run_id if trained else None) or eval_results.get("mlflow_run_id")
    if source_run and not tracker.search_runs(f"attributes.run_id = '{source_run}'", max_results=1):
        source_run = None  # logged in another store (a step on another machine, its tracking store local)
    if not source_run:  # no training or evaluation run to hold the model: one of its own
        source_run = tracker.start_run(f"registered_student-{context.run.run_id[:8]}",
                                       tags=tracking.dagster_tags(context, {"eval_results": eval_results}))
    if not tracker.ok or not source_run:
        raise dg.Failure(f"the MLflow registry at {tracker.tracking_uri} cannot be used: {tracker.error}",
                         metadata={"tracking_uri": tracker.tracking_uri})
    trained_tags = trained.data.tags if trained else {}
    lineage = {
        "eval_results_version": eval_results["version"], "eval_rollouts_version": provenance.get("eval_rollouts_version"),
        "sft_checkpoint_version": provenance.get("sft_checkpoint_version"),
        "grpo_checkpoint_version": provenance.get("grpo_checkpoint_version"),
        "sft_dataset_version": trained_tags.get("dagster.upstream.sft_dataset"),
        "teacher": trained_tags.get("rhythm.teacher"), "headline_student_gate": provenance.get("headline_student"),
        "training_mlflow_run_id": trained.info.run_id if trained else None,
        "eval_mlflow_run_id": eval_results.get("mlflow_run_id"), "dagster_run_id": context.run.run_id,
    }
    try:
        outcome = register_student(tracker, candidate, checks={name: c["passed"] for name, c in checks.items()},
                                   source_run_id=source_run, lineage=lineage, name=tracking.registered_model,
                                   min_improvement=tracking.min_improvement)
    except Exception as exc:
        raise dg.Failure(f"registering in {tracker.tracking_uri} failed: {type(exc).__name__}: {exc}") from exc
    context.log.info(f"{candidate['agent']} {candidate['checkpoint_version']}: {outcome['decision']} "
                     f"(version {outcome['version']}, alias {outcome['alias']}): {outcome['reason']}")
    value = {**outcome, "agent": candidate["agent"], "checkpoint_version": candidate["checkpoint_version"],
             "headline_score": candidate["headline"], "grader": candidate["grader"],
             "eval_results_version": eval_results["version"]}
    version = hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]
    comparison = outcome["comparison"]
    return versioned_output({**value, "version": version}, {
        "decision": outcome["decision"], "alias": outcome["alias"], "reason": outcome["reason"],
        "registered_model": outcome["registered_model"], "model_version": outcome["version"],
        "new_version": outcome["new_version"], "model_url": dg.MetadataValue.url(outcome["model_url"]),
        "student": candidate["agent"], "checkpoint_version": candidate["checkpoint_version"],
        "headline_score": dg.MetadataValue.float(round(candidate["headline"], 4)),
        **({"champion_score": dg.MetadataValue.float(comparison["champion_score"])}
           if comparison["champion_score"] is not None else {}),
        "comparison": dg.MetadataValue.json(comparison),
        "blocking_checks": dg.MetadataValue.json(checks),
        "grader": candidate["grader"], "seeds": dg.MetadataValue.json(candidate["seeds"]),
        "mlflow_run_id": source_run,
        **lineage_metadata(context, {"eval_results": eval_results}),
    }, version)
