"""Evaluation: eval_rollouts (students and baselines play held-out seeds; no grader involved) and
eval_results (graded under the active grader and v2, with plots)."""

import time

import dagster as dg

from rhythm_core.evaluation.results import (
    eval_results_stage,
    evaluation_rows,
    history_markdown,
    history_rows,
    plotted_figures,
)
from rhythm_core.evaluation.rollouts import (
    EVAL_BASELINES,
    eval_seed_list,
    evaluation_window,
    play_condition,
    publish_rollouts,
    teacher_player,
)
from rhythm_core.evaluation.steps import localized_plan, rollouts_provenance, run_staging_dir
from rhythm_core.evaluation.teacher_play import TEACHER_PLAYER, teacher_identity
from rhythm_core.evaluation.teacher_play import play_teacher as play_teacher_on_eval_seeds
from rhythm_core.store import StageIncomplete
from rhythm_core.training.generation import SamplingConfig
from rhythm_env.sim.conditions import CONDITIONS, parse_seeds
from rhythm_pipeline.defs.assets.history import EVALUATION_ROWS, evaluation_history
from rhythm_pipeline.defs.executor import MODEL_STEP_TAGS, PARALLEL_TORCH_TAGS, step_thread_budget
from rhythm_pipeline.defs.partitions import EVAL_WINDOWS
from rhythm_pipeline.defs.pools import GPU_POOL, TEACHER_POOL
from rhythm_pipeline.defs.resources import ArtifactStoreResource, ComputeResource, TeacherResource
from rhythm_pipeline.defs.retries import TRANSIENT_RETRY, retried_only_if_transient
from rhythm_pipeline.defs.tracking import TrackingResource
from rhythm_pipeline.lineage import lineage_metadata, png_metadata, versioned_output
from rhythm_pipeline.settings import ACTIVE_GRADER, GRADING_AUTOMATION, GRADING_TAGS, code_version


class EvalRolloutsConfig(dg.Config):
    # Each condition's seeds are the partition's window (evaluation_window); a value here plays a subset of it.
    continuous_seeds: str | None = None
    ood_seeds: str | None = None
    discrete3_seeds: str | None = None
    max_new_tokens: int | None = None  # None: 1.5x the longest teacher answer the checkpoint was trained on
    temperature: float = 0.0  # greedy
    top_p: float = 1.0
    sampling_seed: int = 0
    baselines: list[str] = list(EVAL_BASELINES)
    # Also play the configured teacher resource on these seeds (agent "teacher" in eval_results;
    # resumable, exactly once, under the resource's cost guard; never training data). Off by default:
    # with a paid teacher it costs money.
    include_teacher: bool = False


def window_seeds(window: str, config: EvalRolloutsConfig) -> dict[str, str]:
    """Each condition's seeds for evaluation window `window`: the window's, or the subset of them the config names."""
    seeds = evaluation_window(int(window))
    for condition, spec in seeds.items():
        chosen = getattr(config, f"{condition}_seeds")
        if chosen is None:
            continue
        outside = sorted(set(eval_seed_list(condition, chosen)) - set(parse_seeds(spec)))
        if outside:
            raise dg.Failure(f"{condition}_seeds {chosen!r}: seed {outside[0]} is not in evaluation window {window} "
                             f"({condition} {spec}); evaluate another window as its own partition",
                             allow_retries=False)
        seeds[condition] = chosen
    return seeds


@dg.op(out=dg.Out(dict), retry_policy=TRANSIENT_RETRY,
       description="Check the window's seeds and prepare a staging folder for the rollouts.")
