"""Hugging Face Jobs over the wire: the real `huggingface_hub.HfApi` against a local Hub and Jobs
server on 127.0.0.1 (tests/hub_server.py), which runs each submitted job script as a local process in
a throwaway venv with the shipped wheels installed. SFT, GRPO and the students' evaluation play run as
jobs and give the artifacts the local backend gives; a job that fails, is cancelled, times out or
loses its log stream ends with a clear error naming the job (or, for the stream, still succeeds), and
nothing is half-published."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest
from huggingface_hub import HfApi

from rhythm_core.compute.hf_jobs import HFJobError, HFJobSpec, run_job
from rhythm_core.compute.wheels import build_wheels
from rhythm_core.training.publish import train_and_publish
from rhythm_pipeline.defs.resources import ComputeResource
from tests.hub_server import serve
from tests.partitioned import materialize_lineage
from tests.test_pipeline_training import ALL, RESOURCES, SMALL, SMALL_SHARDS

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SFT = {"max_steps": 4, "short_context_steps": 0, "report_to": "none"}


def lineage(instance, compute, artifacts: Path, monkeypatch, server=None) -> dict:
    monkeypatch.setenv("RHYTHM_ARTIFACTS", str(artifacts))
    result = materialize_lineage(ALL, instance, shards=SMALL_SHARDS, resources={**RESOURCES, "compute": compute},
                                 run_config=SMALL, raise_on_error=False)
    assert result.success, "\n".join(f"--- job {j.labels}: {j.stage} {j.message}\n" + "\n".join(line.text for line in j.log[-30:])
                                      for j in (server.jobs.values() if server else []))
    return {e.asset_key.to_user_string(): e.event_specific_data.materialization
            for e in result.get_asset_materialization_events()}


def test_training_and_evaluation_run_as_jobs_with_the_local_backends_artifacts(tmp_path, monkeypatch):
    # One artifact root for both: the rollouts name the students' model folders, which are then the same
    # path when (and only when) the checkpoints are the same.
    with dg.DagsterInstance.ephemeral() as instance:
        local = lineage(instance, ComputeResource(), tmp_path / "artifacts", monkeypatch)
    with serve() as server, dg.DagsterInstance.ephemeral() as instance:
        compute = ComputeResource(backend="hf_jobs", hf_token=server.token, hf_endpoint=server.url,
                                  hf_flavor="cpu-basic", hf_max_usd=1.0)
        remote = lineage(instance, compute, tmp_path / "artifacts", monkeypatch, server)
        jobs = list(server.jobs.values())
        routes = {r.path.split("?")[0] for r in server.requests}
    for asset in ("sft_checkpoint", "grpo_checkpoint", "eval_rollouts", "eval_results"):
        assert remote[asset].tags["dagster/data_version"] == local[asset].tags["dagster/data_version"], asset
    # two training jobs and one play job per condition, every one over HTTP, every one completed
    assert sorted(j.labels["rhythm_stage"] for j in jobs) == ["grpo", "play", "play", "play", "sft"]
    assert {j.stage for j in jobs} == {"COMPLETED"}
    assert any(r.startswith("/api/jobs/alice") for r in routes) and any("/commit/" in r for r in routes)
    sft, rollouts = remote["sft_checkpoint"].metadata, remote["eval_rollouts"].metadata
    assert sft["compute"].value == "hf_jobs" and sft["hf_job_id"].value in server.jobs
    assert sft["hf_job_max_cost_usd"].value > 0 and sft["hf_job_cost_usd"].value >= 0
    assert "$0.01/h (HfApi.list_jobs_hardware)" in sft["hf_job_price"].value
    assert len(rollouts["hf_job_ids"].value) == 3 and rollouts["hf_job_max_cost_usd"].value > 0


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> str:
    from rhythm_core.data.stages import dataset_stage
    from rhythm_core.teacher.settings import TeacherSettings
    from rhythm_core.teacher.stage import teacher_stage

    root = tmp_path_factory.mktemp("data")
    return dataset_stage(teacher_stage(TeacherSettings(), "continuous", "1000-1007", root), root)["path"]


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> list[Path]:
    return build_wheels(REPO, tmp_path_factory.mktemp("wheels"))


def job(server, dataset, wheels, lines: list, config=SFT, **spec) -> dict:
    # run_job is what ComputeResource's hf_jobs backend calls to train; here with prebuilt wheels
    return run_job("sft", config, dataset_dir=dataset, provenance=None,
                   api=HfApi(endpoint=server.url, token=server.token),
                   spec=HFJobSpec(**{"flavor": "cpu-basic", **spec}), project_root=REPO, token=server.token,
                   log=lines.append, poll_interval=0.2, wheels=wheels)


def failed(server, dataset, wheels, root: Path, **kwargs) -> HFJobError:
    """The job's error, after the stage that ran it published nothing (no folder left behind)."""
    with pytest.raises(HFJobError) as info:
        train_and_publish(root, "sft_checkpoint", lambda staged: job(server, dataset, wheels, [], **kwargs))
    assert not (root / "sft_checkpoint").exists()
    error = info.value
    assert error.job_id in server.jobs and f"Hugging Face job {error.job_id} ended " in str(error)
    assert error.cost is not None and error.cost["billed_minutes"] >= 0
    return error


