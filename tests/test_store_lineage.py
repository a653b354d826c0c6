"""The whole lineage with its artifacts on a real S3 server (SeaweedFS on 127.0.0.1), the way pods
without a shared volume run it: each piece a run of `dagster job execute` on the multiprocess executor,
every step in a process of its own whose local cache starts empty (RHYTHM_ARTIFACT_CACHE with `{pid}`),
none of them a Dagster process that loads a model, at the smallest settings that exercise every stage.
It must give the scores, checks and checkpoint versions a local root gives (the lineage's runs in one
process, `rhythm_pipeline.ops lineage`), pass every blocking check, write nothing under the local root
but caches, and re-grade from the store alone. And the way an operator runs it (issue 79): steps in one
process, the default cache shared by all of them, a bucket and prefix of the operator's; the SFT
student's version must be the local root's there too."""

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import dagster as dg
import pytest

from rhythm_core.store import ARTIFACTS_VAR, CACHE_VAR, sha256_file
from rhythm_core.training.publish import PLAY_FILES
from tests.s3_server import seaweedfs

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]


def _home(path: Path) -> Path:
    path.mkdir(parents=True)
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", path / "dagster.yaml")
    return path


def _run(module_args: list[str], env: dict, timeout: int = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *module_args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _summary(home: Path) -> dict:
    import dagster as dg

    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs = instance.get_runs()
        latest = {}
        for key in ("sft_checkpoint", "grpo_checkpoint", "eval_results"):
            event = instance.get_latest_materialization_event(dg.AssetKey(key))
            latest[key] = event.asset_materialization
        checks = {}
        for record in [r for run in runs for r in instance.all_logs(run.run_id)]:
            event = record.dagster_event
            if event is not None and event.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION:
                data = event.event_specific_data
                checks[f"{data.asset_key.to_user_string()}.{data.check_name}"] = (data.passed, data.severity.value)
    scores = latest["eval_results"].metadata["scores"].value
    return {"sft": latest["sft_checkpoint"].tags["dagster/data_version"],
            "grpo": latest["grpo_checkpoint"].tags["dagster/data_version"], "scores": scores, "checks": checks,
            "artifact_path": latest["eval_results"].metadata["artifact_path"].value,
            "status": sorted({r.status.value for r in runs})}


def _events(home: Path) -> list[dict]:
    with dg.DagsterInstance.from_config(str(home)) as instance:
        records = [r for run in instance.get_runs() for r in instance.all_logs(run.run_id)]
    return [{"type": r.dagster_event.event_type_value if r.dagster_event else "LOG", "step": r.step_key,
             "message": r.user_message} for r in records]


def test_the_lineage_on_s3_with_empty_caches_matches_a_local_root_and_regrades_from_the_store(tmp_path):
    from rhythm_pipeline.definitions import defs
    from tests.partitioned import execute_lineage_cli
    from tests.test_pipeline_training import SMALL, SMALL_SHARDS

    base = {k: v for k, v in os.environ.items() if not k.startswith(("RHYTHM_", "AWS_"))}
    local_home = _home(tmp_path / "local")
    done = _run(["rhythm_pipeline.ops", "lineage", "--shards", SMALL_SHARDS[0], "--window", "0", "--config",
                 json.dumps(SMALL)], {**base, "DAGSTER_HOME": str(local_home)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    local = _summary(local_home)

    with seaweedfs(tmp_path / "seaweedfs") as s3:
        bucket = s3.make_bucket(f"rhythm-{uuid.uuid4().hex[:8]}")
        store_home = _home(tmp_path / "s3home")
        caches = tmp_path / "caches"
        env = {**base, **s3.env, "DAGSTER_HOME": str(store_home), "RHYTHM_ARTIFACTS": f"s3://{bucket}/rhythm",
               "RHYTHM_ARTIFACT_CACHE": str(caches / "{pid}"), "RHYTHM_NO_MODEL_IN_DAGSTER": "1"}
        execute_lineage_cli(env, shards=SMALL_SHARDS, run_config=SMALL, cwd=REPO)
        remote = _summary(store_home)
        events = _events(store_home)

        # every step ran in a process of its own (the multiprocess executor) and succeeded, so every model
        # (training, GRPO's gate, the students' play) was loaded in a compute subprocess, never in Dagster's
        assert any("multiprocess executor" in (e["message"] or "") for e in events)
        started = {e["step"] for e in events if e["type"] == "STEP_START"}
        succeeded = {e["step"] for e in events if e["type"] == "STEP_SUCCESS"}
        assert started == succeeded and not [e for e in events if e["type"] == "STEP_FAILURE"]
        assert {"teacher_trajectories", "reeval_report", "sft_dataset", "sft_checkpoint", "grpo_checkpoint",
                "eval_rollouts.publish_eval_rollouts", "eval_results", "registered_student"} <= succeeded
        assert {key.name for key in defs.resolve_asset_graph().asset_check_keys} <= {
            name.split(".", 1)[1] for name in remote["checks"]}  # every check evaluated
        assert remote["status"] == ["SUCCESS"] and local["status"] == ["SUCCESS"], remote["checks"]
        assert all(passed for passed, severity in remote["checks"].values() if severity == "ERROR"), remote["checks"]
        assert remote["checks"] == local["checks"]
        assert (remote["sft"], remote["grpo"]) == (local["sft"], local["grpo"])
        assert remote["scores"] == local["scores"]
        assert remote["artifact_path"].startswith(f"s3://{bucket}/rhythm/eval_results/")
        assert not (store_home / "storage" / "rhythm").exists()  # nothing under the local root but caches
        assert len([p for p in caches.iterdir() if p.is_dir()]) >= 8  # a process, a cache, for every step
        listed = s3.filesystem().find(f"{bucket}/rhythm")
        for stage in ("teacher_trajectories", "sft_dataset", "sft_checkpoint", "grpo_checkpoint", "eval_rollouts",
                      "eval_results"):
            assert any(p.startswith(f"{bucket}/rhythm/{stage}/") and p.endswith(".rhythm-files.json")
                       for p in listed), stage
        assert not [p for p in listed if "/.staging-run-" in p]  # the play steps' shared files are gone

        shutil.rmtree(caches)  # another machine: nothing local at all
        regrade = _run(["rhythm_pipeline.ops", "run", "regrade", "--partition", "0"], {**env, "RHYTHM_GRADER": "v2"})
        assert regrade.returncode == 0, regrade.stdout[-3000:] + regrade.stderr[-3000:]
        assert json.loads(regrade.stdout.strip().splitlines()[-1])["success"]
        assert not (store_home / "storage" / "rhythm").exists()

        # A change on the store behind a warm cache: the next regrade fails naming the file.
        warm = {**env, "RHYTHM_GRADER": "v2", "RHYTHM_ARTIFACT_CACHE": str(tmp_path / "warm")}
        assert _run(["rhythm_pipeline.ops", "run", "regrade", "--partition", "0"], warm).returncode == 0  # fills the cache
        fs = s3.filesystem()
        record_key = next(p for p in listed if "/teacher_trajectories/" in p and p.endswith("/.rhythm-files.json"))
        record = json.loads(fs.cat_file(record_key))
        data = f"{record_key.rsplit('/', 1)[0]}/.rhythm-data/{record['data']}/trajectories.jsonl"
        original = fs.cat_file(data)
        fs.pipe_file(data, original.replace(b"}", b"} ", 1))
        failed = _run(["rhythm_pipeline.ops", "run", "regrade", "--partition", "0"], warm)
        assert failed.returncode == 1
        assert "trajectories.jsonl: changed after it was published" in failed.stdout + failed.stderr


# The lineage through SFT, small: both SFT phases (short context, then whole weeks) on 8 teacher weeks.
THROUGH_SFT = {"ops": {"sft_checkpoint": {"config": {"max_steps": 4, "short_context_steps": 2}}}}


def _through_sft(home: Path) -> tuple[dict, Path]:
    """Materialize the lineage through sft_checkpoint as the demo runs it (every step in this
    process) on an instance under `home`; the sft_dataset and sft_checkpoint values, and the
    instance's storage folder."""
    from rhythm_pipeline.defs.assets.data import reeval_report, sft_dataset, teacher_trajectories
    from rhythm_pipeline.defs.assets.training import sft_checkpoint
    from rhythm_pipeline.defs.resources import ArtifactStoreResource, ComputeResource, HubResource, TeacherResource
    from rhythm_pipeline.defs.tracking import TrackingResource

    resources = {"teacher": TeacherResource(), "hub": HubResource(), "compute": ComputeResource(),
                 "tracking": TrackingResource(enabled=False), "artifacts": ArtifactStoreResource()}
    home.mkdir(parents=True)
    with dg.instance_for_test(temp_dir=str(home)) as instance:
        from tests.partitioned import materialize_lineage

        result = materialize_lineage([teacher_trajectories, reeval_report, sft_dataset, sft_checkpoint], instance,
                                     shards=("1000-1007",), resources=resources, run_config=THROUGH_SFT)
        assert result.success
        return ({key: result.output_for_node(key) for key in ("sft_dataset", "sft_checkpoint")},
                Path(instance.storage_directory()))


def _student_files(model_dir: Path) -> dict[str, str]:
    """What a checkpoint's version is made of, file by file (`publish.checkpoint_version`)."""
    names = [*(p.name for p in model_dir.glob("*.safetensors")), *PLAY_FILES]
    return {name: sha256_file(model_dir / name) for name in names if (model_dir / name).is_file()}


def test_sft_on_s3_with_the_shared_default_cache_under_any_bucket_and_prefix_has_the_local_version(tmp_path,
                                                                                                    monkeypatch):
    for name in [k for k in os.environ if k.startswith("AWS_")] + [ARTIFACTS_VAR, CACHE_VAR]:
        monkeypatch.delenv(name, raising=False)
    local, local_storage = _through_sft(tmp_path / "local")
    version = local["sft_checkpoint"]["version"]
    local_student = local_storage / "rhythm" / "sft_checkpoint" / version / "model"

    with seaweedfs(tmp_path / "seaweedfs") as s3:
        bucket = s3.make_bucket(f"ops-{uuid.uuid4().hex[:8]}")  # neither the bucket nor the prefix is `rhythm`
        for name, value in s3.env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv(ARTIFACTS_VAR, f"s3://{bucket}/lineage/team-a")  # no RHYTHM_ARTIFACT_CACHE: the default
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # as the operator's air-gapped cluster sets it (issue 84)
        remote, storage = _through_sft(tmp_path / "operator")
        published = s3.filesystem().exists(f"{bucket}/lineage/team-a/sft_checkpoint/{remote['sft_checkpoint']['version']}"
                                           "/.rhythm-files.json")

    assert published and remote["sft_checkpoint"]["path"].startswith(f"s3://{bucket}/lineage/team-a/sft_checkpoint/")
    assert not (storage / "rhythm").exists()  # every step published into and read from the shared default cache
    assert (remote["sft_dataset"]["version"], remote["sft_dataset"]["files_digest"]) == \
        (local["sft_dataset"]["version"], local["sft_dataset"]["files_digest"])
    student = storage / "rhythm-cache" / "sft_checkpoint" / remote["sft_checkpoint"]["version"] / "model"
    assert _student_files(student) == _student_files(local_student)  # the weights and the files that load them
    assert remote["sft_checkpoint"]["version"] == version