@retried_only_if_transient()
def plan_eval_rollouts(context: dg.OpExecutionContext, config: EvalRolloutsConfig, grpo_checkpoint: dict,
                       sft_checkpoint: dict, artifacts: ArtifactStoreResource) -> dict:
    seeds = window_seeds(context.partition_key, config)
    sampling = SamplingConfig(max_new_tokens=config.max_new_tokens, temperature=config.temperature,
                              top_p=config.top_p, seed=config.sampling_seed)
    store = artifacts.store(context.instance)
    for checkpoint in (grpo_checkpoint, sft_checkpoint):  # the students as their materializations recorded them
        store.fetch_value(checkpoint)
    staged = run_staging_dir(store, context.run.run_id, lambda run_id: _run_is_live(context.instance, run_id))
    # In the store's terms (URLs where it is an object store): each later step maps it to its own cache.
    return store.to_store({
        "root": str(store.cache), "staged": str(staged), "seeds": seeds, "window": context.partition_key,
        "sampling": sampling.__dict__, "baselines": list(config.baselines), "config": config.model_dump(),
        "include_teacher": config.include_teacher,
        "checkpoints": {"student_grpo": grpo_checkpoint["model_dir"], "student_sft": sft_checkpoint["model_dir"]},
        "upstream": {"grpo_checkpoint": grpo_checkpoint, "sft_checkpoint": sft_checkpoint},
    })


def _run_is_live(instance: dg.DagsterInstance, run_id: str) -> bool:
    run = instance.get_run_by_id(run_id)
    return run is not None and not run.is_finished


def _play_op(condition: str):
    @dg.op(name=f"play_{condition}", out=dg.Out(dict), tags={**PARALLEL_TORCH_TAGS, **MODEL_STEP_TAGS}, pool=GPU_POOL,
           retry_policy=TRANSIENT_RETRY,
           description=f"Every player on the {condition} evaluation seeds: the students where the compute resource "
                       "runs models (a local subprocess or a Hugging Face job), then the reference agents here "
                       "(no model). Its own process under the multiprocess executor, sized to its share of the cores.")
    @retried_only_if_transient()
    def play(context: dg.OpExecutionContext, plan: dict, compute: ComputeResource,
             artifacts: ArtifactStoreResource) -> dg.Output[dict]:
        store = artifacts.store(context.instance)
        threads = step_thread_budget(context, parallel_steps=len(CONDITIONS))
        context.log.info(f"play_{condition}: {threads} torch thread(s), students on compute {compute.kind}")
        started = time.perf_counter()
        config = {"condition": condition, "seeds": plan["seeds"][condition], "sampling": plan["sampling"]}
        plan = localized_plan(store, plan)
        config["recorded_as"] = plan["recorded_as"]  # each student as the store names it, whatever cache played it
        students = compute.play(context, config=config, checkpoints=plan["checkpoints"], out_dir=plan["staged"],
                                threads=threads)
        context.log.info(f"play_{condition}: students played in {time.perf_counter() - started:.1f} s")
        baselines = play_condition({}, condition, plan["seeds"][condition], plan["staged"],
                                   sampling=SamplingConfig(**plan["sampling"]), baselines=plan["baselines"],
                                   log=context.log.info)
        files = {**students["files"], **baselines}
        store.put_files(plan["staged"], files)  # for the publishing step, which may run elsewhere
        # An Output, not a plain value: a Pipes session in the step makes Dagster expect typed events.
        return dg.Output({"files": files, "hf_job": students["hf_job"]})

    return play


PLAY_OPS = {condition: _play_op(condition) for condition in CONDITIONS}


@dg.op(out=dg.Out(dict), pool=TEACHER_POOL, retry_policy=TRANSIENT_RETRY, description=(
    "With include_teacher: the teacher resource on the evaluation seeds of every condition (resumable, "
    "exactly once, one cost guard for all conditions); otherwise nothing."))
@retried_only_if_transient()
def play_teacher(context: dg.OpExecutionContext, plan: dict, teacher: TeacherResource,
                 artifacts: ArtifactStoreResource) -> dict:
    if not plan.get("include_teacher"):
        return {}
    store = artifacts.store(context.instance)
    plan = localized_plan(store, plan, students=False)
    settings = teacher.settings()
    try:
        files = play_teacher_on_eval_seeds(settings, plan["seeds"], plan["staged"], plan["root"], log=context.log.info)
    except StageIncomplete as exc:
        raise dg.Failure(description=str(exc), metadata=exc.details) from exc
    store.put_files(plan["staged"], files)
    return {"files": files, "identity": teacher_identity(settings)}


