"""Asset checks: every artifact holds the files it was published with (blocking), the teacher data is
complete and valid (blocking), no evaluation or tuning seed leaks into training data (blocking), GRPO
is not worse than its SFT start on held-out training weeks (blocking), the teacher beats the
heuristic under the active grader (warning), and the students' evaluation figures (warnings)."""


import dagster as dg

from rhythm_core.evaluation.results import MAX_INVALID_RATE, load_results, student_gaps
from rhythm_core.store import ArtifactChanged
from rhythm_core.teacher.trajectories import TrajectoryError, read_trajectories, replay_check
from rhythm_env.sim.conditions import parse_seeds
from rhythm_pipeline.defs.assets.data import reeval_report, sft_dataset, teacher_trajectories
from rhythm_pipeline.defs.assets.evaluation import eval_results, eval_rollouts
from rhythm_pipeline.defs.assets.training import grpo_checkpoint, sft_checkpoint
from rhythm_pipeline.defs.resources import ArtifactStoreResource
from rhythm_pipeline.settings import ACTIVE_GRADER


def _latest_materialization(context: dg.AssetCheckExecutionContext, asset):
    """The latest materialization of `key` (of the run's partition, in a run of one), or None. The checks read
    what a materialization recorded rather than take the asset as an input, so that they run on a partitioned
    asset in the run of any one partition, or alone on its latest materialization."""
    partitioned = asset.partitions_def is not None and context.has_partition_key
    records = context.instance.fetch_materializations(dg.AssetRecordsFilter(
        asset_key=asset.key, asset_partitions=[context.partition_key] if partitioned else None), limit=1).records
    return records[0].asset_materialization if records else None


def _files_unchanged(asset) -> dg.AssetChecksDefinition:
    @dg.asset_check(asset=asset, name="files_unchanged", blocking=True,
                    description="The artifact's files are the ones its latest materialization published (every "
                                "file's sha256 against the record whose digest the materialization holds).")
    def files_unchanged(context: dg.AssetCheckExecutionContext, artifacts: ArtifactStoreResource) -> dg.AssetCheckResult:
        materialization = _latest_materialization(context, asset)
        metadata = materialization.metadata if materialization else {}
        if "artifact_path" not in metadata:
            return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.ERROR,
                                       description="no materialization with an artifact path to check")
        path, recorded = metadata["artifact_path"].value, metadata.get("files_digest")
        try:
            digest = artifacts.store(context.instance).verify(path, recorded.value if recorded else None)
        except ArtifactChanged as exc:
            return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.ERROR, description=str(exc))
        return dg.AssetCheckResult(passed=True, severity=dg.AssetCheckSeverity.ERROR, metadata={"files_digest": digest},
                                   description=f"every file as published (files digest {digest})")

    return files_unchanged


# One per asset that publishes an artifact: a tampered artifact fails here, and its readers refuse it.
FILES_UNCHANGED = [_files_unchanged(asset) for asset in (teacher_trajectories, reeval_report, sft_dataset,
                                                         sft_checkpoint, grpo_checkpoint, eval_rollouts, eval_results)]


def _published(context: dg.AssetCheckExecutionContext, asset, artifacts: ArtifactStoreResource) -> tuple[str, dict] | None:
    """(the local path of the asset's latest artifact, fetched and checked against its recorded digest, its
    metadata as plain values), or None where it has none."""
    materialization = _latest_materialization(context, asset)
    if materialization is None or "artifact_path" not in materialization.metadata:
        return None
    metadata = {k: getattr(v, "value", v) for k, v in materialization.metadata.items()}
    fetched = artifacts.store(context.instance).fetch_value({"path": metadata["artifact_path"],
                                                             "files_digest": metadata.get("files_digest")})
    return fetched["path"], metadata


NOT_MATERIALIZED = dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.ERROR,
                                       description="no materialization with an artifact path to check")


@dg.asset_check(asset=teacher_trajectories, blocking=True,
                description="Every line parses, matches the schema and replays exactly; every requested seed is there once.")
