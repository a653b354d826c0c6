"""Experiment tracking and the model registry with MLflow (no Dagster here).

    store     `Tracker`: one MLflow store (a local SQLite file by default, any server by URI) behind
              calls that never raise: a tracking failure is a warning, never a failed training run
    callback  transformers' MLflow integration as `report_to="mlflow"` selects it, logging every
              training step into the run its owner opened (MLFLOW_RUN_ID), across SFT's two phases
    registry  which evaluated student is registered, and the promotion rule for alias `champion`
    ui_link   the link `make mlflow` prints: the rhythm experiment's runs, its id read from the store

Who opens a run owns it: the Dagster assets open one per materialization and hand its id to the
training subprocess through the environment (`Tracker.subprocess_env`). Outside Dagster (`rhythm
distill`, a bare `run_sft` / `run_grpo`) a stage logs into a run only where its caller opened one and
set MLFLOW_RUN_ID; with none to log into it trains untracked.

The bottom floor: no module here imports another rhythm_core package, so `training` may import
`store` and `callback`; `registry` reads eval_results documents, and the evaluation's rules (a
student's margin over the references, the most invalid answers it may give) are handed to it.
"""

from .store import (
    DEFAULT_EXPERIMENT,
    DEFAULT_UI_URL,
    Tracker,
    flat_params,
    local_store_uri,
    numeric_metrics,
    report_to_list,
)

__all__ = ["DEFAULT_EXPERIMENT", "DEFAULT_UI_URL", "Tracker", "flat_params", "local_store_uri", "numeric_metrics",
           "report_to_list"]
