"""The training half: sft_checkpoint and grpo_checkpoint. The ComputeResource runs the TRL training
(local subprocess through Pipes, or Hugging Face Jobs); these bodies only pass config and report."""

import dagster as dg

from rhythm_core.compute.costs import cost_figures
from rhythm_core.training.grpo import GRPORunConfig
from rhythm_core.training.publish import push_checkpoint, train_and_publish
from rhythm_core.training.sft import SFTRunConfig
from rhythm_pipeline.defs.executor import MODEL_STEP_TAGS
from rhythm_pipeline.defs.launchpad import launchpad_config, run_config_of
from rhythm_pipeline.defs.pools import GPU_POOL
from rhythm_pipeline.defs.resources import ArtifactStoreResource, ComputeResource, HubResource
from rhythm_pipeline.defs.retries import TRANSIENT_RETRY, retried_only_if_transient
from rhythm_pipeline.defs.tracking import TrackingResource
from rhythm_pipeline.lineage import lineage_metadata, png_metadata, versioned_output
from rhythm_pipeline.settings import code_version

_HUB = {"push_to_hub": (bool, False)}
SftCheckpointConfig = launchpad_config("SftCheckpointConfig", SFTRunConfig, module=__name__, **_HUB,
                                       hub_repo_name=(str, "rhythm-sft-student"))
# The reward grader is fixed in the config, not the active grader: a grader change must never
# re-run training.
_GRPO_RENAME = {"grader": "reward_grader"}
GrpoCheckpointConfig = launchpad_config("GrpoCheckpointConfig", GRPORunConfig, module=__name__, rename=_GRPO_RENAME,
                                        **_HUB,
                                        hub_repo_name=(str, "rhythm-grpo-student"))


def _train(context, compute: ComputeResource, store, stage: str, config: dict, dataset: dict, provenance: dict,
           init: dict | None = None, *, tracking: TrackingResource, upstream: dict) -> tuple[dict, dict, dict]:
    """Train and publish; the result (its paths in the store), the same with cache paths, and the
    tracking metadata. The inputs are fetched from the store and checked against what their
    materializations recorded first."""
    with retried_only_if_transient():
        dataset_dir = store.fetch_value(dataset)["path"]
        init_dir = store.fetch_value(init)["model_dir"] if init else None
        for value in upstream.values():
            store.fetch_value(value)
        with tracking.training_run(context, config, upstream) as tracked:  # one MLflow run, the subprocess logs into it
            local = train_and_publish(store.cache, stage, lambda staged: compute.train(
                context, stage=stage.split("_")[0], config=config, dataset_dir=dataset_dir, out_dir=str(staged),
                init_dir=init_dir, provenance=provenance, env=tracked.env))
            result = store.publish_value(local)
            tracked.finish_training(local, artifact_url=result["model_dir"])
    return {**result, "mlflow_run_id": tracked.run_id}, local, tracked.metadata()


def job_cost_metadata(job: dict) -> dict:
    """What a Hugging Face job could cost (its cap) and what it was billed."""
    cost = job.get("cost") or {}
    if not cost:
        return {}
    return {**cost_figures(job), "hf_job_flavor": cost["flavor"],
            "hf_job_price": f"${cost['usd_per_hour']:.2f}/h ({cost['price_source']})"}


def _compute_metadata(result: dict, compute: ComputeResource) -> dict:
    """Where the training ran; for Hugging Face Jobs, the job and the result repo revision."""
    job = result.get("hf_job")
    if not job:
        return {"compute": compute.kind}
    return {"compute": compute.kind, "hf_job_id": job["job_id"], "hf_job_url": job.get("job_url") or "",
            "hub_repo_id": job["hub_repo_id"], "hub_revision": job["hub_revision"], **job_cost_metadata(job),
            **({"hf_job_gpus": job["gpus"], "hf_job_processes": job["processes"]} if "gpus" in job else {})}


def _speedup_metadata(result: dict) -> dict:
    """The CPU speed-ups that rely on TRL's and transformers' internals: on, or off and why."""
    return {"speedups": dg.MetadataValue.json(result["speedups"])} if result.get("speedups") else {}


