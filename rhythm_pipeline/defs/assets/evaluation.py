"""Evaluation: eval_rollouts (students and baselines play held-out seeds; no grader involved) and
eval_results (graded under the active grader and v2, with plots)."""

import base64
import time
from pathlib import Path

import dagster as dg

from rhythm_core.eval_results import append_history, eval_results_stage, history_markdown
from rhythm_core.eval_rollouts import DEFAULT_EVAL_SEEDS, EVAL_BASELINES, eval_rollouts_stage
from rhythm_core.training.generation import SamplingConfig
from rhythm_pipeline.lineage import lineage_metadata
from rhythm_pipeline.settings import ACTIVE_GRADER, GRADING_AUTOMATION, GRADING_TAGS, artifact_root


class EvalRolloutsConfig(dg.Config):
    continuous_seeds: str = DEFAULT_EVAL_SEEDS["continuous"]
    ood_seeds: str = DEFAULT_EVAL_SEEDS["ood"]
    discrete3_seeds: str = DEFAULT_EVAL_SEEDS["discrete3"]  # 5 episodes per legacy profile
    max_new_tokens: int | None = None  # None: 1.5x the longest teacher answer the checkpoint was trained on
    temperature: float = 0.0  # greedy
    top_p: float = 1.0
    sampling_seed: int = 0
    baselines: list[str] = list(EVAL_BASELINES)


def _image(path: str, alt: str) -> dg.MetadataValue:
    return dg.MetadataValue.md(f"![{alt}](data:image/png;base64,{base64.b64encode(Path(path).read_bytes()).decode()})")


@dg.asset(
    group_name="evaluation",
    code_version="eval-rollouts-1",
    kinds={"python", "jsonl"},
    description=(
        "The GRPO and SFT students and the baselines (random, heuristic, constant belief, Bayesian teacher, "
        "oracle) play the evaluation seeds of the three conditions. Students generate in lockstep: one batched "
        "generate per step for all episodes. Stores full trajectories and nothing grader-dependent, so a "
        "grader change re-grades without running any model."
    ),
)
def eval_rollouts(context: dg.AssetExecutionContext, config: EvalRolloutsConfig, grpo_checkpoint: dict,
                  sft_checkpoint: dict) -> dg.Output[dict]:
    seeds = {"continuous": config.continuous_seeds, "ood": config.ood_seeds, "discrete3": config.discrete3_seeds}
    sampling = SamplingConfig(max_new_tokens=config.max_new_tokens, temperature=config.temperature,
                              top_p=config.top_p, seed=config.sampling_seed)
    provenance = {"grpo_checkpoint_version": grpo_checkpoint["version"], "sft_checkpoint_version": sft_checkpoint["version"],
                  "base_model": sft_checkpoint.get("base_model"), "sft_checkpoint": sft_checkpoint["model_dir"],
                  "grpo_checkpoint": grpo_checkpoint["model_dir"], "seeds": seeds}
    result = eval_rollouts_stage(
        {"student_grpo": grpo_checkpoint["model_dir"], "student_sft": sft_checkpoint["model_dir"]}, seeds,
        artifact_root(context), sampling=sampling, baselines=config.baselines, provenance=provenance,
        log=context.log.info,
    )
    files = result["manifest"]["files"]
    return dg.Output(result, data_version=dg.DataVersion(result["version"]), metadata={
        "artifact_path": dg.MetadataValue.path(result["dir"]),
        "episodes": sum(f["episodes"] for f in files.values()),
        **{f"invalid_rate_{f['player']}_{f['condition']}": f["invalid_rate"] for f in files.values()
           if f["player"].startswith("student")},
        "seeds": dg.MetadataValue.json(seeds), "sampling": dg.MetadataValue.json(sampling.__dict__),
        "base_model": sft_checkpoint.get("base_model"),
        **lineage_metadata(context, {"grpo_checkpoint": grpo_checkpoint, "sft_checkpoint": sft_checkpoint}, config),
    })


@dg.asset(
    group_name="evaluation",
    code_version=f"eval-results-1|grader={ACTIVE_GRADER}",
    tags=GRADING_TAGS,
    automation_condition=GRADING_AUTOMATION,
    kinds={"python"},
    description=(
        "Every stored evaluation trajectory graded under the active grader and under v2: per condition and "
        "agent the final score with its 95% CI, components, belief MAE, head-to-head wins vs the heuristic, "
        "invalid-answer rate and action distribution. eval_results.json has the published shape; "
        "final_scores.png and belief_accuracy.png are attached, and a history table accumulates every "
        "evaluation (scheduled re-evaluations on fresh seed windows show drift and variance over time)."
    ),
)
def eval_results(context: dg.AssetExecutionContext, eval_rollouts: dict) -> dg.Output[dict]:
    root = artifact_root(context)
    result = eval_results_stage(eval_rollouts["dir"], ACTIVE_GRADER, root,
                                provenance={"eval_rollouts_version": eval_rollouts["version"]})
    history = append_history(root / "eval_results" / "history.parquet", result["results"], run_id=context.run_id,
                             timestamp=time.time(), rollouts_version=eval_rollouts["version"])
    scores = {f"{c}/{a}": m["final_score"] for c, block in result["results"]["conditions"].items()
              for a, m in block["agents"].items()}
    slim = {k: v for k, v in result.items() if k != "results"}
    return dg.Output(slim, data_version=dg.DataVersion(result["version"]), metadata={
        "results": dg.MetadataValue.md(result["markdown"]),
        "final_scores": _image(result["final_scores_png"], "final scores"),
        "belief_accuracy": _image(result["belief_accuracy_png"], "belief accuracy"),
        "artifact_path": dg.MetadataValue.path(result["json"]),
        "grader": ACTIVE_GRADER,
        "scores": dg.MetadataValue.json(scores),
        "history": dg.MetadataValue.md(history_markdown(history)),
        "history_path": dg.MetadataValue.path(str(root / "eval_results" / "history.parquet")),
        "history_rows": history.height,
        "seeds": dg.MetadataValue.json(result["results"]["provenance"].get("seeds", {})),
        "base_model": result["results"]["provenance"].get("base_model"),
        **lineage_metadata(context, {"eval_rollouts": eval_rollouts}),
    })
