"""registered_student: the lineage's headline student as a version of the MLflow registered model
`rhythm-student`, and the promotion rule for its alias `champion` (rhythm_core.tracking.registry)."""

import hashlib
import json

import dagster as dg

from rhythm_core.evaluation.results import MAX_INVALID_RATE, load_results, student_gaps
from rhythm_core.store import ArtifactChanged
from rhythm_core.tracking.registry import headline_student, register_student, student_summaries
from rhythm_pipeline.defs.partitions import DEFAULT_EVAL_WINDOW
from rhythm_pipeline.defs.resources import ArtifactStoreResource
from rhythm_pipeline.defs.tracking import TrackingResource
from rhythm_pipeline.lineage import lineage_metadata, versioned_output
from rhythm_pipeline.settings import GRADING_AUTOMATION, GRADING_TAGS, code_version


def code_location() -> dg.Definitions:
    """The definitions this asset is part of: the `rhythm` code location's."""
    from rhythm_pipeline.definitions import defs

    return defs


def _upstream_blocking_checks(key: dg.AssetKey, defs: dg.Definitions) -> list[dg.AssetCheckKey]:
    """Every blocking check of an asset upstream of `key`, from the definitions' public specs."""
    deps = {spec.key: {dep.asset_key for dep in spec.deps} for spec in defs.resolve_all_asset_specs()}
    ancestors, frontier = set(), set(deps.get(key, ()))
    while frontier:
        ancestors |= frontier
        frontier = {parent for child in frontier for parent in deps.get(child, ())} - ancestors
    checks = [spec for checks_def in defs.asset_checks or () for spec in checks_def.check_specs]
    return sorted((spec.key for spec in checks if spec.blocking and spec.asset_key in ancestors),
                  key=lambda k: k.to_user_string())


def blocking_checks(context: dg.AssetExecutionContext) -> dict[str, dict]:
    """Every blocking check on the unpartitioned assets upstream of this one, with its latest evaluation:
    passed only when it passed on that asset's current materialization. The partitioned ones are checked
    where they are read: a window's checks block this asset in the run that evaluated it, and its files are
    verified again here (`window_files`); each teacher shard's files are verified by the dataset that reads it."""
    instance = context.instance
    defs = code_location()
    partitioned = {spec.key for spec in defs.resolve_all_asset_specs() if spec.partitions_def is not None}
    out = {}
    for key in _upstream_blocking_checks(context.asset_key, defs):
        if key.asset_key in partitioned:
            continue
        name = f"{key.asset_key.to_user_string()}.{key.name}"
        record = instance.get_latest_asset_check_evaluation_record(key)
        evaluation = record.evaluation if record else None
        if evaluation is None:
            out[name] = {"passed": None, "note": "never evaluated"}
            continue
        target = evaluation.target_materialization_data
        latest = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key.asset_key), limit=1).records
        current = bool(latest) and target is not None and target.storage_id == latest[0].storage_id
        out[name] = {"passed": bool(evaluation.passed) if current else None, "run_id": record.run_id,
                     **({} if current else {"note": "not evaluated on the current materialization"})}
    return out


def window_files(store, window: str, values: dict[str, dict]) -> dict[str, dict]:
    """The window's evaluation artifacts (name -> its value) verified against the digests their
    materializations recorded: what their partitions' files_unchanged checks assert, as checks."""
    out = {}
    for name, value in values.items():
        path = value.get("dir") or value.get("json")
        try:
            store.verify(path, value.get("files_digest"))
            out[f"{name}[{window}].files_unchanged"] = {"passed": True}
        except ArtifactChanged as exc:
            out[f"{name}[{window}].files_unchanged"] = {"passed": False, "note": str(exc)}
    return out


def _rollouts_of(context: dg.AssetExecutionContext, window: str) -> dict | None:
    """What the window's latest eval_rollouts materialization recorded of its artifact (its dir and digest)."""
    records = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("eval_rollouts"), asset_partitions=[window]), limit=1).records
    if not records:
        return None
    metadata = records[0].asset_materialization.metadata
    digest = metadata.get("files_digest")
    return {"dir": metadata["artifact_path"].value, "files_digest": digest.value if digest else None}


class RegisteredStudentConfig(dg.Config):
    # The evaluation window the student is promoted from; empty: the window this run evaluated, else the one
    # evaluated last.
    window: str = ""


def _promotion_window(context: dg.AssetExecutionContext, config: RegisteredStudentConfig, windows: dict) -> str:
    if config.window:
        window = config.window
    elif context.has_partition_key and context.partition_key in windows:
        window = context.partition_key  # a run of the reevaluate job: its window
    elif len(windows) == 1:
        window = next(iter(windows))
    else:
        latest = context.instance.get_latest_materialization_event(dg.AssetKey("eval_results"))
        window = latest.asset_materialization.partition if latest else ""
    if window not in windows:
        raise dg.Failure(f"evaluation window {window!r} has no eval_results to promote from; evaluated: "
                         + (", ".join(sorted(windows, key=int)) or "none"), allow_retries=False)
    return window


@dg.asset(
    group_name="evaluation",
    ins={"eval_results": dg.AssetIn(metadata={"allow_missing_partitions": True})},
    code_version=code_version("registered-student", register_student, load_results, config=RegisteredStudentConfig),
    # Re-decided when the grades change: the regrade job (assets tagged rhythm/grades) includes it. It
    # does not grade, so its code version holds no grader: a grader change leaves it synced.
    tags=GRADING_TAGS,
    # never promoted automatically past a failed blocking check upstream
    automation_condition=GRADING_AUTOMATION & dg.AutomationCondition.all_deps_blocking_checks_passed(),
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
def registered_student(context: dg.AssetExecutionContext, config: RegisteredStudentConfig, eval_results: dict,
                       tracking: TrackingResource, artifacts: ArtifactStoreResource) -> dg.Output[dict]:
    if "json" in eval_results:  # one window evaluated: Dagster hands its value as it is
        eval_results = {eval_results.get("window", DEFAULT_EVAL_WINDOW): eval_results}
    window = _promotion_window(context, config, eval_results)
    eval_results = eval_results[window]
    results = load_results(artifacts.store(context.instance).fetch_value(eval_results)["json"])

    provenance = results.get("provenance", {})
    summaries = student_summaries(results, student_gaps(results)["score_vs_heuristic"], MAX_INVALID_RATE)
    candidate = headline_student(summaries, gate=provenance.get("headline_student"))
    store = artifacts.store(context.instance)
    evaluated = {"eval_rollouts": _rollouts_of(context, window), "eval_results": eval_results}
    checks = {**blocking_checks(context), **window_files(store, window, {k: v for k, v in evaluated.items() if v})}
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
        "grader": candidate["grader"], "seeds": dg.MetadataValue.json(candidate["seeds"]), "window": window,
        "mlflow_run_id": source_run,
        **lineage_metadata(context, {"eval_results": eval_results}),
    }, version)
