"""The data half of the lineage: teacher_trajectories (one partition per seed shard) -> reeval_report ->
sft_dataset, the two readers merging the published shards in seed order.

Asset bodies only translate between Dagster and rhythm_core.stages: config in, metadata out.
"""


import dagster as dg

from rhythm_core.agents.bayes import PLAN_GRADER
from rhythm_core.code_version import grader_version
from rhythm_core.data.stages import dataset_stage, reeval_stage
from rhythm_core.store import StageIncomplete
from rhythm_core.teacher.shards import check_disjoint, ordered_shards, shard_range, teacher_data
from rhythm_core.teacher.stage import teacher_stage
from rhythm_env.graders import DEFAULT_GRADER
from rhythm_env.protocol import DEFAULT_PROMPT_FORMAT, DEFAULT_READOUT_FORM, DEFAULT_REASONING
from rhythm_env.sim.spec import ENV_VERSION
from rhythm_pipeline.defs.budget import record_spend, teacher_run_budget
from rhythm_pipeline.defs.partitions import TEACHER_SHARDS
from rhythm_pipeline.defs.pools import TEACHER_POOL
from rhythm_pipeline.defs.resources import ArtifactStoreResource, HubResource, TeacherResource
from rhythm_pipeline.defs.retries import TRANSIENT_RETRY, retried_only_if_transient
from rhythm_pipeline.lineage import lineage_metadata, versioned_output
from rhythm_pipeline.settings import ACTIVE_GRADER, GRADING_AUTOMATION, GRADING_TAGS, code_version


class TeacherTrajectoriesConfig(dg.Config):
    condition: str = "continuous"  # the condition with training seeds; the seeds are the partition's shard


def _teacher_metadata(result: dict) -> dict:
    run = result["run"]
    return {
        "artifact_path": dg.MetadataValue.path(result["path"]),
        "episodes": result["n_episodes"],
        "steps": result["n_steps"],
        "invalid_answer_rate": result["invalid_answer_rate"],
        "prompt_tokens": result["prompt_tokens"],
        "cached_prompt_tokens": result["cached_prompt_tokens"],
        "cache_hit_fraction": result["cache_hit_fraction"],
        "completion_tokens": result["completion_tokens"],
        "reasoning_tokens": result["reasoning_tokens"],
        "length_reasks": result["length_reasks"],
        "cost_usd": result["cost_usd"],
        "cost_usd_this_run": run["cost_usd"],
        **({"request_shape": dg.MetadataValue.json(run["request_shape"])} if run.get("request_shape") else {}),
        "wall_s": run["wall_s"],
        "episodes_played": run["episodes_written_this_run"],
        "episodes_resumed": run["episodes_resumed"],
        "retries": run["retries"],
        f"teacher_mean_score_{ACTIVE_GRADER}": result["mean_score"][ACTIVE_GRADER],
        "teacher_mean_score_v2": result["mean_score"]["v2"],
        "teacher": result["teacher"]["id"],
        "teacher_backend": result["teacher"]["backend"],
        "teacher_model": result["teacher"]["model"],
        "condition": result["condition"],
        "seeds": result["seeds"],
    }


@dg.asset(
    group_name="data",
    partitions_def=TEACHER_SHARDS,
    pool=TEACHER_POOL,
    retry_policy=TRANSIENT_RETRY,
    # the offline teachers plan with a grader's own score (agents.bayes.PLAN_GRADER): its code is theirs
    code_version=code_version("teacher", teacher_stage, config=TeacherTrajectoriesConfig, env=ENV_VERSION,
                              plans_with=grader_version(PLAN_GRADER)),
    kinds={"python", "jsonl"},
    description=(
        "Teacher episodes of one seed shard (the partition: a range of training seeds), one JSON line per "
        "episode: every step's rendered prompt, the teacher's raw answer, parsed belief and action, meters and "
        "token usage. The teacher is the TeacherResource (the offline search teacher by default, or the "
        "Bayesian one, or an OpenAI-compatible model). A published shard is never played again; an interrupted "
        "or over-budget shard resumes on its next materialization without paying twice."
    ),
)
def teacher_trajectories(context: dg.AssetExecutionContext, config: TeacherTrajectoriesConfig,
                         teacher: TeacherResource, artifacts: ArtifactStoreResource) -> dg.Output[dict]:
    shard = context.partition_key
    with retried_only_if_transient():
        shard_range(shard, config.condition)
        check_disjoint(context.instance.get_dynamic_partitions(TEACHER_SHARDS.name))
        settings = teacher_run_budget(context, teacher)
        store = artifacts.store(context.instance)
    try:
        with retried_only_if_transient(passthrough=(StageIncomplete,)):
            result = teacher_stage(settings, config.condition, shard, store.cache, grader=ACTIVE_GRADER,
                                   log=context.log.info, store=store)
    except StageIncomplete as exc:
        record_spend(context, shard, exc.details.get("cost_usd", 0.0))
        # a spent budget fails once; seeds that failed (the endpoint's own retries spent) are tried again and resume
        raise dg.Failure(description=str(exc), metadata=exc.details,
                         allow_retries=exc.details.get("stopped_reason") is None) from exc
    record_spend(context, shard, result["run"]["cost_usd"])
    with retried_only_if_transient():
        result = store.publish_value(result)
    return versioned_output(result, {**_teacher_metadata(result), **lineage_metadata(context, config=config)})


