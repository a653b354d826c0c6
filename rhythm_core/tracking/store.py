"""One MLflow store behind calls that never raise.

The default store is a SQLite file beside the rhythm artifacts (`<root>/mlflow/mlflow.db`, run
artifacts in `<root>/mlflow/artifacts`); `MLFLOW_TRACKING_URI` or an explicit URI picks any other
store or server. Every call goes through `Tracker._call`: the first failure (an unwritable store, a
server that is down) is reported once through `warn` and turns the tracker off for the rest of its
life, so training and the figures Dagster records never depend on the tracking store.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

logger = logging.getLogger("rhythm_core.tracking")

DEFAULT_EXPERIMENT = "rhythm"
# Where `make mlflow` serves the UI of the local store; a server's own URL replaces it.
DEFAULT_UI_URL = "http://127.0.0.1:5000"
# A server that is down must not hold training up: MLflow retries each HTTP request 7 times with
# exponential backoff by default (minutes per call). Rhythm's calls use these unless the user set them.
HTTP_LIMITS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
               "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1"}
_MAX_PARAM_LENGTH = 6000  # MLflow's limit on a param value
_METRIC_NAME = re.compile(r"[^0-9A-Za-z_\-. :/]")  # what MLflow accepts in a metric name (as transformers does)


def metric_name(name: str) -> str:
    """`name` as MLflow accepts a metric name: every other character written as '_'."""
    return _METRIC_NAME.sub("_", name)


def local_store_uri(root) -> str:
    """The default tracking store of a rhythm storage root: a SQLite file under `<root>/mlflow`."""
    return "sqlite:///" + str((Path(root) / "mlflow" / "mlflow.db").resolve())


def local_artifact_root(root) -> Path:
    return (Path(root) / "mlflow" / "artifacts").resolve()


def report_names(report_to) -> list[str]:
    """A run config's `report_to` ("mlflow", "tensorboard", "none", "all", or a comma-separated list)
    as a list of integration names ([] for none)."""
    if isinstance(report_to, list | tuple):
        names = [str(n).strip() for n in report_to]
    else:
        names = [n.strip() for n in str(report_to or "none").split(",")]
    names = [n for n in names if n]
    if "none" in names:
        if len(names) > 1:
            raise ValueError(f"report_to {report_to!r}: 'none' cannot be combined with other integrations")
        return []
    return names


def wants_mlflow(report_to) -> bool:
    return bool({"mlflow", "all"} & set(report_names(report_to)))


def report_to_list(report_to) -> list[str] | str:
    """TrainingArguments' `report_to` for a run config's. "mlflow" stays only when there is a run to
    log into (MLFLOW_RUN_ID, set by whoever owns the run); without one, transformers would open a run
    of its own in MLflow's default store (a `mlflow.db` in the working directory)."""
    names = report_names(report_to)
    if "mlflow" in names and not os.environ.get("MLFLOW_RUN_ID"):
        logger.info("report_to includes mlflow but no MLflow run is open (MLFLOW_RUN_ID unset): not tracked")
        names.remove("mlflow")
    return names or "none"


def numeric_metrics(entry: dict, prefix: str = "") -> dict[str, float]:
    """The finite numbers of a log entry (nested dicts flattened with '/'), names made MLflow-safe;
    `step` and booleans are left out."""
    out = {}
    for key, value in entry.items():
        name = f"{prefix}{key}"
        if key == "step" and not prefix or isinstance(value, bool):
            continue
        if isinstance(value, dict):
            out.update(numeric_metrics(value, f"{name}/"))
        elif isinstance(value, int | float) and math.isfinite(value):
            out[metric_name(name)] = float(value)
    return out


def flat_params(config: dict, prefix: str = "") -> dict[str, str]:
    """A config as MLflow params: nested dicts flattened with '.', lists and None as JSON."""
    out = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flat_params(value, f"{name}."))
        else:
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            out[name] = text[:_MAX_PARAM_LENGTH]
    return out


