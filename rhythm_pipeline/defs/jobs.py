"""Jobs: the whole lineage (what `make demo` runs), the data half alone, the longer training preset
(3,000 search-teacher weeks; the same config as `rhythm distill --preset long`), the published recipe at real
scale, and the regrade and re-evaluation jobs."""

import dagster as dg

from rhythm_core.distill import PRESETS

rhythm_lineage = dg.define_asset_job("rhythm_lineage", selection=dg.AssetSelection.all(),
                                     description="Materialize the whole lineage with the asset defaults.")
data_half = dg.define_asset_job("data_half", selection=dg.AssetSelection.groups("data"),
                                description="teacher_trajectories -> reeval_report -> sft_dataset")


def preset_ops(name: str) -> dict:
    """The ops config of a `rhythm distill` preset (rhythm_core.distill.PRESETS)."""
    preset = PRESETS[name]
    return {"teacher_trajectories": {"config": {"seeds": preset["teacher_seeds"]}},
            "sft_dataset": {"config": preset["dataset"]}, "sft_checkpoint": {"config": preset["sft"]},
            "grpo_checkpoint": {"config": preset["grpo"]}}


def preset_config(name: str) -> dict:
    """The run config of a `rhythm distill` preset: its ops config and the offline teacher it distils."""
    return {"ops": preset_ops(name), "resources": {"teacher": {"config": {"backend": PRESETS[name]["teacher"]}}}}


rhythm_lineage_long = dg.define_asset_job(
    "rhythm_lineage_long",
    selection=dg.AssetSelection.all(),
    description="The recipe at a larger budget: 3,000 search-teacher weeks written with the innovation evidence "
                "chain, 1,000 short-context + 1,200 whole-week SFT steps, 50 GRPO steps (rhythm distill --preset long).",
    config=preset_config("long"),
)

# The published recipe at real scale: an API teacher, the 3B student with LoRA trained and evaluated
# on Hugging Face Jobs. Needs OPENAI_API_KEY and HF_TOKEN (RHYTHM_HUB_NAMESPACE names the owner of the
# job and its repos); every job states its cost cap before it is submitted and is refused above
# hf_max_usd. README, "The real base model", gives the cost per stage.
PUBLISHED_CONFIG = {
    "ops": preset_ops("published"),
    "resources": {
        "teacher": {"config": {"backend": "openai", "model": "gpt-5.4", "reasoning_effort": "low",
                               "api_key": {"env": "OPENAI_API_KEY"}, "price_input_per_m": 2.5,
                               "price_cached_input_per_m": 0.25, "price_output_per_m": 15.0, "max_cost_usd": 40.0}},
        "compute": {"config": {"backend": "hf_jobs", "hf_flavor": "a10g-large", "hf_max_usd": 5.0,
                               "hf_token": {"env": "HF_TOKEN"}}},
    },
}
rhythm_lineage_published = dg.define_asset_job(
    "rhythm_lineage_published",
    selection=dg.AssetSelection.all(),
    description="The published recipe: 300 weeks of gpt-5.4 (OpenAI API), Qwen2.5-3B-Instruct with LoRA trained "
                "(SFT, GRPO) and evaluated on Hugging Face Jobs (a10g-large), each job under a $5 cap.",
    config=PUBLISHED_CONFIG,
)

# Re-grade from stored trajectories after a grader change: every asset tagged as grading, and only
# those. No teacher call, no training, no model run.
regrade = dg.define_asset_job("regrade", selection=dg.AssetSelection.tag("rhythm/grades", "true"),
                              description="Re-materialize the grading assets from stored trajectories.")
# A re-evaluation of the latest checkpoints: new rollouts, then their grades.
reevaluate = dg.define_asset_job("reevaluate", selection=dg.AssetSelection.assets("eval_rollouts").downstream(),
                                 description="Play the latest checkpoints on a window of evaluation seeds and grade.")
