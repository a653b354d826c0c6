"""Retries on a real store: a step whose artifact store goes down for a while is retried to success with
nothing played twice. (Pools on a real instance: tests/test_postgres_instance.py.)"""

import json
import threading
import time
import uuid
from pathlib import Path

import dagster as dg
import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]

def test_a_step_whose_store_goes_down_is_retried_to_success_and_plays_nothing_twice(tmp_path, monkeypatch):
    """The teacher's step on an object store that stops answering mid-step for some seconds: the step fails on
    the unreachable endpoint, Dagster retries it after its backoff, the retry finds the weeks already played
    (the work file) and publishes them: every seed once, and the shard's weeks counted once."""
    from rhythm_pipeline.defs.assets.data import teacher_trajectories
    from rhythm_pipeline.defs.resources import ArtifactStoreResource, TeacherResource
    from tests.conftest import materialize_shard
    from tests.s3_server import seaweedfs

    with seaweedfs(tmp_path / "seaweedfs") as s3:
        bucket = s3.make_bucket(f"rhythm-{uuid.uuid4().hex[:8]}")
        for name, value in s3.env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("RHYTHM_ARTIFACTS", f"s3://{bucket}/rhythm")
        monkeypatch.setenv("RHYTHM_ARTIFACT_CACHE", str(tmp_path / "cache"))
        (tmp_path / "dagster").mkdir()
        with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
            outcome = {}

            def materialize():
                outcome["result"] = materialize_shard(
                    [teacher_trajectories], instance, "1000-1063",
                    resources={"teacher": TeacherResource(backend="bayes"), "artifacts": ArtifactStoreResource()})

            worker = threading.Thread(target=materialize)
            worker.start()
            deadline = time.monotonic() + 300
            while not list((tmp_path / "cache").glob("teacher_trajectories/work/*.jsonl")):  # the teacher is playing
                assert time.monotonic() < deadline and worker.is_alive(), "the teacher never started"
                time.sleep(0.05)
            s3.stop()
            time.sleep(8)
            s3.start()
            worker.join(timeout=600)
        result = outcome["result"]
    assert result.success
    events = [e.event_type_value for e in result.all_events if e.step_key == "teacher_trajectories"]
    assert "STEP_UP_FOR_RETRY" in events and events[-1] == "STEP_SUCCESS"
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY")
    assert "did not answer" in failure.event_specific_data.error.to_string()
    meta = {k: getattr(v, "value", v) for k, v in result.asset_materializations_for_node("teacher_trajectories")[0]
            .metadata.items()}
    assert meta["episodes"] == 64 and meta["episodes_played"] + meta["episodes_resumed"] == 64
    lines = Path(result.output_for_node("teacher_trajectories")["path"].replace(
        f"s3://{bucket}/rhythm", str(tmp_path / "cache"))).read_text().splitlines()
    assert sorted(json.loads(line)["seed"] for line in lines) == list(range(1000, 1064))
