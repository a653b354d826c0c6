"""Jobs: the whole lineage (what `make demo` runs), the data half alone, and the longer training
preset (3,000 teacher weeks; the same config as `rhythm distill --preset long`)."""

import dagster as dg

from rhythm_core.distill import PRESETS

rhythm_lineage = dg.define_asset_job("rhythm_lineage", selection=dg.AssetSelection.all(),
                                     description="Materialize the whole lineage with the asset defaults.")
data_half = dg.define_asset_job("data_half", selection=dg.AssetSelection.groups("data"),
                                description="teacher_trajectories -> reeval_report -> sft_dataset")

_LONG = PRESETS["long"]
rhythm_lineage_long = dg.define_asset_job(
    "rhythm_lineage_long",
    selection=dg.AssetSelection.all(),
    description="The recipe at a larger budget: 3,000 Bayesian-teacher weeks, 1,000 short-context + 1,200 "
                "whole-week SFT steps, 50 GRPO steps (rhythm distill --preset long).",
    config={"ops": {
        "teacher_trajectories": {"config": {"seeds": _LONG["teacher_seeds"]}},
        "sft_dataset": {"config": _LONG["dataset"]},
        "sft_checkpoint": {"config": _LONG["sft"]},
        "grpo_checkpoint": {"config": _LONG["grpo"]},
    }},
)

# Re-grade from stored trajectories after a grader change: every asset tagged as grading, and only
# those. No teacher call, no training, no model run.
regrade = dg.define_asset_job("regrade", selection=dg.AssetSelection.tag("rhythm/grades", "true"),
                              description="Re-materialize the grading assets from stored trajectories.")
# A re-evaluation of the latest checkpoints: new rollouts, then their grades.
reevaluate = dg.define_asset_job("reevaluate", selection=dg.AssetSelection.assets("eval_rollouts").downstream(),
                                 description="Play the latest checkpoints on a window of evaluation seeds and grade.")
