"""MLflow tracking and the model registry against a real local store (SQLite, no mocks): a tiny SFT
materialization logs every step into one MLflow run tagged with the Dagster run; a store that
cannot be written is a warning, not a failed asset; the registry promotes a better student, refuses
a worse one, and refuses a better one whose blocking check failed or that was evaluated elsewhere."""

import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import pytest

from rhythm_core.tracking import Tracker, local_store_uri, report_to_list
from rhythm_core.tracking.registry import CANDIDATE, CHAMPION, evaluation_key, headline_student, promotion_decision
from rhythm_core.tracking.store import report_names
from rhythm_pipeline.defs.assets.data import sft_dataset, teacher_trajectories
from rhythm_pipeline.defs.assets.registry import registered_student
from rhythm_pipeline.defs.assets.training import sft_checkpoint
from rhythm_pipeline.defs.resources import ComputeResource, HubResource, TeacherResource, artifact_store_from_env
from rhythm_pipeline.defs.tracking import TrackingResource
from tests.partitioned import materialize_lineage


@pytest.fixture(scope="session")
def mlflow_store(tmp_path_factory):
    """One SQLite tracking store for the session (creating its tables takes several seconds)."""
    root = tmp_path_factory.mktemp("mlflow_store")
    tracker = Tracker.for_root(root)
    assert tracker.experiment_id() is not None, tracker.error
    return local_store_uri(root)


def _client(uri):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def test_the_experiment_opens_as_model_training_in_the_ui(mlflow_store):
    # Without the kind tag MLflow 3's UI shows the experiment as a GenAI app (traces), not its runs.
    experiment = _client(mlflow_store).get_experiment_by_name("rhythm")
    assert experiment.tags.get("mlflow.experimentKind") == "custom_model_development"