def test_a_job_that_fails_names_itself_and_publishes_nothing(tmp_path, dataset, wheels):
    with serve() as server:
        error = failed(server, dataset, wheels, tmp_path, config={**SFT, "no_such_field": 1})  # the job's SFTRunConfig refuses it
    assert "ended ERROR: Job failed with exit code" in str(error)
    assert any("Error" in line for line in error.log_tail)


def test_a_cancelled_job_names_itself_and_publishes_nothing(tmp_path, dataset, wheels):
    with serve(cancel_jobs_after_s=2.0) as server:
        error = failed(server, dataset, wheels, tmp_path)
    assert "ended CANCELED" in str(error)


def test_a_two_gpu_flavor_runs_the_training_entry_under_torchrun_on_two_processes(tmp_path, dataset, wheels):
    """On a10g-largex2 the job starts the entry through torchrun with 2 processes. The server runs jobs
    on this CPU, so a config the entry refuses ends the job as soon as both ranks have started."""
    with serve() as server:
        error = failed(server, dataset, wheels, tmp_path, config={**SFT, "no_such_field": 1}, flavor="a10g-largex2")
        submitted = server.jobs[error.job_id]
    assert submitted.flavor == "a10g-largex2" and "--processes=2" in submitted.command
    log = [line.text for line in submitted.log]
    assert any(" -m rhythm_core.compute.launch --processes=2 -m rhythm_core.training.entry " in line
               for line in log), log[-20:]
    assert any(" of 2 failed: TypeError: " in line and "no_such_field" in line for line in log), log[-20:]


def test_a_job_that_hits_its_timeout_says_so(tmp_path, dataset, wheels):
    with serve() as server:
        error = failed(server, dataset, wheels, tmp_path, timeout="3s")
    assert "it hit its timeout of 3 s" in str(error)


def test_a_job_that_prints_no_result_line_names_itself_and_publishes_nothing(tmp_path, dataset, wheels):
    from rhythm_core.compute.hf_jobs import JOB_RESULT_PREFIX

    with serve(drop_log_lines_with=JOB_RESULT_PREFIX.strip()) as server:
        error = failed(server, dataset, wheels, tmp_path)
    assert f"ended COMPLETED: (no status message) but printed no usable {JOB_RESULT_PREFIX.strip()} line" in str(error)


def test_a_lost_log_stream_still_gets_the_result(tmp_path, dataset, wheels):
    lines = []
    with serve(break_log_stream_after=3, log_stream_error_status=503) as server:
        record = job(server, dataset, wheels, lines)
    assert record["status"] == "COMPLETED" and record["result"]["steps"] == SFT["max_steps"]
    assert any("log stream of job" in line and "broke off" in line for line in lines)
    assert any(f"job {record['job_id']} billed" in line for line in lines)


