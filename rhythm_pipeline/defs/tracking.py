"""The `tracking` resource: MLflow experiment tracking for the training and evaluation assets.

One MLflow run per materialization, named and tagged with the Dagster run id and asset key, the
data versions of its inputs, the dataset format and base model. The store is the SQLite file under
the instance's storage (`<artifacts>/mlflow/mlflow.db`, `make mlflow` serves its UI) unless
`tracking_uri` or MLFLOW_TRACKING_URI names another. Tracking never fails an asset: a store that
cannot be used is one warning in the run's log, and the asset's figures reach Dagster as always.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg

from rhythm_core.compute.costs import cost_figures, total_cost
from rhythm_core.tracking import DEFAULT_EXPERIMENT, Tracker
from rhythm_core.tracking.registry import REGISTERED_MODEL
from rhythm_core.tracking.store import wants_mlflow
from rhythm_pipeline.settings import artifact_root


class TrackingRun:
    """An asset's MLflow run: `env` for a training subprocess, `finish` after training, `metadata`
    for the materialization (run id and URL, or why there is none)."""

    def __init__(self, tracker: Tracker | None, run_id: str | None, why_not: str | None = None):
        self.tracker, self.run_id, self.why_not = tracker, run_id, why_not

    @property
    def env(self) -> dict[str, str]:
        return self.tracker.subprocess_env(self.run_id) if self.tracker else {"MLFLOW_RUN_ID": ""}

    def finish_training(self, result: dict, artifact_url: str | None = None) -> None:
        """`result` with local paths (its files are logged); `artifact_url`: where the student lives
        in the artifact store, tagged on the run."""
        if self.tracker and self.run_id:
            self.tracker.set_tags(self.run_id, {"rhythm.data_version": result.get("version"),
                                                "rhythm.artifact_url": artifact_url or result.get("model_dir")})
            self.tracker.finish_training(self.run_id, result, extra_metrics=cost_figures(result.get("hf_job")))

    def metadata(self) -> dict:
        if self.tracker and self.run_id and self.tracker.ok:
            url = self.tracker.run_url(self.run_id)
            return {"mlflow_run_id": self.run_id, **({"mlflow_url": dg.MetadataValue.url(url)} if url else {})}
        reason = self.why_not or (self.tracker.error if self.tracker else None) or "not tracked"
        return {"mlflow": f"not tracked: {reason}"}


class TrackingResource(dg.ConfigurableResource):
    """MLflow tracking and registry. tracking_uri None: MLFLOW_TRACKING_URI, else the SQLite store under
    the instance's storage. `enabled: false` turns MLflow off for every asset; a training run's own
    `report_to` decides for that run (mlflow, tensorboard, none...)."""

    tracking_uri: str | None = None
    experiment: str = DEFAULT_EXPERIMENT
    ui_url: str | None = None  # None: the server's URL, or http://127.0.0.1:5000 (`make mlflow`) for a local store
    registered_model: str = REGISTERED_MODEL
    # registered_student promotes a student over the champion only by more than this (same seeds, grader)
    min_improvement: float = 0.0
    enabled: bool = True

    def tracker(self, context) -> Tracker | None:
        if not self.enabled:
            return None
        return Tracker.for_root(artifact_root(context), tracking_uri=self.tracking_uri, experiment=self.experiment,
                                ui_url=self.ui_url, warn=context.log.warning)

    @staticmethod
    def dagster_tags(context, upstream: dict[str, dict] | None = None) -> dict[str, str]:
        asset = context.asset_key.to_user_string()
        return {"dagster.run_id": context.run.run_id, "dagster.asset_key": asset, "dagster.job": context.job_name,
                "rhythm.asset": asset,
                "rhythm.code_version": context.assets_def.code_versions_by_key.get(context.asset_key) or "",
                **{f"dagster.upstream.{name}": value["version"] for name, value in (upstream or {}).items()}}

    @contextmanager
    def run(self, context, *, params: dict | None = None, upstream: dict[str, dict] | None = None,
            tags: dict | None = None, report_to="mlflow") -> Iterator[TrackingRun]:
        """One MLflow run for this materialization (none when tracking is off or `report_to` leaves
        MLflow out); it ends FAILED if the block raises and is left to `finish_*` otherwise."""
        tracker = self.tracker(context)
        if tracker is None or not wants_mlflow(report_to):
            yield TrackingRun(None, None, "tracking disabled" if tracker is None else f"report_to {report_to!r}")
            return
        name = f"{context.asset_key.to_user_string()}-{context.run.run_id[:8]}"
        run_id = tracker.start_run(name, tags={**self.dagster_tags(context, upstream), **(tags or {})}, params=params)
        if run_id:
            context.log.info(f"MLflow run {run_id} in {tracker.tracking_uri} ({tracker.run_url(run_id)})")
        tracked = TrackingRun(tracker, run_id)
        try:
            yield tracked
        except BaseException:
            tracker.end_run(run_id, "FAILED")
            raise
        tracker.end_run(run_id, "FINISHED")  # a no-op when finish_training ended it already


    @contextmanager
    def training_run(self, context, config: dict, upstream: dict[str, dict]) -> Iterator[TrackingRun]:
        """`run` for a training asset: params = the run config, tags = the base model, the dataset's
        format and teacher; `report_to` from the run config."""
        dataset = (upstream.get("sft_dataset") or {}).get("provenance") or {}
        tags = {"rhythm.base_model": config.get("base_model") or (upstream.get("sft_checkpoint") or {}).get("base_model"),
                "rhythm.prompt_format": dataset.get("prompt_format"), "rhythm.reasoning": dataset.get("reasoning"),
                "rhythm.teacher": (dataset.get("teacher") or {}).get("id")}
        with self.run(context, params=config, upstream=upstream, tags=tags,
                      report_to=config.get("report_to", "mlflow")) as tracked:
            yield tracked


    def training_run_of(self, tracker: Tracker, asset: str, data_version: str | None):
        """The MLflow run that trained `asset` at `data_version` (the newest), or None."""
        if not data_version:
            return None
        runs = tracker.search_runs(f"tags.`rhythm.asset` = '{asset}' and tags.`rhythm.data_version` = '{data_version}'",
                                   max_results=1)
        return runs[0] if runs else None

    def log_evaluation(self, context, stage: dict, eval_rollouts: dict) -> TrackingRun:
        """eval_results' run: every condition/agent's scores (active grader and v2), belief MAE,
        recovery and invalid rate; the plots and JSON; tags linking the students' training runs
        (and a tag on each training run pointing back)."""
        from rhythm_core.evaluation.results import evaluation_metrics

        results = stage["results"]
        provenance = results.get("provenance", {})
        tags = {"rhythm.grader": results["grader"], "rhythm.base_model": provenance.get("base_model"),
                "rhythm.headline_student": provenance.get("headline_student"), "rhythm.data_version": stage["version"],
                "rhythm.seeds": json_tag(provenance.get("seeds"))}
        with self.run(context, upstream={"eval_rollouts": eval_rollouts}, tags=tags,
                      params={"grader": results["grader"], "graders": results.get("graders"),
                              "seeds": provenance.get("seeds"), "sampling": provenance.get("sampling"),
                              "env_version": results.get("env_version")}) as tracked:
            tracker, run_id = tracked.tracker, tracked.run_id
            if tracker and run_id:
                for agent, stage_name in (("student_sft", "sft"), ("student_grpo", "grpo")):
                    version = provenance.get(f"{stage_name}_checkpoint_version")
                    trained = self.training_run_of(tracker, f"{stage_name}_checkpoint", version)
                    tracker.set_tags(run_id, {f"rhythm.{agent}.checkpoint_version": version,
                                              f"rhythm.{agent}.mlflow_run_id": trained.info.run_id if trained else None})
                    if trained:
                        tracker.set_tags(trained.info.run_id, {"rhythm.evaluated_by": run_id})
                tracker.log_metrics(run_id, evaluation_metrics(results))
                jobs = eval_rollouts.get("hf_jobs") or []
                if jobs:  # the students played on HF Jobs: the jobs' caps and bills, summed
                    tracker.log_metrics(run_id, cost_figures({"cost": total_cost(jobs)}))
                tracker.log_artifacts(run_id, [stage["json"], stage["final_scores_png"], stage["belief_accuracy_png"],
                                               stage["dir"] + "/eval_results.md"])
        return tracked


def json_tag(value) -> str | None:
    import json

    return None if value is None else json.dumps(value, sort_keys=True)


@dg.definitions
def tracking_resources() -> dg.Definitions:
    return dg.Definitions(resources={"tracking": TrackingResource()})