def _ui_link(store, *args: str) -> str:
    """What `make mlflow` prints for `store` (the command its recipe runs)."""
    done = subprocess.run([sys.executable, "-m", "rhythm_core.tracking.ui_link", str(store), *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and not done.stderr, done.stderr
    return done.stdout.strip()


def test_make_mlflow_prints_the_link_to_the_experiments_runs_and_creates_nothing(mlflow_store, tmp_path):
    store = Path(mlflow_store.removeprefix("sqlite:///")).parent
    experiment_id = _client(mlflow_store).get_experiment_by_name("rhythm").experiment_id
    db = store / "mlflow.db"
    before = (db.stat().st_mtime_ns, db.read_bytes())
    assert _ui_link(store) == (f"MLflow UI: http://127.0.0.1:5000/#/experiments/{experiment_id}/runs"
                               "?workflowType=machine_learning (the rhythm experiment's runs)")
    assert (db.stat().st_mtime_ns, db.read_bytes()) == before  # read-only
    # no experiment yet (no store, or one without tables or without rhythm): the list, and why
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "mlflow.db").write_bytes(b"")
    for where in (tmp_path / "missing", tmp_path / "empty"):
        assert _ui_link(where, "--ui-url", "http://127.0.0.1:5001/") == (
            "MLflow UI: http://127.0.0.1:5001/#/experiments?workflowType=machine_learning (no rhythm experiment in "
            f"{where / 'mlflow.db'} yet: the first training or evaluation run creates it; `make mlflow` then prints "
            "the link to its runs)")
    assert _ui_link(store, "--experiment", "other").startswith("MLflow UI: http://127.0.0.1:5000/#/experiments?")
    assert not (tmp_path / "missing").exists() and (tmp_path / "empty" / "mlflow.db").read_bytes() == b""


@contextmanager
def mlflow_server(store: Path):
    """`mlflow server` on `store` as `make mlflow` runs it, on a free port of 127.0.0.1; its base URL."""
    from tests.test_ui import free_port

    port = free_port()
    proc = subprocess.Popen([str(Path(sys.executable).parent / "mlflow"), "server", "--backend-store-uri",
                             f"sqlite:///{store / 'mlflow.db'}", "--default-artifact-root", str(store / "artifacts"),
                             "-h", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(base + "/health", timeout=5):
                    break
            except OSError:
                assert proc.poll() is None, f"mlflow server exited with {proc.returncode}"
                assert time.monotonic() < deadline, "mlflow server did not answer within 180 s"
                time.sleep(1)
        yield base
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=30)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("RHYTHM_SKIP_UI") == "1", reason="RHYTHM_SKIP_UI=1")
def test_the_link_make_mlflow_prints_opens_the_runs_not_the_genai_overview(tmp_path):
    """In headless Chromium against a real `mlflow server`: the printed link shows the run by its name;
    the experiment's bare page (where a click in the experiments list leads) is the empty GenAI
    overview ("Traces 0"), which the link avoids."""
    from tests.test_ui import chromium_run, page_text, require_chromium

    chromium = require_chromium()
    tracker = Tracker.for_root(tmp_path)
    run_id = tracker.start_run("sft_checkpoint-5d0ff0a8", tags={"dagster.asset_key": "sft_checkpoint"})
    tracker.log_metrics(run_id, {"loss": 0.25}, step=1)
    tracker.end_run(run_id)
    assert tracker.ok, tracker.error
    store = tmp_path / "mlflow"
    with mlflow_server(store) as base:
        url = _ui_link(store, "--ui-url", base).split()[2]
        assert url == f"{base}/#/experiments/{tracker.experiment_id()}/runs?workflowType=machine_learning"
        text = page_text(chromium_run(chromium, url, "--dump-dom", window="1600,1000"))
        assert "sft_checkpoint-5d0ff0a8" in text, text[:3000]
        assert "Traces 0" not in text and "No data available for the selected time range" not in text, text[:3000]
        overview = page_text(chromium_run(chromium, f"{base}/#/experiments/{tracker.experiment_id()}", "--dump-dom",
                                          window="1600,1000"))
        assert "Traces 0" in overview and "sft_checkpoint-5d0ff0a8" not in overview, overview[:3000]


def test_report_to_names_and_mlflow_only_with_a_run_to_log_into(monkeypatch):
    assert report_names("mlflow, tensorboard") == ["mlflow", "tensorboard"]
    assert report_names("none") == [] and report_names("") == []
    with pytest.raises(ValueError):
        report_names("none,mlflow")
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    assert report_to_list("mlflow") == "none"  # no run opened: transformers must not open one in ./mlflow.db
    assert report_to_list("mlflow,tensorboard") == ["tensorboard"]
    monkeypatch.setenv("MLFLOW_RUN_ID", "abc")
    assert report_to_list("mlflow") == ["mlflow"]


def _candidate(score: float, checkpoint: str, seeds: str = "0-3") -> dict:
    seeds_by_condition = {"continuous": seeds}
    key = evaluation_key(seeds_by_condition, "v3", "env-1")
    return {"agent": "student_grpo", "stage": "grpo", "grader": "v3", "seeds": seeds_by_condition,
            "checkpoint_version": checkpoint, "headline": score, "evaluation_key": key,
            "evaluations": {key: {"grader": "v3", "headline": score}}}


def test_promotion_rule():
    passed = {"grpo_checkpoint.grpo_not_worse_than_sft": True}
    first = promotion_decision(_candidate(0.5, "a"), None, passed)
    assert (first["decision"], first["alias"]) == ("promoted", CHAMPION)
    champion = {"version": "1", "tags": {"checkpoint_version": "a", f"eval.{_candidate(0.5, 'a')['evaluation_key']}": "0.5"}}
    assert promotion_decision(_candidate(0.55, "b"), champion, passed)["decision"] == "promoted"
    worse = promotion_decision(_candidate(0.45, "b"), champion, passed)
    assert (worse["decision"], worse["alias"]) == ("candidate", CANDIDATE)
    assert worse["comparison"]["difference"] == pytest.approx(-0.05)
    assert promotion_decision(_candidate(0.55, "b"), champion, passed, min_improvement=0.1)["decision"] == "candidate"
    failed = promotion_decision(_candidate(0.9, "b"), champion, {**passed, "x.y": False})
    assert failed["decision"] == "candidate" and failed["failed_checks"] == ["x.y"]
    assert promotion_decision(_candidate(0.9, "b"), champion, {"x.y": None})["decision"] == "candidate"
    elsewhere = promotion_decision(_candidate(0.9, "b", seeds="4-7"), champion, passed)
    assert elsewhere["decision"] == "candidate" and "never evaluated on these seeds" in elsewhere["reason"]
    assert promotion_decision(_candidate(0.1, "a"), champion, passed)["decision"] == "unchanged"


def test_a_student_below_the_references_never_becomes_champion():
    """Blocking checks passed, no champion yet: a student that does not beat the heuristic and the
    fallback-only policy somewhere, or answers invalidly above 5%, still only gets `candidate`."""
    passed = {"grpo_checkpoint.grpo_not_worse_than_sft": True}
    fine = {**_candidate(0.5, "a"), "vs_references": {"continuous": 0.02, "ood": 0.01}, "invalid_rate": {"ood": 0.05},
            "max_invalid_rate": 0.05}
    assert promotion_decision(fine, None, passed)["decision"] == "promoted"
    losing = promotion_decision({**fine, "vs_references": {"continuous": 0.02, "ood": -0.003}}, None, passed)
    assert (losing["decision"], losing["alias"]) == ("candidate", CANDIDATE)
    assert losing["reason"] == "below the references' floor: ood -0.0030 vs the heuristic/fallback"
    rambling = promotion_decision({**fine, "invalid_rate": {"ood": 0.2}}, None, passed)
    assert rambling["decision"] == "candidate" and "ood 20.0% invalid answers" in rambling["reason"]


def test_the_registered_student_is_the_gates_choice_not_the_evaluations_best():
    grpo, sft = {**_candidate(0.60, "g"), "agent": "student_grpo"}, {**_candidate(0.55, "s"), "agent": "student_sft"}
    summaries = {"student_grpo": grpo, "student_sft": sft}
    # The gate chose SFT on held-out training weeks: a higher evaluation score does not overrule it,
    # or the evaluation seeds would pick the model.
    assert headline_student(summaries, gate="student_sft") is sft
    assert headline_student(summaries, gate=None) is grpo  # no gate verdict: the better evaluation
    assert headline_student({"student_sft": sft}, gate="student_grpo") is sft
    with pytest.raises(ValueError, match="no student"):
        headline_student({})


# -- the training asset -------------------------------------------------------------------------
SMALL_SFT = {"ops": {"sft_checkpoint": {"config": {"max_steps": 1, "short_context_steps": 1, "logging_steps": 1,
                                                   "short_context_length": 256, "max_length": 768, "eval_examples": 2,
                                                   "per_device_train_batch_size": 2}}}}


def _materialize_sft(instance, tracking: TrackingResource):
    resources = {"teacher": TeacherResource(), "hub": HubResource(), "compute": ComputeResource(), "tracking": tracking,
                 "artifacts": artifact_store_from_env()}
    return materialize_lineage([teacher_trajectories, sft_dataset, sft_checkpoint], instance, shards=("1000-1003",),
                               resources=resources, run_config=SMALL_SFT, raise_on_error=False)


def _metadata(result, asset: str) -> dict:
    return next(e.event_specific_data.materialization.metadata for e in result.get_asset_materialization_events()
                if e.asset_key.to_user_string() == asset)


def test_sft_materialization_is_one_mlflow_run_with_every_step(instance, mlflow_store):
    result = _materialize_sft(instance, TrackingResource(tracking_uri=mlflow_store))
    assert result.success
    meta = _metadata(result, "sft_checkpoint")
    run_id = meta["mlflow_run_id"].value
    assert meta["mlflow_url"].value.startswith("http://127.0.0.1:5000/#/experiments/") and run_id in meta["mlflow_url"].value
    client = _client(mlflow_store)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == f"sft_checkpoint-{result.run_id[:8]}"
    tags = run.data.tags
    assert tags["dagster.run_id"] == result.run_id and tags["dagster.asset_key"] == "sft_checkpoint"
    assert tags["dagster.upstream.sft_dataset"] == meta["upstream_data_versions"].value["sft_dataset"]
    assert tags["rhythm.base_model"] == "tiny" and tags["rhythm.prompt_format"] and tags["rhythm.data_version"]
    assert run.data.params["max_steps"] == "1" and run.data.params["report_to"] == "mlflow"
    # every logged step, counted through both phases (a short-context step, then a whole-week step), logged
    # by the training subprocess
    assert [m.step for m in client.get_metric_history(run_id, "loss")] == [1, 2]
    assert "valid_answer_rate_after" in run.data.metrics and "eval_loss" in run.data.metrics
    artifacts = {a.path for a in client.list_artifacts(run_id)} | {a.path for a in client.list_artifacts(run_id, "model_card")}
    assert {"training_loss.png", "metrics.json", "model_card/README.md"} <= artifacts


def _unwritable_store(tmp_path) -> str:
    blocker = tmp_path / "not_a_directory"
    blocker.write_text("a file where the store's folder should be")
    return f"sqlite:///{blocker}/mlflow.db"


@pytest.mark.slow
def test_training_with_a_store_that_cannot_be_written_is_a_warning_not_a_failed_asset(instance, tmp_path):
    result = _materialize_sft(instance, TrackingResource(tracking_uri=_unwritable_store(tmp_path)))
    assert result.success
    meta = _metadata(result, "sft_checkpoint")
    assert "mlflow_run_id" not in meta and meta["mlflow"].value.startswith("not tracked: start a run")
    assert meta["final_train_loss"].value is not None  # the figures reach Dagster as always
    warnings = [str(e.user_message) for e in instance.all_logs(result.run_id) if e.level == logging.WARNING]
    assert any("MLflow tracking off" in w for w in warnings)


def test_the_training_callback_warns_once_and_training_goes_on(tmp_path, monkeypatch, caplog):
    from types import SimpleNamespace

    from rhythm_core.tracking.callback import rhythm_mlflow_callback

    monkeypatch.setenv("MLFLOW_TRACKING_URI", _unwritable_store(tmp_path))
    monkeypatch.setenv("MLFLOW_RUN_ID", "0123456789abcdef")
    callback = rhythm_mlflow_callback(step_offset=10)
    state = SimpleNamespace(global_step=1, is_world_process_zero=True)
    with caplog.at_level(logging.WARNING, logger="rhythm_core.tracking"):
        for step in (1, 2, 3):
            state.global_step = step
            callback.on_log(None, state, None, logs={"loss": 1.0 / step})  # never raises
    assert len([r for r in caplog.records if "MLflow tracking off" in r.message]) == 1 and callback.logged == 0


# A student's identity without a model: the constant-belief heuristic plays as if it were a checkpoint.
STAND_IN = {"backend": "checkpoint", "model": "stand-in/heuristic_const_belief", "id": "student_grpo"}


@dg.asset(name="eval_rollouts")
def stub_eval_rollouts(context) -> dict:
    """Baselines and a stand-in student, a few seeds: what eval_results grades, in a second."""
    from functools import partial

    from rhythm_core.agents import get_agent
    from rhythm_core.evaluation.rollouts import _play_file, play_condition, publish_rollouts
    from rhythm_core.store import staging
    from rhythm_core.training.generation import SamplingConfig
    from rhythm_env.sim.conditions import eval_seed_list
    from rhythm_pipeline.settings import artifact_root

    seeds = {"continuous": "0-3", "ood": "10000-10003", "discrete3": "20000-20002"}
    baselines, root = ["random", "heuristic", "bayes"], artifact_root(context)
    with staging(root / "eval_rollouts") as staged:
        files = {}
        for condition, spec in seeds.items():
            file, entry, _ = _play_file("student_grpo", partial(get_agent, "heuristic_const_belief"), STAND_IN,
                                        condition, eval_seed_list(condition, spec), staged)
            files[file] = entry
            files.update(play_condition({}, condition, spec, staged, baselines=baselines))
        return publish_rollouts(staged, root, checkpoints={}, seeds=seeds, sampling=SamplingConfig(),
                                baselines=baselines, files=files, extra_players={"student_grpo": STAND_IN})


def _materialize_eval_results(instance, tracking: TrackingResource):
    from rhythm_pipeline.defs.assets.evaluation import eval_results

    result = dg.materialize([stub_eval_rollouts, eval_results], instance=instance, partition_key="0",
                            resources={"tracking": tracking, "artifacts": artifact_store_from_env()})
    return result, _metadata(result, "eval_results")


def test_eval_results_logs_its_figures_to_a_run(instance, mlflow_store):
    result, meta = _materialize_eval_results(instance, TrackingResource(tracking_uri=mlflow_store))
    run = _client(mlflow_store).get_run(meta["mlflow_run_id"].value)
    assert run.data.tags["dagster.run_id"] == result.run_id and run.data.tags["rhythm.grader"] == "v3"
    # the run keeps every agent's figures; the metadata charts the students' and lists every score
    assert run.data.metrics["continuous/bayes/final_score"] == pytest.approx(meta["scores"].value["continuous/bayes"],
                                                                           abs=1e-4)
    assert run.data.metrics["ood/student_grpo/final_score"] == pytest.approx(
        meta["1 student_grpo/ood/final_score"].value, abs=1e-4)
    assert "continuous/bayes/belief_mae" in run.data.metrics and "ood/heuristic/final_score.v2" in run.data.metrics
    assert {a.path for a in _client(mlflow_store).list_artifacts(run.info.run_id)} >= {"eval_results.json",
                                                                                      "final_scores.png"}


def test_the_plots_view_charts_the_students_score_and_recovery_first(instance):
    """Dagster's Plots view charts the numeric metadata two to a row, labels sorted by code point: the
    students' score and recovery per condition come first, side by side; no reference is charted."""
    from rhythm_core.evaluation.results import load_results, plotted_figures

    result, meta = _materialize_eval_results(instance, TrackingResource(enabled=False))
    charted = sorted(k for k, v in meta.items() if isinstance(v, dg.FloatMetadataValue | dg.IntMetadataValue))
    figures = plotted_figures(load_results(meta["artifact_path"].value))
    assert charted == [*figures, "history_rows"]
    conditions = ["continuous", "discrete3", "ood"]
    rows = [(charted[i], charted[i + 1]) for i in range(0, 6, 2)]
    assert rows == [(f"1 student_grpo/{c}/final_score", f"1 student_grpo/{c}/recovery") for c in conditions]
    assert charted[6:12] == [f"2 student_grpo/{c}/{m}" for c in conditions for m in ("belief_mae", "invalid_rate")]
    assert set(meta["scores"].value) == {f"{c}/{a}" for c in conditions
                                         for a in ("student_grpo", "random", "heuristic", "bayes")}


def test_plotted_figures_rank_every_students_score_and_recovery_before_the_rest():
    from rhythm_core.evaluation.results import plotted_figures

    def agent(score, recovery=None, mae=None):
        return {"final_score": score, "recovery": recovery, "belief_mae": mae, "invalid_rate": 0.01}

    conditions = ["continuous", "ood", "discrete3"]
    results = {"provenance": {"players": {"grpo": {"backend": "checkpoint"}, "student_sft": {"backend": "checkpoint"},
                                         "bayes": {"backend": "baseline"}, "heuristic": {"backend": "baseline"}}},
               "conditions": {c: {"agents": {"grpo": agent(0.6, 0.9, 0.1), "student_sft": agent(0.55, 0.7, 0.12),
                                             "bayes": agent(0.62, None, 0.1), "heuristic": agent(0.45)}}
                              for c in conditions}}
    labels = list(plotted_figures(results))
    assert labels == sorted(labels) and len(labels) == 2 * 3 * 4
    assert labels[:12] == [f"1 {s}/{c}/{m}" for s in ("grpo", "student_sft") for c in sorted(conditions)
                           for m in ("final_score", "recovery")]
    assert all(label.startswith("2 ") for label in labels[12:])


def test_a_store_that_cannot_be_written_is_a_warning_not_a_failed_asset(instance, tmp_path):
    result, meta = _materialize_eval_results(instance, TrackingResource(tracking_uri=_unwritable_store(tmp_path)))
    assert result.success and meta["mlflow"].value.startswith("not tracked: start a run")
    assert "mlflow_run_id" not in meta and "1 student_grpo/continuous/final_score" in meta  # the figures reach Dagster
    warnings = [str(e.user_message) for e in instance.all_logs(result.run_id) if e.level == logging.WARNING]
    assert any("MLflow tracking off" in w for w in warnings)


# -- the registry asset -------------------------------------------------------------------------
GATE = {"passed": True}


@dg.asset(name="grpo_checkpoint")
def stub_grpo_checkpoint() -> dict:
    return {"version": "stub"}


@dg.asset_check(asset=stub_grpo_checkpoint, blocking=True, name="gate")
def stub_gate() -> dg.AssetCheckResult:
    return dg.AssetCheckResult(passed=GATE["passed"])


def _eval_results_doc(root, checkpoint: str, score: float, seeds: str) -> dict:
    model_dir = root / f"model-{checkpoint}"
    model_dir.mkdir(exist_ok=True)
    (model_dir / "model.safetensors").write_bytes(b"weights " + checkpoint.encode())

    def agent(s):
        return {"final_score": s, "recovery": 0.5, "belief_mae": 0.2, "invalid_rate": 0.0,
                "by_grader": {"v3": {"final_score": s}, "v2": {"final_score": s + 0.1}}}

    doc = {"grader": "v3", "graders": ["v3", "v2"], "env_version": "env-test",
           "provenance": {"grpo_checkpoint_version": checkpoint, "sft_checkpoint_version": f"sft-{checkpoint}",
                          "grpo_checkpoint": str(model_dir), "sft_checkpoint": str(model_dir), "base_model": "tiny",
                          "sampling": {"temperature": 0.0}, "headline_student": "student_grpo",
                          "eval_rollouts_version": f"rollouts-{checkpoint}"},
           "conditions": {"continuous": {"seeds": seeds, "agents": {"student_grpo": agent(score),
                                                                     "student_sft": agent(score - 0.05)}}}}
    path = root / f"eval-{checkpoint}-{seeds}.json"
    path.write_text(json.dumps(doc))
    return {"json": str(path), "version": f"{checkpoint}-{seeds}", "mlflow_run_id": None}


def test_registry_promotes_a_better_student_and_refuses_a_worse_one(instance, mlflow_store, tmp_path, monkeypatch):
    from rhythm_pipeline.defs.assets import registry

    evaluation = {}

    @dg.asset(name="eval_results", deps=[stub_grpo_checkpoint])
    def stub_eval_results() -> dict:
        return _eval_results_doc(tmp_path, *evaluation["next"])

    model = f"rhythm-student-test-{tmp_path.name}"
    defs = dg.Definitions(assets=[stub_grpo_checkpoint, stub_eval_results, registered_student], asset_checks=[stub_gate],
                          resources={"tracking": TrackingResource(tracking_uri=mlflow_store, registered_model=model),
                                     "artifacts": artifact_store_from_env()})
    job = defs.resolve_implicit_global_asset_job_def()
    monkeypatch.setattr(registry, "code_location", lambda: defs)  # the stub lineage is this code location

    def register(checkpoint: str, score: float, seeds: str = "0-3", gate: bool = True):
        GATE["passed"], evaluation["next"] = gate, (checkpoint, score, seeds)
        if not gate:  # a failed blocking check stops its run; the evaluation comes in a later run
            job.execute_in_process(instance=instance, asset_selection=[dg.AssetKey("grpo_checkpoint")],
                                   raise_on_error=False)
        selection = None if gate else [dg.AssetKey("eval_results"), dg.AssetKey("registered_student")]
        result = job.execute_in_process(instance=instance, asset_selection=selection)
        return {k: getattr(v, "value", v) for k, v in _metadata(result, "registered_student").items()}

    first = register("a", 0.50)
    assert (first["decision"], first["alias"], first["model_version"]) == ("promoted", "champion", "1")
    worse = register("b", 0.45)
    assert (worse["decision"], worse["alias"]) == ("candidate", "candidate")
    assert worse["comparison"]["champion_score"] == 0.5 and worse["comparison"]["difference"] == pytest.approx(-0.05)
    gated = register("c", 0.70, gate=False)
    assert gated["decision"] == "candidate" and gated["comparison"]["candidate_score"] == 0.7
    assert gated["blocking_checks"]["grpo_checkpoint.gate"]["passed"] is False
    better = register("e", 0.60)
    assert (better["decision"], better["model_version"]) == ("promoted", "4")
    again = register("e", 0.55, seeds="8-11")  # the champion re-evaluated on new seeds: same version
    assert (again["decision"], again["model_version"], again["new_version"]) == ("unchanged", "4", False)

    client = _client(mlflow_store)
    aliases = client.get_registered_model(model).aliases
    assert aliases == {"champion": 4, "candidate": 3}
    champion = client.get_model_version_by_alias(model, "champion")
    assert champion.tags["checkpoint_version"] == "e" and champion.tags["grader"] == "v3"
    assert champion.tags["score.continuous"] == "0.5500" and champion.tags["recovery.continuous"] == "0.5000"
    assert champion.tags["lineage.eval_rollouts_version"] == "rollouts-e"
    assert len([t for t in champion.tags if t.startswith("eval.")]) == 4  # 2 seed windows x (v3, v2)
    files = {a.path for a in client.list_artifacts(champion.run_id, "model")}
    assert files == {"model/model.safetensors"}


# -- end to end ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_lineage_tracks_every_stage_and_registers_the_best_student(instance):
    from rhythm_core.tracking import local_store_uri
    from rhythm_pipeline.definitions import defs
    from rhythm_pipeline.settings import artifact_root
    from tests.test_pipeline_training import SMALL

    config = {"ops": {
        "sft_checkpoint": {"config": {"max_steps": 10, "short_context_steps": 0}},
        "grpo_checkpoint": SMALL["ops"]["grpo_checkpoint"],
        "eval_rollouts": {"config": {"continuous_seeds": "0-3", "ood_seeds": "10000-10001",
                                     "discrete3_seeds": "20000-20002", "max_new_tokens": 48}},
    }}
    from rhythm_pipeline.ops import run_lineage

    lineage = run_lineage(defs, instance, shards=["1000-1007"], window="0", run_config=config, log=lambda _: None)
    assert lineage["success"]
    run_ids = [r["run_id"] for r in lineage["runs"]]
    registered = instance.get_latest_materialization_event(dg.AssetKey("registered_student")).asset_materialization
    meta = {k: getattr(v, "value", v) for k, v in registered.metadata.items()}
    # every blocking check passed, but 10 SFT steps do not beat the heuristic: registered as a candidate
    assert meta["decision"] == "candidate" and meta["alias"] == "candidate"
    assert meta["reason"].startswith("below the references' floor: ")
    # the blocking checks of every asset it comes from: each artifact's files as published, and the data's
    # (the window's, checked again on its files; each teacher shard's are the dataset's to verify as it reads)
    unchanged = {f"{asset}.files_unchanged" for asset in ("sft_dataset", "sft_checkpoint", "grpo_checkpoint")}
    assert set(meta["blocking_checks"]) == unchanged | {"sft_dataset.sft_dataset_has_no_eval_seeds",
                                                        "grpo_checkpoint.grpo_not_worse_than_sft",
                                                        "eval_rollouts[0].files_unchanged",
                                                        "eval_results[0].files_unchanged"}
    assert all(c["passed"] for c in meta["blocking_checks"].values())

    with dg.build_asset_context(instance=instance) as context:  # the store under this instance's storage
        uri = local_store_uri(artifact_root(context))
    client = _client(uri)
    runs = {r.data.tags["dagster.asset_key"]: r for r in client.search_runs(
        [client.get_experiment_by_name("rhythm").experiment_id])
        if r.data.tags.get("dagster.run_id") in run_ids}
    assert set(runs) == {"sft_checkpoint", "grpo_checkpoint", "eval_results"}
    assert all(r.info.status == "FINISHED" for r in runs.values())
    assert [m.step for m in client.get_metric_history(runs["sft_checkpoint"].info.run_id, "loss")] == [5, 10]
    assert client.get_metric_history(runs["grpo_checkpoint"].info.run_id, "reward")
    evaluation = runs["eval_results"].data.tags
    assert evaluation["rhythm.student_grpo.mlflow_run_id"] == runs["grpo_checkpoint"].info.run_id
    assert evaluation["rhythm.student_sft.mlflow_run_id"] == runs["sft_checkpoint"].info.run_id
    registered = client.get_model_version_by_alias("rhythm-student", "candidate")
    stage = registered.tags["stage"]
    assert registered.run_id == runs[f"{stage}_checkpoint"].info.run_id  # the model is logged into its training run
    assert registered.tags["lineage.sft_dataset_version"] == runs["sft_checkpoint"].data.tags["dagster.upstream.sft_dataset"]
