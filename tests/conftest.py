import os
from pathlib import Path

# A pytest-xdist worker shares the cores with the others: one torch / BLAS thread each (set before
# numpy or torch start their pools), so that two workers on two cores do not run four spinning
# threads. Children a test starts inherit it, except where the code under test sizes their threads.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_name, "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from rhythm_core.agents.rollout import rollout  # noqa: E402
from rhythm_core.data.sft_dataset import build_sft_dataset, save_sft_dataset  # noqa: E402
from rhythm_core.teacher.run import run_teacher  # noqa: E402
from rhythm_core.teacher.settings import TeacherSettings  # noqa: E402
from rhythm_core.teacher.trajectories import read_trajectories  # noqa: E402


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


def built_once(tmp_path_factory, name: str, build):
    """`build(folder)`'s JSON result, computed once per test run however many xdist workers ask: the
    first builds under a file lock in the run's shared temporary folder, the others read its record."""
    import json

    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "built-once"
    shared.mkdir(parents=True, exist_ok=True)
    record = shared / f"{name}.json"
    with FileLock(str(shared / f"{name}.lock")):
        if not record.exists():
            folder = shared / name
            folder.mkdir()
            record.write_text(json.dumps(build(folder)))
    return json.loads(record.read_text())


# A short-history teacher dataset and a tiny SFT student trained on it, shared by the training and
# evaluation tests (built once per test run, whichever worker asks first).
def _short_dataset(root: Path) -> str:
    run_teacher(TeacherSettings(), "continuous", range(1000, 1024), root / "teacher.jsonl")
    full = build_sft_dataset(read_trajectories(root / "teacher.jsonl").records, validation_fraction=0.15,
                             prompt_format="table", reasoning="full")
    short = full.filter(lambda row: row["step"] < 8)
    save_sft_dataset(short, root / "sft", {"note": "first 8 steps of each episode"})
    return str(root)


@pytest.fixture(scope="session")
def short_dataset(tmp_path_factory):
    return Path(built_once(tmp_path_factory, "short_dataset", _short_dataset))


@pytest.fixture(scope="session")
def sft_result(short_dataset, tmp_path_factory):
    from rhythm_core.training.sft import SFTRunConfig, run_sft

    def train(out: Path):
        logs = []
        result = run_sft(SFTRunConfig(max_steps=150, short_context_steps=0, learning_rate=3e-3,
                                      per_device_train_batch_size=8, logging_steps=10),
                         short_dataset / "sft", out, on_log=logs.append)
        return [result, logs]

    result, logs = built_once(tmp_path_factory, "sft_result", train)
    return result, logs


def add_shards(instance, *shards: str) -> None:
    """Add teacher shards to the instance's `teacher_shards` partitions (what `rhythm shards add` does)."""
    known = set(instance.get_dynamic_partitions("teacher_shards"))
    instance.add_dynamic_partitions("teacher_shards", [s for s in shards if s not in known])


def materialize_shard(assets, instance, shard: str, **kwargs):
    """`dg.materialize` of `assets` for one teacher shard (added to the instance first): the shard's
    teacher step, and the unpartitioned assets among `assets` over every published shard."""
    import dagster as dg

    add_shards(instance, shard)
    return dg.materialize(assets, instance=instance, partition_key=shard, **kwargs)


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