@dg.asset(
    group_name="training",
    op_tags=MODEL_STEP_TAGS,  # on Kubernetes: a GPU node (deploy/README.md)
    pool=GPU_POOL,
    retry_policy=TRANSIENT_RETRY,
    code_version=code_version("sft", "rhythm_core.training.sft", train_and_publish, config=SftCheckpointConfig),
    kinds={"pytorch", "huggingface"},
    description=(
        "The distilled student: TRL SFT on sft_dataset with the loss on the assistant turn only. The default "
        "base model `tiny` is built offline (tokenizer trained on the dataset, random-init Llama); any causal "
        "LM id or path trains with PEFT LoRA. Saved with a model card (base model, data version, config, "
        "final metrics); runs on the ComputeResource (local subprocess or Hugging Face Jobs)."
    ),
)
def sft_checkpoint(context: dg.AssetExecutionContext, config: SftCheckpointConfig, sft_dataset: dict,
                   compute: ComputeResource, hub: HubResource, tracking: TrackingResource,
                   artifacts: ArtifactStoreResource) -> dg.Output[dict]:
    store = artifacts.store(context.instance)
    run_config = run_config_of(config, SFTRunConfig)
    provenance = {"sft_dataset": store.name_of(sft_dataset["path"]), "sft_dataset_version": sft_dataset["version"],
                  "teacher": sft_dataset["provenance"]["teacher"]["id"]}
    result, local, tracked = _train(context, compute, store, "sft_checkpoint", run_config, sft_dataset, provenance,
                                    tracking=tracking, upstream={"sft_dataset": sft_dataset})
    metadata = {
        "artifact_path": dg.MetadataValue.path(result["model_dir"]),
        "training_loss": png_metadata(local["loss_plot"], "training loss"),
        "training_loss_png": dg.MetadataValue.path(result["loss_plot"]),
        "base_model": result["base_model"], "device": result["device"], "steps": result["steps"],
        "prompt_format": result["prompt_format"], "reasoning": result["reasoning"],
        "short_context_steps": result["short_context_steps"], "trainable_parameters": result["trainable_parameters"], "total_parameters": result["total_parameters"],
        "first_train_loss": result["first_train_loss"], "final_train_loss": result["final_train_loss"],
        "eval_loss": result["eval_loss"], "eval_mean_token_accuracy": result["eval_mean_token_accuracy"],
        "valid_answer_rate_before": result["valid_answer_rate_before"],
        "valid_answer_rate_after": result["valid_answer_rate_after"],
        # how long the examples may be, and how many conversations were cut to it (0: none)
        **{k: result[k] for k in ("max_length", "longest_conversation_tokens", "conversations_over_max_length")},
        "wall_s": result["wall_s"], "kept_published": result["kept_published"], **_compute_metadata(result, compute),
        "teacher": provenance["teacher"], **tracked,
        **_speedup_metadata(result),
        **lineage_metadata(context, {"sft_dataset": sft_dataset}, config),
    }
    if config.push_to_hub:
        with retried_only_if_transient():
            result["hub"], hub_metadata = hub.push(push_checkpoint, local["model_dir"], config.hub_repo_name)
        metadata.update(hub_metadata)
    return versioned_output(result, metadata)


def _validation_metadata(validation: dict | None) -> dict:
    """The gate's figures: both students on the held-out training weeks, and which is the headline."""
    if not validation:
        return {}
    return {"validation": dg.MetadataValue.json(validation),
            "validation_score_grpo": float(validation["score"]["student_grpo"]),
            "validation_score_sft": float(validation["score"]["student_sft"]),
            "validation_difference": float(validation["difference"]),
            "validation_difference_se": float(validation["difference_se"]),
            "headline_student": validation["better"]}


@dg.asset(
    group_name="training",
    op_tags=MODEL_STEP_TAGS,  # on Kubernetes: a GPU node (deploy/README.md)
    pool=GPU_POOL,
    retry_policy=TRANSIENT_RETRY,
    code_version=code_version("grpo", "rhythm_core.training.grpo", train_and_publish, config=GrpoCheckpointConfig),
    kinds={"pytorch", "huggingface"},
    description=(
        "The student refined with TRL GRPO from sft_checkpoint. Each prompt ends with the SFT student's own "
        "reasoning and belief for that state, so GRPO samples the action alone: the distilled inference is kept, "
        "the choice of action refined. Rewards come from the real env and grader: answer validity and the graded "
        "value of the answer (restore the prompt's env snapshot, let the frozen SFT student say the answer and play "
        "the rest of the week, against its week after its own answer); prompts are states visited by the teacher "
        "and by the SFT student. Gated against the SFT start on held-out training weeks."
    ),
)
def grpo_checkpoint(context: dg.AssetExecutionContext, config: GrpoCheckpointConfig, sft_checkpoint: dict,
                    sft_dataset: dict, compute: ComputeResource, hub: HubResource,
                    tracking: TrackingResource, artifacts: ArtifactStoreResource) -> dg.Output[dict]:
    store = artifacts.store(context.instance)
    run_config = run_config_of(config, GRPORunConfig, rename=_GRPO_RENAME)
    provenance = {"sft_checkpoint": store.name_of(sft_checkpoint["path"]), "sft_checkpoint_version": sft_checkpoint["version"],
                  "sft_dataset_version": sft_dataset["version"], "reward_grader": config.reward_grader}
    result, local, tracked = _train(context, compute, store, "grpo_checkpoint", run_config, sft_dataset, provenance,
                                    init=sft_checkpoint, tracking=tracking,
                                    upstream={"sft_checkpoint": sft_checkpoint, "sft_dataset": sft_dataset})
    metadata = {
        "artifact_path": dg.MetadataValue.path(result["model_dir"]),
        "reward_curves": png_metadata(local["reward_plot"], "GRPO reward curves"),
        "kl_curve": png_metadata(local["kl_plot"], "KL"),
        "steps": result["steps"], "prompts": result["prompts"], "student_prompts": result["student_prompts"],
        "first_reward": result["first_reward"], "final_reward": result["final_reward"],
        "action_only_prompts": result["action_only_prompts"],
        "final_answer_validity": result["final_answer_validity"], "final_action_value": result["final_action_value"],
        "final_kl": result["final_kl"], "mean_reward_std_within_groups": result["mean_reward_std_within_groups"],
        **{key: result[key] for key in ("mean_frac_groups_zero_reward_std", "mean_kl", "mean_answer_validity",
                                        "mean_action_value") if result.get(key) is not None},
        **_validation_metadata(result.get("validation")),
        "device": result["device"], "wall_s": result["wall_s"], "kept_published": result["kept_published"],
        "reward_grader": config.reward_grader,
        **_speedup_metadata(result),
        "base_model": sft_checkpoint.get("base_model"), **_compute_metadata(result, compute), **tracked,
        **lineage_metadata(context, {"sft_checkpoint": sft_checkpoint, "sft_dataset": sft_dataset}, config),
    }
    if config.push_to_hub:
        with retried_only_if_transient():
            result["hub"], hub_metadata = hub.push(push_checkpoint, local["model_dir"], config.hub_repo_name)
        metadata.update(hub_metadata)
    return versioned_output(result, metadata)



