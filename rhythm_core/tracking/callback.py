"""transformers' MLflow integration, as `report_to="mlflow"` selects it, for rhythm's trainers.

`SFTConfig(report_to=...)` / `GRPOConfig(report_to=...)` take `report_to_list(config.report_to)`;
then `attach_tracking(trainer, step_offset)` swaps the `MLflowCallback` transformers added for
`RhythmMLflowCallback`, a subclass that differs where the stock one would break a rhythm run:

- it logs into the run its owner opened (MLFLOW_RUN_ID, MLFLOW_TRACKING_URI) through a client, and
  never starts, resumes or ends a run: SFT's short-context and whole-week phases are two trainers
  writing into one run, and the owner (the Dagster asset) sets the final status;
- steps are counted through both phases (`step_offset`), so the loss is one curve;
- the params are the rhythm run config, logged once by the owner (the stock callback logs the
  ~150 TrainingArguments of each trainer, which differ between the phases and MLflow refuses);
- a failure (unwritable store, server down) is one warning on the `rhythm_core.tracking` logger
  and the callback goes quiet; the training goes on.
"""

from __future__ import annotations

import logging
import os
import time

from .store import http_limits, metric_name

logger = logging.getLogger("rhythm_core.tracking")


def _callback_class():
    from transformers.integrations import MLflowCallback

    class RhythmMLflowCallback(MLflowCallback):
        def __init__(self, step_offset: int = 0):
            super().__init__()
            self.step_offset = step_offset
            self.run_id = os.environ.get("MLFLOW_RUN_ID") or None
            self.logged = 0
            self._client = None
            self._off = self.run_id is None

        def setup(self, args, state, model):
            self._initialized = True
            if self._off:
                return
            try:
                from mlflow import MlflowClient

                self._client = MlflowClient(tracking_uri=os.environ.get("MLFLOW_TRACKING_URI") or None)
            except Exception as exc:  # noqa: BLE001
                self._fail(exc)

        def _fail(self, exc: Exception) -> None:
            self._off = True
            logger.warning(f"MLflow tracking off for this training run (run {self.run_id}, "
                           f"{os.environ.get('MLFLOW_TRACKING_URI')}): {type(exc).__name__}: "
                           f"{str(exc).strip()[:300]}. Training goes on.")

        def on_log(self, args, state, control, logs=None, model=None, **kwargs):
            if not self._initialized:
                self.setup(args, state, model)
            if self._off or not logs or not state.is_world_process_zero:
                return
            from mlflow.entities import Metric

            step, now = state.global_step + self.step_offset, int(time.time() * 1000)
            points = [Metric(metric_name(k), float(v.item() if hasattr(v, "item") else v), now, step)
                      for k, v in logs.items()
                      if not isinstance(v, bool) and (isinstance(v, int | float) or getattr(v, "numel", lambda: 0)() == 1)]
            try:
                with http_limits():
                    self._client.log_batch(self.run_id, metrics=points)
                self.logged += len(points)
            except Exception as exc:  # noqa: BLE001
                self._fail(exc)

        def on_train_end(self, args, state, control, **kwargs):
            pass  # the owner of the run ends it

        def on_save(self, args, state, control, **kwargs):
            pass  # checkpoints are rhythm artifacts; the registry logs the model it registers

        def __del__(self):
            pass

    return RhythmMLflowCallback


_CLASS = None


def rhythm_mlflow_callback(step_offset: int = 0):
    global _CLASS
    if _CLASS is None:
        _CLASS = _callback_class()
    return _CLASS(step_offset)


def attach_tracking(trainer, step_offset: int = 0):
    """Replace the MLflowCallback that `report_to` gave `trainer` with rhythm's (see the module
    docstring); a trainer without one is returned as it is."""
    from transformers.integrations import MLflowCallback

    stock = [cb for cb in trainer.callback_handler.callbacks
             if isinstance(cb, MLflowCallback) and not hasattr(cb, "step_offset")]
    for callback in stock:
        trainer.callback_handler.remove_callback(callback)
    if stock:
        trainer.add_callback(rhythm_mlflow_callback(step_offset))
    return trainer