@dg.op(out=dg.Out(dict), retry_policy=TRANSIENT_RETRY,
       description="Write the manifest and publish the rollouts under their content hash.")
@retried_only_if_transient()
def publish_eval_rollouts(context: dg.OpExecutionContext, plan: dict, continuous: dict, ood: dict,
                          discrete3: dict, teacher_play: dict, artifacts: ArtifactStoreResource) -> dg.Output[dict]:
    store = artifacts.store(context.instance)
    upstream = plan["upstream"]
    sft, grpo = upstream["sft_checkpoint"], upstream["grpo_checkpoint"]
    plan = localized_plan(store, plan, students=False)
    files = {**continuous["files"], **ood["files"], **discrete3["files"], **teacher_play.get("files", {})}
    store.get_files(plan["staged"], files)  # what the play steps shared, each file checked
    provenance = rollouts_provenance(store, sft, grpo, plan["seeds"], teacher_player(store.fetch_value(sft)["model_dir"]))
    result = publish_rollouts(plan["staged"], store.cache, checkpoints=plan["recorded_as"], seeds=plan["seeds"],
                              sampling=SamplingConfig(**plan["sampling"]), baselines=plan["baselines"],
                              files=files, provenance=provenance,
                              extra_players={TEACHER_PLAYER: teacher_play["identity"]} if teacher_play else None)
    store.remove_shared(plan["staged"])
    result = store.publish_value(result)
    result["hf_jobs"] = [p["hf_job"] for p in (continuous, ood, discrete3) if p.get("hf_job")]
    files = result["manifest"]["files"]
    teacher_files = [f for f in files.values() if f["player"] == TEACHER_PLAYER]
    return versioned_output(result, {
        "artifact_path": dg.MetadataValue.path(result["dir"]),
        "episodes": sum(f["episodes"] for f in files.values()),
        **{f"invalid_rate_{f['player']}_{f['condition']}": f["invalid_rate"] for f in files.values()
           if f["player"] in plan["checkpoints"]},  # the students
        "seeds": dg.MetadataValue.json(plan["seeds"]), "sampling": dg.MetadataValue.json(plan["sampling"]),
        "base_model": sft.get("base_model"),
        **({"teacher": teacher_play["identity"]["id"],
            "teacher_cost_usd": round(sum(f["cost_usd"] for f in teacher_files), 6),
            **{f"invalid_rate_teacher_{f['condition']}": f["invalid_rate"] for f in teacher_files}}
           if teacher_play else {}),
        **_jobs_metadata([continuous, ood, discrete3]),
        **lineage_metadata(context, upstream, plan["config"], code_version=EVAL_ROLLOUTS_CODE_VERSION),
    })


def _jobs_metadata(played: list[dict]) -> dict:
    """The Hugging Face jobs the students played in: their ids and, summed, their cost caps and bills."""
    from rhythm_core.compute.costs import cost_figures, total_cost

    jobs = [p["hf_job"] for p in played if p.get("hf_job")]
    if not jobs:
        return {}
    return {"hf_job_ids": dg.MetadataValue.json([j["job_id"] for j in jobs]), **cost_figures({"cost": total_cost(jobs)})}


EVAL_ROLLOUTS_CODE_VERSION = code_version("eval-rollouts", "rhythm_core.evaluation.entry", play_condition, publish_rollouts,
                                          play_teacher_on_eval_seeds, config=EvalRolloutsConfig)


def _eval_config(config: dict) -> dict:
    # The asset's config (EvalRolloutsConfig's schema, defaults filled in) goes to the planning step.
    return {"plan_eval_rollouts": {"config": dict(config)}}