# Readers take every published shard (or those in `teacher_shards`): a shard not materialized is skipped.
SHARDS_IN = {"teacher_trajectories": dg.AssetIn(metadata={"allow_missing_partitions": True})}


def _teacher_data(context, store, shards: dict, chosen: list[str]) -> dict:
    """The chosen published shards (all by default) as one source, each fetched into this step's cache.
    `shards`: the input, {shard: its value}, or the value itself where one shard is published."""
    if "version" in shards and "seeds" in shards:  # Dagster hands a single partition's value as it is
        shards = {shards["seeds"]: shards}
    data = teacher_data([store.fetch_value(s) for s in ordered_shards(shards, chosen)])
    context.log.info(f"teacher data: {len(data.get('shards', [data]))} shard(s), seeds {data['seeds']}")
    return data


def _shards_metadata(data: dict) -> dict:
    shards = data.get("shards", [data])
    return {"teacher_shards": dg.MetadataValue.json({s["seeds"]: s["version"] for s in shards}),
            "seeds": data["seeds"]}


class ReevalReportConfig(dg.Config):
    teacher_shards: list[str] = []  # the shards to re-grade; empty: every published shard


@dg.asset(
    group_name="data",
    ins=SHARDS_IN,
    retry_policy=TRANSIENT_RETRY,
    code_version=code_version("reeval", reeval_stage, grader=ACTIVE_GRADER),
    tags=GRADING_TAGS,
    automation_condition=GRADING_AUTOMATION,
    kinds={"python", "polars"},
    description=(
        "Every teacher episode of the published shards graded under the active grader and under v2 (the published one), "
        "next to random, heuristic and constant-belief baselines replayed on the same seeds: per-episode and "
        "per-condition tables (mean, 95% CI, belief MAE, wins vs the heuristic) as parquet and JSON."
    ),
)
def reeval_report(context: dg.AssetExecutionContext, config: ReevalReportConfig, teacher_trajectories: dict,
                  artifacts: ArtifactStoreResource) -> dg.Output[dict]:
    with retried_only_if_transient():
        store = artifacts.store(context.instance)
        data = _teacher_data(context, store, teacher_trajectories, config.teacher_shards)
        result = store.publish_value(reeval_stage(data, ACTIVE_GRADER, store.cache))
    teacher_mean, heuristic_mean = next(iter(result["teacher_vs_heuristic"].values()))
    return versioned_output(result, {
            "report": dg.MetadataValue.md(result["markdown"]),
            "artifact_path": dg.MetadataValue.path(result["dir"]),
            "grader": ACTIVE_GRADER,
            "episodes": result["n_episodes"],
            "teacher_mean": teacher_mean,
            "heuristic_mean": heuristic_mean,
            "teacher": result["teacher"],
            **_shards_metadata(data),
            **lineage_metadata(context, {"teacher_trajectories": data}, config),
        },
    )