def test_a_job_above_max_usd_is_refused_before_anything_is_uploaded(tmp_path, dataset, wheels):
    from rhythm_core.compute.costs import CostRefused

    with serve() as server:
        with pytest.raises(CostRefused, match=r"may cost up to \$3.00 .* above max_usd \$1.00"):
            run_job("sft", SFT, dataset_dir=dataset, provenance=None,
                    api=HfApi(endpoint=server.url, token=server.token),
                    spec=HFJobSpec(flavor="a10g-large", timeout="2h", max_usd=1.0), project_root=REPO,
                    token=server.token, log=print, wheels=wheels)
        assert not server.jobs and not any("/commit/" in r.path for r in server.requests)


def merged(base: dict, override: dict) -> dict:
    return {**base, **{k: merged(base.get(k, {}), v) if isinstance(v, dict) else v for k, v in override.items()}}


# rhythm_lineage_published's own config with only its sizes shrunk (the stand-in trains from random
# weights, so its answers are noise played out to the token budget) and the three services local.
PUBLISHED_SHARD = "1000-1003"
PUBLISHED_SMALL = {"ops": {
    "sft_dataset": {"config": {"teacher_shards": [PUBLISHED_SHARD]}},
    "sft_checkpoint": {"config": {"max_steps": 2, "report_to": "mlflow"}},
    "grpo_checkpoint": {"config": {"max_steps": 1, "teacher_prompts": 8, "student_episodes": 0, "validation_weeks": 2,
                                   "max_completion_length": 16}},
    "eval_rollouts": {"config": {"continuous_seeds": "0-1", "ood_seeds": "10000", "discrete3_seeds": "20000",
                                 "max_new_tokens": 16}},
}}


