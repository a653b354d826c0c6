"""Jobs: the whole lineage (what `make demo` runs) and the data half alone."""

import dagster as dg

rhythm_lineage = dg.define_asset_job("rhythm_lineage", selection=dg.AssetSelection.all(),
                                     description="Materialize the whole lineage.")
data_half = dg.define_asset_job("data_half", selection=dg.AssetSelection.groups("data"),
                                description="teacher_trajectories -> reeval_report -> sft_dataset")