def teacher_trajectories_complete_and_valid(context: dg.AssetCheckExecutionContext,
                                            artifacts: ArtifactStoreResource) -> dg.AssetCheckResult:
    published = _published(context, teacher_trajectories, artifacts)
    if published is None:
        return NOT_MATERIALIZED
    path, metadata = published
    try:
        records = read_trajectories(path, allow_truncated_tail=False).records
        replay_check(records, path)
    except TrajectoryError as exc:
        return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.ERROR, description=str(exc))
    missing = sorted(set(parse_seeds(metadata["seeds"])) - {r["seed"] for r in records})
    return dg.AssetCheckResult(
        passed=not missing,
        severity=dg.AssetCheckSeverity.ERROR,
        description=f"missing seeds: {missing[:20]}" if missing else f"{len(records)} complete episodes",
        metadata={"episodes": len(records), "missing_seeds": len(missing)},
    )


@dg.asset_check(asset=reeval_report, description="The teacher's mean score beats the heuristic's under the active grader.")
def teacher_beats_heuristic(reeval_report: dict) -> dg.AssetCheckResult:
    rows = reeval_report["teacher_vs_heuristic"]
    losing = {c: v for c, v in rows.items() if v[0] <= v[1]}
    return dg.AssetCheckResult(
        passed=not losing,
        severity=dg.AssetCheckSeverity.WARN,
        description=(f"teacher does not beat the heuristic under {ACTIVE_GRADER} on: {', '.join(losing)}"
                     if losing else f"teacher beats the heuristic under {ACTIVE_GRADER} on every condition"),
        metadata={f"{c}_teacher_minus_heuristic": round(t - h, 4) for c, (t, h) in rows.items()},
    )


@dg.asset_check(asset=sft_dataset, blocking=True,
                description="No evaluation or tuning seed (conditions.EVAL_SEEDS, TUNING_SEEDS) appears in any split "
                            "of the training data.")
def sft_dataset_has_no_eval_seeds(context: dg.AssetCheckExecutionContext, sft_dataset: dict,
                                  artifacts: ArtifactStoreResource) -> dg.AssetCheckResult:
    # Imported here: `datasets` (with pyarrow and pandas) would slow every load of the definitions.
    import datasets

    from rhythm_core.data.summary import check_no_eval_seeds

    leaked = check_no_eval_seeds(datasets.load_from_disk(artifacts.store(context.instance).fetch_value(sft_dataset)["path"]))
    return dg.AssetCheckResult(
        passed=not leaked,
        severity=dg.AssetCheckSeverity.ERROR,
        description=(f"evaluation or tuning seeds in the training data: {leaked[:20]}" if leaked
                     else "no evaluation or tuning seed in any split"),
        metadata={"leaked_episodes": len(leaked)},
    )


def _results_of(context: dg.AssetCheckExecutionContext, artifacts: ArtifactStoreResource) -> dict:
    published = _published(context, eval_results, artifacts)
    if published is None:
        raise dg.Failure("eval_results has no materialization to check", allow_retries=False)
    return load_results(published[0])


@dg.asset_check(asset=eval_results, description="Each student beats the better of the heuristic and the fallback-only "
                                                  "policy on every condition (active grader).")
def students_beat_heuristic(context: dg.AssetCheckExecutionContext,
                            artifacts: ArtifactStoreResource) -> dg.AssetCheckResult:
    margins = student_gaps(_results_of(context, artifacts))["score_vs_heuristic"]
    losing = [k for k, v in margins.items() if v <= 0]
    return dg.AssetCheckResult(passed=not losing, severity=dg.AssetCheckSeverity.WARN, metadata=margins,
                               description=f"not above the heuristic and the fallback: {', '.join(losing)}" if losing
                               else "all above the heuristic and the fallback")


BELIEF_MARGIN = 0.02  # how much worse than the teacher a student's belief may be
BELIEF_Z = 2.0  # standard errors of the paired gap that make "worse by more than the margin" evidence