def test_the_published_recipe_runs_as_jobs_on_a_qwen2_shaped_stand_in(tmp_path, monkeypatch):
    """The published recipe's three jobs as Dagster defines them (the API teacher on its shard; Qwen2.5-3B-Instruct
    with LoRA trained, then evaluated, as a10g-large jobs under a $5 cap), against the local Hub/Jobs and OpenAI
    servers: the jobs download "Qwen/Qwen2.5-3B-Instruct" from the Hub (a random-weight Qwen2 model
    with Qwen2's tokenizer, rhythm_core/training/qwen2_standin.py), train its LoRA adapter, play it, and the run
    records what each job cost. No process that imported Dagster loads a model."""
    import datasets

    from rhythm_core.data.stages import dataset_stage
    from rhythm_core.teacher.settings import TeacherSettings
    from rhythm_core.teacher.stage import teacher_stage
    from rhythm_core.training.qwen2_standin import REPO_ID, build_qwen2_standin
    from rhythm_core.training.tiny import corpus_from_dataset
    from rhythm_pipeline.definitions import defs
    from rhythm_pipeline.defs.jobs import PUBLISHED_CONFIG, published_evaluation, published_teacher
    from tests.openai_server import serve as serve_openai

    data = dataset_stage(teacher_stage(TeacherSettings(), "continuous", "1000-1001", tmp_path / "corpus"), tmp_path / "corpus")
    standin = build_qwen2_standin(tmp_path / "standin", corpus_from_dataset(datasets.load_from_disk(data["path"])["train"]))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-real")
    monkeypatch.setenv("RHYTHM_NO_MODEL_IN_DAGSTER", "1")
    monkeypatch.delenv("RHYTHM_ARTIFACTS", raising=False)
    (tmp_path / "dagster").mkdir()
    with serve(orgs=("Qwen",)) as hub, serve_openai(params="reasoning") as teacher, \
            dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        monkeypatch.setenv("HF_TOKEN", hub.token)
        api = HfApi(endpoint=hub.url, token=hub.token)
        api.create_repo(REPO_ID, private=False)
        api.upload_folder(repo_id=REPO_ID, folder_path=str(standin))
        instance.add_dynamic_partitions("teacher_shards", [PUBLISHED_SHARD])
        on_hub = {"resources": {"compute": {"config": {"hf_endpoint": hub.url}}}}
        small = {k: v for k, v in PUBLISHED_SMALL["ops"].items() if k != "eval_rollouts"}
        runs = [("published_teacher", merged(published_teacher.config, {"resources": {
                     "teacher": {"config": {"base_url": teacher.base_url}}}}), PUBLISHED_SHARD),
                ("rhythm_lineage_published", merged(merged(PUBLISHED_CONFIG, {"ops": small}), on_hub), None),
                ("published_evaluation", merged(merged(published_evaluation.config, on_hub), {"ops": {
                    "eval_rollouts": PUBLISHED_SMALL["ops"]["eval_rollouts"]}}), "0")]
        results = []
        for job, config, partition in runs:
            results.append(defs.resolve_job_def(job).execute_in_process(run_config=config, instance=instance,
                                                                         partition_key=partition, raise_on_error=False))
            if not results[-1].success:
                break
        jobs = list(hub.jobs.values())
        assert all(r.success for r in results) and len(results) == 3, "\n".join(
            f"--- job {j.labels}: {j.stage} {j.message}\n" + "\n".join(line.text for line in j.log[-40:]) for j in jobs)
        downloads = [r for r in hub.requests if r.method == "GET" and r.path.startswith(f"/{REPO_ID}/resolve/")
                     and r.path.endswith("/model.safetensors")]
    events = {e.asset_key.to_user_string(): e.event_specific_data.materialization
              for result in results for e in result.get_asset_materialization_events()}
    assert sorted(j.labels["rhythm_stage"] for j in jobs) == ["grpo", "play", "play", "play", "sft"]
    assert {j.stage for j in jobs} == {"COMPLETED"} and {j.flavor for j in jobs} == {"a10g-large"}
    # every job fetched the base model from the Hub (SFT its base, GRPO and the play jobs the adapter's)
    assert len(downloads) == len(jobs)
    sft = Path(events["sft_checkpoint"].metadata["artifact_path"].value)
    adapter = json.loads((sft / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == REPO_ID and adapter["r"] == 16
    assert json.loads((sft / "tokenizer_config.json").read_text())["tokenizer_class"] == "Qwen2Tokenizer"
    trained = events["sft_checkpoint"].metadata  # whole conversations: no answer cut to a max_length
    assert trained["max_length"].value == trained["longest_conversation_tokens"].value
    assert trained["conversations_over_max_length"].value == 0
    # the teacher was the API model as configured (a reasoning model at effort "low")
    asked = [r.body for r in teacher.requests if r.path.endswith("/chat/completions")]
    assert asked and {(b["model"], b.get("reasoning_effort")) for b in asked} == {("gpt-5.4", "low")}
    # the cost each job may run up (a10g-large at the Hub's $1.50/h times its timeout, under the $5 cap)
    # and what it was billed, in the asset metadata and the MLflow runs
    for asset in ("sft_checkpoint", "grpo_checkpoint", "eval_rollouts"):
        meta = events[asset].metadata
        assert 0 < meta["hf_job_max_cost_usd"].value <= 5.0 and meta["hf_job_cost_usd"].value >= 0, asset
    for asset in ("sft_checkpoint", "grpo_checkpoint"):
        assert events[asset].metadata["hf_job_price"].value == "$1.50/h (HfApi.list_jobs_hardware)", asset
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/dagster/storage/rhythm/mlflow/mlflow.db")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    costs = {r.data.tags.get("rhythm.asset"): r.data.metrics.get("hf_job_max_cost_usd") for r in runs}
    assert costs["sft_checkpoint"] == events["sft_checkpoint"].metadata["hf_job_max_cost_usd"].value
    assert costs["eval_results"] == events["eval_rollouts"].metadata["hf_job_max_cost_usd"].value
    # the random-weight student loses to the heuristic: registered, but never the champion
    registered = events["registered_student"].metadata
    assert registered["alias"].value == "candidate" and "below the references' floor" in registered["reason"].value
    results = json.loads(Path(events["eval_results"].metadata["artifact_path"].value).read_text())
    for condition in ("continuous", "ood", "discrete3"):
        assert {"student_sft", "student_grpo", "heuristic"} <= set(results["conditions"][condition]["agents"])
