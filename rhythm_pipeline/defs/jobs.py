"""Jobs: the lineage in the pieces a run can hold (a run has one partition), and the presets.

- `teacher_data`: one teacher shard (`teacher_shards` partition); a backfill of N shards is N runs.
- `data_half`: a teacher shard, then the re-grade report and the dataset over every published shard.
- `training`: the report, the dataset, SFT and GRPO over the published shards (unpartitioned).
- `reevaluate`: one evaluation window (`eval_windows` partition): the students play it, it is graded, and
  the headline student is registered from it; the weekly schedule runs it, a backfill evaluates many.
- `regrade`: the grading assets, from stored trajectories, for a window (no teacher call, no model run).
- `rhythm_lineage_long`, `rhythm_lineage_published`: `training` with a preset's config (its teacher shards
  are added and played first, docs/operations.md); `published_teacher` and `published_evaluation` are the
  published recipe's teacher shard and evaluation windows.

The whole lineage at once is an asset backfill over the three partitionings (the UI's "Materialize all",
`make demo`, `python -m rhythm_pipeline.ops lineage`)."""

import dagster as dg

from rhythm_core.distill import PRESETS
from rhythm_pipeline.defs.partitions import EVAL_WINDOWS, TEACHER_SHARDS

TRAINING = ["reeval_report", "sft_dataset", "sft_checkpoint", "grpo_checkpoint"]

teacher_data = dg.define_asset_job("teacher_data", selection=["teacher_trajectories"], partitions_def=TEACHER_SHARDS,
                                   description="Play and publish one teacher shard (a range of training seeds).")
data_half = dg.define_asset_job("data_half", selection=dg.AssetSelection.groups("data"), partitions_def=TEACHER_SHARDS,
                                description="A teacher shard -> reeval_report -> sft_dataset over every published shard")
training = dg.define_asset_job("training", selection=TRAINING,
                               description="reeval_report, sft_dataset, sft_checkpoint, grpo_checkpoint over the "
                                           "published teacher shards.")


def preset_ops(name: str) -> dict:
    """The ops config of a `rhythm distill` preset's training (rhythm_core.distill.PRESETS)."""
    preset = PRESETS[name]
    return {"sft_dataset": {"config": preset["dataset"]}, "sft_checkpoint": {"config": preset["sft"]},
            "grpo_checkpoint": {"config": preset["grpo"]}}


def preset_config(name: str) -> dict:
    """The run config of a `rhythm distill` preset's training."""
    return {"ops": preset_ops(name)}


rhythm_lineage_long = dg.define_asset_job(
    "rhythm_lineage_long",
    selection=TRAINING,
    description="The recipe at a larger budget on the shards 1000-2999 and 3000-3999 (3,000 search-teacher weeks): "
                "the innovation evidence chain, 1,000 short-context + 1,200 whole-week SFT steps, 50 GRPO steps "
                "(rhythm distill --preset long).",
    config=preset_config("long"),
)

# The published recipe at real scale: the 3B student with LoRA trained on Hugging Face Jobs from an API
# teacher's shard (1000-1299, played by `teacher_data` with the teacher config below). Needs OPENAI_API_KEY
# and HF_TOKEN (RHYTHM_HUB_NAMESPACE names the owner of the jobs and repos); every job states its cost cap
# before it is submitted and is refused above hf_max_usd. README, "The real base model", gives the cost.
PUBLISHED_TEACHER = {"backend": "openai", "model": "gpt-5.4", "reasoning_effort": "low",
                     "api_key": {"env": "OPENAI_API_KEY"}, "price_input_per_m": 2.5,
                     "price_cached_input_per_m": 0.25, "price_output_per_m": 15.0, "max_cost_usd": 40.0}
PUBLISHED_COMPUTE = {"backend": "hf_jobs", "hf_flavor": "a10g-large", "hf_max_usd": 5.0, "hf_token": {"env": "HF_TOKEN"}}
PUBLISHED_CONFIG = {"ops": {**preset_ops("published"), "sft_dataset": {"config": {"teacher_shards": ["1000-1299"]}}},
                    "resources": {"compute": {"config": PUBLISHED_COMPUTE}}}
published_teacher = dg.define_asset_job(
    "published_teacher", selection=["teacher_trajectories"], partitions_def=TEACHER_SHARDS,
    description="The published recipe's teacher: gpt-5.4 (OpenAI API) plays a shard (1000-1299) under a $40 cap.",
    config={"resources": {"teacher": {"config": PUBLISHED_TEACHER}}})
rhythm_lineage_published = dg.define_asset_job(
    "rhythm_lineage_published",
    selection=TRAINING,
    description="The published recipe's training: Qwen2.5-3B-Instruct with LoRA (SFT, GRPO) on Hugging Face Jobs "
                "(a10g-large, each job under a $5 cap), on the shard 1000-1299 of gpt-5.4 (OpenAI API).",
    config=PUBLISHED_CONFIG,
)
published_evaluation = dg.define_asset_job(
    "published_evaluation", selection=["eval_rollouts", "eval_results", "registered_student"],
    partitions_def=EVAL_WINDOWS, description="The published recipe's students play a window on Hugging Face Jobs.",
    config={"resources": {"compute": {"config": PUBLISHED_COMPUTE}}})

# Every window a partition: the weekly schedule evaluates the next one; a backfill evaluates any.
reevaluate = dg.define_asset_job("reevaluate", selection=["eval_rollouts", "eval_results", "registered_student"],
                                 partitions_def=EVAL_WINDOWS,
                                 description="Play the latest checkpoints on one evaluation window, grade, register.")
# Re-grade from stored trajectories after a grader change: every asset tagged as grading, and only those.
regrade = dg.define_asset_job("regrade", selection=dg.AssetSelection.tag("rhythm/grades", "true"),
                              partitions_def=EVAL_WINDOWS,
                              description="Re-materialize the grading assets of a window from stored trajectories.")