@dg.asset_check(asset=eval_results, description=(
    f"Each student's belief MAE is within {BELIEF_MARGIN} of the Bayesian teacher's, judged against noise: it "
    f"fails only when the gap, paired week by week on the same seeds, exceeds {BELIEF_MARGIN} by more than "
    f"{BELIEF_Z:g} standard errors (a CPU's rounding or an SFT seed moves the OOD gap by about one)."))
def student_belief_close_to_teacher(context: dg.AssetCheckExecutionContext,
                                    artifacts: ArtifactStoreResource) -> dg.AssetCheckResult:
    return belief_verdict(_results_of(context, artifacts))


def belief_verdict(results: dict) -> dg.AssetCheckResult:
    """student_belief_close_to_teacher's verdict on an evaluation's results."""
    gaps = student_gaps(results)
    far = [k for k, v in gaps["belief_mae_vs_teacher"].items()
           if v - BELIEF_MARGIN > BELIEF_Z * gaps["belief_gap_se"].get(k, 0.0)]
    noisy = [k for k, v in gaps["belief_mae_vs_teacher"].items() if v > BELIEF_MARGIN and k not in far]
    metadata = {**gaps["belief_mae_vs_teacher"], **{f"{k}/se": v for k, v in gaps["belief_gap_se"].items()}}
    if far:
        description = (f"more than {BELIEF_MARGIN} worse than the teacher beyond {BELIEF_Z:g} standard errors: "
                       f"{', '.join(far)}")
    else:
        description = f"within {BELIEF_MARGIN} of the teacher everywhere" + (
            f" (beyond {BELIEF_MARGIN} but within noise: {', '.join(noisy)})" if noisy else "")
    return dg.AssetCheckResult(passed=not far, severity=dg.AssetCheckSeverity.WARN, metadata=metadata,
                               description=description)


@dg.asset_check(asset=eval_results,
                description=f"Invalid (unparsable or illegal) student answers are at most {MAX_INVALID_RATE:.0%}.")
def student_invalid_answers_at_most_5pct(context: dg.AssetCheckExecutionContext,
                                         artifacts: ArtifactStoreResource) -> dg.AssetCheckResult:
    rates = student_gaps(_results_of(context, artifacts))["invalid_rate"]
    high = [k for k, v in rates.items() if v > MAX_INVALID_RATE]
    return dg.AssetCheckResult(passed=not high, severity=dg.AssetCheckSeverity.WARN, metadata=rates,
                               description=f"above {MAX_INVALID_RATE:.0%}: {', '.join(high)}" if high
                               else f"at most {MAX_INVALID_RATE:.0%} everywhere")


@dg.asset_check(asset=grpo_checkpoint, blocking=True,
                description="The GRPO student is not worse than its SFT start beyond noise (mean paired difference "
                            "above -2 standard errors) on the dataset's held-out training weeks.")
def grpo_not_worse_than_sft(grpo_checkpoint: dict) -> dg.AssetCheckResult:
    validation = grpo_checkpoint.get("validation")
    if not validation:
        return dg.AssetCheckResult(passed=True, severity=dg.AssetCheckSeverity.WARN,
                                   description="validation_weeks is 0: GRPO was not validated against its SFT start")
    worse = validation["worse_beyond_noise"]
    grpo, sft = validation["score"]["student_grpo"], validation["score"]["student_sft"]
    return dg.AssetCheckResult(
        passed=not worse, severity=dg.AssetCheckSeverity.ERROR,
        description=(f"GRPO {grpo:.4f} vs SFT {sft:.4f} on {validation['weeks']} held-out training weeks "
                     f"({validation['grader']}): difference {validation['difference']:+.4f} ± "
                     f"{validation['difference_se']:.4f} (SE)" + ("; worse beyond noise" if worse else "")),
        metadata={"validation_score_grpo": grpo, "validation_score_sft": sft,
                  "validation_difference": validation["difference"],
                  "validation_difference_se": validation["difference_se"], "headline_student": validation["better"]},
    )