@dg.graph_asset(
    group_name="evaluation",
    partitions_def=EVAL_WINDOWS,
    code_version=EVAL_ROLLOUTS_CODE_VERSION,
    kinds={"python", "jsonl"},
    config=dg.ConfigMapping(config_fn=_eval_config, config_schema=EvalRolloutsConfig.to_config_schema()),
    description=(
        "The GRPO and SFT students and the baselines (random, heuristic, constant belief, Bayesian teacher, "
        "oracle) play one evaluation window (the partition) of the three conditions, one step per condition so the multiprocess "
        "executor runs them in parallel; with include_teacher, the teacher resource plays them too (agent "
        "'teacher'). Students generate in lockstep: one batched generate per step for all "
        "episodes. Stores full trajectories and nothing grader-dependent, so a grader change re-grades "
        "without running any model."
    ),
)
def eval_rollouts(grpo_checkpoint: dict, sft_checkpoint: dict):
    plan = plan_eval_rollouts(grpo_checkpoint, sft_checkpoint)
    played = {condition: op(plan) for condition, op in PLAY_OPS.items()}
    return publish_eval_rollouts(plan, teacher_play=play_teacher(plan), **played)


@dg.asset(
    group_name="evaluation",
    partitions_def=EVAL_WINDOWS,
    retry_policy=TRANSIENT_RETRY,
    code_version=code_version("eval-results", eval_results_stage, history_rows, grader=ACTIVE_GRADER),
    tags=GRADING_TAGS,
    automation_condition=GRADING_AUTOMATION,
    kinds={"python"},
    description=(
        "Every stored evaluation trajectory of one window graded under the active grader and under v2: per "
        "condition and agent the final score with its 95% CI, components, belief MAE, head-to-head wins vs the "
        "heuristic, invalid-answer rate and action distribution. eval_results.json has the published shape; "
        "final_scores.png and belief_accuracy.png are attached, and a history table shows every evaluation of "
        "every window in time order (read from this asset's materializations)."
    ),
)
def eval_results(context: dg.AssetExecutionContext, eval_rollouts: dict, tracking: TrackingResource,
                 artifacts: ArtifactStoreResource) -> dg.Output[dict]:
    with retried_only_if_transient():
        store = artifacts.store(context.instance)
        local = eval_results_stage(store.fetch_value(eval_rollouts)["dir"], ACTIVE_GRADER, store.cache,
                                   provenance={"eval_rollouts_version": eval_rollouts["version"],
                                               "window": context.partition_key},
                                   files_digest_recorded=eval_rollouts.get("files_digest"))
        result = store.publish_value(local)
    rows = evaluation_rows(result["results"], window=context.partition_key, rollouts_version=eval_rollouts["version"])
    history = evaluation_history(context.instance, context.asset_key, current=(context.run.run_id, time.time(), rows))
    scores = {f"{c}/{a}": m["final_score"] for c, block in result["results"]["conditions"].items()
              for a, m in block["agents"].items()}
    # One number per key, so the asset's Plots view charts each across materializations (drift between
    # weekly re-evaluations without opening a file): the students' figures, labelled so that each
    # student's score and recovery per condition come first; every agent's score is in `scores`.
    plotted = plotted_figures(result["results"])
    tracked = tracking.log_evaluation(context, local, eval_rollouts)  # an MLflow run linked to the students' runs
    slim = {**{k: v for k, v in result.items() if k != "results"}, "mlflow_run_id": tracked.run_id,
            "window": context.partition_key}
    return versioned_output(slim, {
        "results": dg.MetadataValue.md(result["markdown"]),
        "final_scores": png_metadata(local["final_scores_png"], "final scores"),
        "belief_accuracy": png_metadata(local["belief_accuracy_png"], "belief accuracy"),
        "artifact_path": dg.MetadataValue.path(result["json"]),
        "grader": ACTIVE_GRADER,
        "window": context.partition_key,
        "scores": dg.MetadataValue.json(scores),
        EVALUATION_ROWS: dg.MetadataValue.json(rows),
        "history": dg.MetadataValue.md(history_markdown(history)),
        "history_rows": history.height,
        "seeds": dg.MetadataValue.json(result["results"]["provenance"].get("seeds", {})),
        "base_model": result["results"]["provenance"].get("base_model"),
        "headline_student": result["results"]["provenance"].get("headline_student", "student_grpo"),
        **{key: dg.MetadataValue.float(value) for key, value in plotted.items()}, **tracked.metadata(),
        **lineage_metadata(context, {"eval_rollouts": eval_rollouts}),
    })