@contextmanager
def http_limits() -> Iterator[None]:
    """HTTP_LIMITS in the environment for the duration (values the user set are kept)."""
    added = {k: v for k, v in HTTP_LIMITS.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


class Tracker:
    """An MLflow store for one piece of work (a Dagster step, a training run). Nothing here raises:
    after the first failure, `error` says what failed and every later call does nothing."""

    def __init__(self, tracking_uri: str, experiment: str = DEFAULT_EXPERIMENT, *, artifact_location=None,
                 ui_url: str | None = None, warn: Callable[[str], None] | None = None):
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.artifact_location = str(artifact_location) if artifact_location else None
        remote = tracking_uri.startswith(("http://", "https://"))
        self.ui_url = (ui_url or (tracking_uri if remote else DEFAULT_UI_URL)).rstrip("/")
        self.warn = warn or logger.warning
        self.error: str | None = None
        self._client = None
        self._experiment_id: str | None = None

    @classmethod
    def for_root(cls, root, *, tracking_uri: str | None = None, experiment: str = DEFAULT_EXPERIMENT,
                 ui_url: str | None = None, warn: Callable[[str], None] | None = None) -> Tracker:
        """`tracking_uri`, else $MLFLOW_TRACKING_URI, else the local store under the storage `root`."""
        uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or local_store_uri(root)
        local = uri == local_store_uri(root)
        return cls(uri, experiment, artifact_location=local_artifact_root(root) if local else None, ui_url=ui_url,
                   warn=warn)

    @property
    def ok(self) -> bool:
        return self.error is None

    def _call(self, what: str, fn: Callable, default=None):
        if self.error:
            return default
        try:
            with http_limits():
                return fn()
        except Exception as exc:  # noqa: BLE001 - tracking must never fail the work it tracks
            self.error = f"{what}: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc) else ''}"
            self.warn(f"MLflow tracking off ({self.tracking_uri}): {self.error}. The work itself and its Dagster "
                      "metadata are unaffected.")
            return default

    @property
    def client(self):
        if self._client is None:
            from mlflow import MlflowClient

            if self.tracking_uri.startswith("sqlite:///"):
                Path(self.tracking_uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
            self._client = MlflowClient(tracking_uri=self.tracking_uri, registry_uri=self.tracking_uri)
        return self._client

    def _experiment(self) -> str:
        if self._experiment_id is None:
            from mlflow.exceptions import MlflowException

            found = self.client.get_experiment_by_name(self.experiment)
            if found is None:
                try:
                    # The kind tag makes the MLflow UI open the experiment as model training
                    # (runs, metric charts), not as a GenAI app (traces).
                    self._experiment_id = self.client.create_experiment(
                        self.experiment, artifact_location=self.artifact_location,
                        tags={"mlflow.experimentKind": "custom_model_development"})
                except MlflowException:  # created meanwhile by another process
                    self._experiment_id = self.client.get_experiment_by_name(self.experiment).experiment_id
            else:
                self._experiment_id = found.experiment_id
        return self._experiment_id

    def experiment_id(self) -> str | None:
        return self._call("open the experiment", self._experiment)

    # -- runs -------------------------------------------------------------------------------------
    def start_run(self, name: str, *, tags: dict | None = None, params: dict | None = None) -> str | None:
        """A new run in the experiment; its id, or None when the store cannot be used."""
        def start():
            from mlflow.entities import Param

            run = self.client.create_run(self._experiment(), run_name=name,
                                         tags={k: str(v) for k, v in (tags or {}).items() if v is not None})
            items = [Param(k, v) for k, v in flat_params(params or {}).items()]
            for i in range(0, len(items), 100):
                self.client.log_batch(run.info.run_id, params=items[i:i + 100])
            return run.info.run_id

        return self._call("start a run", start)

    def set_tags(self, run_id: str | None, tags: dict) -> None:
        if run_id:
            values = {k: str(v) for k, v in tags.items() if v is not None}
            self._call("set tags", lambda: self._log_batch(run_id, tags=values))

    def log_metrics(self, run_id: str | None, metrics: dict, step: int = 0) -> None:
        if run_id and metrics:
            self._call("log metrics", lambda: self._log_batch(run_id, metrics=numeric_metrics(metrics), step=step))

    def log_history(self, run_id: str | None, entries: list[dict]) -> int:
        """Log step entries ({"step": n, name: value, ...}, e.g. a trainer's log_history); the count."""
        if not run_id:
            return 0

        def log():
            from mlflow.entities import Metric

            now = int(time.time() * 1000)
            points = [Metric(k, v, now, int(e.get("step", 0))) for e in entries for k, v in numeric_metrics(e).items()]
            for i in range(0, len(points), 1000):
                self.client.log_batch(run_id, metrics=points[i:i + 1000])
            return len(points)

        return self._call("log the step history", log, 0)

    def _log_batch(self, run_id: str, *, metrics: dict | None = None, step: int = 0, tags: dict | None = None):
        from mlflow.entities import Metric, RunTag

        now = int(time.time() * 1000)
        self.client.log_batch(run_id, metrics=[Metric(k, v, now, step) for k, v in (metrics or {}).items()],
                              tags=[RunTag(k, v) for k, v in (tags or {}).items()])

    def log_artifacts(self, run_id: str | None, paths, artifact_path: str | None = None) -> None:
        """Log files and directories (missing ones are skipped) under `artifact_path`."""
        if not run_id:
            return

        def log():
            for path in map(Path, paths):
                if path.is_dir():
                    self.client.log_artifacts(run_id, str(path), artifact_path)
                elif path.is_file():
                    self.client.log_artifact(run_id, str(path), artifact_path)

        self._call("log artifacts", log)

    def end_run(self, run_id: str | None, status: str = "FINISHED") -> None:
        if run_id:
            self._call("end the run", lambda: self.client.set_terminated(run_id, status))

    def get_run(self, run_id: str):
        return self._call("read a run", lambda: self.client.get_run(run_id))

    def search_runs(self, filter_string: str, max_results: int = 10) -> list:
        return self._call("search runs", lambda: self.client.search_runs(
            [self._experiment()], filter_string=filter_string, max_results=max_results,
            order_by=["attributes.start_time DESC"]), [])

    def run_url(self, run_id: str | None) -> str | None:
        if not run_id or self._experiment_id is None:
            return None
        return f"{self.ui_url}/#/experiments/{self._experiment_id}/runs/{run_id}?{MODEL_TRAINING_VIEW}"

    def model_url(self, name: str, version: str | int | None = None) -> str:
        return (f"{self.ui_url}/#/models/{name}" + (f"/versions/{version}" if version is not None else "")
                + f"?{MODEL_TRAINING_VIEW}")

    def subprocess_env(self, run_id: str | None) -> dict[str, str]:
        """What a child process needs to log into `run_id` (empty MLFLOW_RUN_ID: nothing to log into)."""
        if not run_id or not self.ok:
            return {"MLFLOW_RUN_ID": ""}
        return {"MLFLOW_TRACKING_URI": self.tracking_uri, "MLFLOW_RUN_ID": run_id,
                "MLFLOW_EXPERIMENT_ID": self._experiment_id or "",
                **{k: os.environ.get(k, v) for k, v in HTTP_LIMITS.items()}}

    # -- a training stage's run -------------------------------------------------------------------
    def finish_training(self, run_id: str | None, result: dict, extra_metrics: dict | None = None) -> None:
        """After a training stage: its summary figures (and `extra_metrics`, e.g. a job's cost), the
        plots, model card and metrics file as artifacts, the dataset format and base model as tags; the
        step metrics from metrics.json when the training process could not log them itself (e.g. on
        Hugging Face Jobs); run FINISHED."""
        if not run_id or not self.ok:
            return
        out = Path(result["path"])
        history = []
        if (out / "metrics.json").exists():
            history = json.loads((out / "metrics.json").read_text()).get("log_history", [])
        run = self.get_run(run_id)
        if run is not None and not run.data.metrics and history:
            self.log_history(run_id, history)
        stepped = {k for e in history for k in numeric_metrics(e)}
        summary = {k: v for k, v in numeric_metrics(result).items() if k not in stepped}
        summary.update(extra_metrics or {})
        self.log_metrics(run_id, summary, step=int(result.get("steps") or 0))
        self.set_tags(run_id, {"rhythm.base_model": result.get("base_model"),
                               "rhythm.prompt_format": result.get("prompt_format"),
                               "rhythm.reasoning": result.get("reasoning"), "rhythm.device": result.get("device")})
        model_dir = Path(result.get("model_dir") or out / "model")
        self.log_artifacts(run_id, [out / name for name in ("training_loss.png", "reward_curves.png", "kl.png",
                                                            "metrics.json")])
        self.log_artifacts(run_id, [model_dir / "README.md", model_dir / "rhythm_checkpoint.json"], "model_card")
        self.end_run(run_id, "FINISHED")


# MLflow 3's UI opens every experiment in its GenAI view (traces) unless the link asks for the model
# training view, whatever the experiment's kind tag says; every link rhythm prints asks for it.
MODEL_TRAINING_VIEW = "workflowType=machine_learning"


def experiment_url(ui_url: str, experiment_id: str) -> str:
    """The experiment's runs table in the MLflow UI (not its GenAI overview)."""
    return f"{ui_url}/#/experiments/{experiment_id}/runs?{MODEL_TRAINING_VIEW}"