class SftDatasetConfig(dg.Config):
    teacher_shards: list[str] = []  # the shards to train on, merged in seed order; empty: every published shard
    filter: str = "none"  # none | beat_heuristic (keep episodes where the teacher beat the heuristic)
    # The filter's grader is fixed here, not the active grader: a grader switch must not change the
    # training data (that is why sft_dataset does not depend on reeval_report).
    filter_grader: str = DEFAULT_GRADER
    validation_fraction: float = 0.1
    split_seed: int = 0
    # chat_labeled (the recipe): the week as one conversation, every number after its meter's name;
    # chat: the same without names; table: one example per step. Recorded in the dataset and the
    # checkpoint, so GRPO and evaluation prompt the student the way it was trained.
    prompt_format: str = DEFAULT_PROMPT_FORMAT
    # evidence (the recipe): each answer states the increment a linear read-out, fitted on these
    # teacher records' own stated beliefs, gives this step's anomaly, and the running belief it sums
    # to (rhythm_core/teacher/evidence.py); none: belief and action only; full: the teacher's reasoning.
    reasoning: str = DEFAULT_REASONING
    # The evidence chain's form: linear (the demo's) or innovation (the increment also reads the
    # previous belief and the step; the long preset's, whose student learns it).
    readout_form: str = DEFAULT_READOUT_FORM
    push_to_hub: bool = False
    hub_repo_name: str = "rhythm-sft"


def _readout_metadata(fit: dict | None) -> dict:
    """The evidence read-out's fit: how close it stays to the teacher's own last belief on held-out
    (validation) weeks, per condition, next to a constant's; the whole fit as JSON."""
    if not fit:
        return {}
    metadata = {"evidence_readout_fit": dg.MetadataValue.json(fit),
                "evidence_readout_reliable": bool(fit.get("reliable"))}
    for condition, quality in fit.get("held_out", {}).items():
        metadata[f"readout_mae_vs_teacher_{condition}"] = float(quality["mae_vs_teacher"])
        metadata[f"constant_mae_vs_teacher_{condition}"] = float(quality["constant_mae_vs_teacher"])
    return metadata


@dg.asset(
    group_name="data",
    ins=SHARDS_IN,
    retry_policy=TRANSIENT_RETRY,
    code_version=code_version("sft-dataset", dataset_stage, config=SftDatasetConfig),
    kinds={"python", "huggingface"},
    description=(
        "A Hugging Face DatasetDict in the conversational format. prompt_format chat (default): one example "
        "per episode, the week as one conversation (a user turn per step with the newest observation row, the "
        "teacher's JSON answer after each); table: one example per step, the week so far rendered as a table. "
        "Train/validation split by episode, with the true belief and the env snapshot of each decision as "
        "columns for GRPO rewards. Saved with a dataset card stating its provenance; optionally pushed "
        "to the Hub (private by default) through the HubResource."
    ),
)
def sft_dataset(context: dg.AssetExecutionContext, config: SftDatasetConfig, teacher_trajectories: dict,
                hub: HubResource, artifacts: ArtifactStoreResource) -> dg.Output[dict]:
    with retried_only_if_transient():
        store = artifacts.store(context.instance)
        data = _teacher_data(context, store, teacher_trajectories, config.teacher_shards)
        result = dataset_stage(data, store.cache, filter=config.filter,
                               filter_grader=config.filter_grader, validation_fraction=config.validation_fraction,
                               split_seed=config.split_seed, prompt_format=config.prompt_format,
                               reasoning=config.reasoning, readout_form=config.readout_form)
        local_path = result["path"]
        result = store.publish_value(result)
    metadata = {
        "artifact_path": dg.MetadataValue.path(result["path"]),
        "examples_train": result["examples"]["train"],
        "examples_validation": result["examples"]["validation"],
        "episodes_train": result["episodes"]["train"],
        "episodes_validation": result["episodes"]["validation"],
        "filter": config.filter,
        "prompt_format": config.prompt_format,
        "reasoning": config.reasoning,
        **({"readout_form": result["provenance"]["readout_form"]} if "readout_form" in result["provenance"] else {}),
        **_readout_metadata(result["provenance"].get("evidence_readout_fit")),
        "content_hash": result["content_hash"],
        "teacher": result["provenance"]["teacher"]["id"],
        **_shards_metadata(data),
        **lineage_metadata(context, {"teacher_trajectories": data}, config),
    }
    if config.push_to_hub:
        from rhythm_core.data.hub import push_to_hub  # `datasets` loads only when a push is asked for

        with retried_only_if_transient():
            result["hub"], hub_metadata = hub.push(push_to_hub, local_path, config.hub_repo_name)
        metadata.update(hub_metadata)
    return versioned_output(result, metadata)
