"""Jobs: the whole lineage (what `make demo` runs), the data half alone, and the longer training
preset (2,000 teacher episodes; the same config as `rhythm distill --preset long`)."""

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
    description="The longer training preset: 2,000 Bayesian-teacher episodes, 3,000 SFT steps, 100 GRPO steps.",
    config={"ops": {
        "teacher_trajectories": {"config": {"seeds": _LONG["teacher_seeds"]}},
        "sft_checkpoint": {"config": _LONG["sft"]},
        "grpo_checkpoint": {"config": _LONG["grpo"]},
    }},
)
