import numpy as np
import pytest

from rhythm_core.agents.rollout import rollout
from rhythm_core.data.sft_dataset import build_sft_dataset, save_sft_dataset
from rhythm_core.teacher.run import run_teacher
from rhythm_core.teacher.settings import TeacherSettings
from rhythm_core.teacher.trajectories import read_trajectories


@pytest.fixture(scope="session")
def rollouts():
    """Cached rollouts keyed by (agent name, condition, first seed, count)."""
    from rhythm_core.agents import get_agent

    cache = {}

    def get(agent: str, condition: str = "continuous", first: int = 0, count: int = 200):
        key = (agent, condition, first, count)
        if key not in cache:
            cache[key] = rollout(get_agent(agent), condition, np.arange(first, first + count))
        return cache[key]

    return get


# A short-history teacher dataset and a tiny SFT student trained on it, shared by the training and
# evaluation tests (about 30 s on the CPU, built once per session).
@pytest.fixture(scope="session")
def short_dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("training")
    run_teacher(TeacherSettings(), "continuous", range(1000, 1024), root / "teacher.jsonl")
    full = build_sft_dataset(read_trajectories(root / "teacher.jsonl").records, validation_fraction=0.15,
                             prompt_format="table", reasoning="full")
    short = full.filter(lambda row: row["step"] < 8)
    save_sft_dataset(short, root / "sft", {"note": "first 8 steps of each episode"})
    return root


@pytest.fixture(scope="session")
def sft_result(short_dataset):
    from rhythm_core.training.sft import SFTRunConfig, run_sft

    logs = []
    result = run_sft(SFTRunConfig(max_steps=150, short_context_steps=0, learning_rate=3e-3, per_device_train_batch_size=8,
                                  logging_steps=10),
                     short_dataset / "sft", short_dataset / "sft_out", on_log=logs.append)
    return result, logs




@pytest.fixture
def instance(tmp_path, monkeypatch):
    """A temporary Dagster instance; artifacts go under its storage directory."""
    import dagster as dg

    monkeypatch.delenv("RHYTHM_ARTIFACTS", raising=False)
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as inst:
        yield inst


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A real S3 server (SeaweedFS on 127.0.0.1), one per test module."""
    from tests.s3_server import seaweedfs

    with seaweedfs(tmp_path_factory.mktemp("seaweedfs")) as server:
        yield server


@pytest.fixture
def store(s3, tmp_path, monkeypatch):
    """An object store on a bucket of its own, its cache under tmp_path, the AWS variables set."""
    import uuid

    from rhythm_core.store import open_store

    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    bucket = s3.make_bucket(f"rhythm-{uuid.uuid4().hex[:10]}")
    opened = open_store(f"s3://{bucket}/artifacts", default_root=tmp_path / "root", cache=tmp_path / "cache")
    opened.check()
    return opened
