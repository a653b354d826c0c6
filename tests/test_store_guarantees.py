"""What the object store guarantees when many machines share it (a real S3 server, SeaweedFS on
127.0.0.1): a step re-materialized elsewhere, two writers of one version, processes sharing a cache,
a changed cached copy, a forged record, a change on the store behind a warm cache, rotated
settings in a long-lived process, and a teacher step resumed on another machine."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rhythm_core.store import (
    FILES_MANIFEST,
    ArtifactChanged,
    ObjectStore,
    StoreUnavailable,
    publish_dir,
    read_record,
    staging,
    verify_artifact,
)

REPO = Path(__file__).resolve().parents[1]
VERSION = "0123456789abcdef"


def _version(cache: Path, files: dict, name: str = VERSION) -> Path:
    """A version published into a cache as a stage publishes it."""
    with staging(cache / "stage") as staged:
        for rel, text in files.items():
            (staged / rel).parent.mkdir(parents=True, exist_ok=True)
            (staged / rel).write_bytes(text if isinstance(text, bytes) else text.encode())
        return publish_dir(staged, cache / "stage" / name, kind="checkpoint", published=True, overwrite=True)


def _object(store: ObjectStore, url: str, name: str) -> str:
    """The key of a published file, through the version's record."""
    return f"{store._data_key(url, store._record(url))}/{name}"


def _python(code: str, env: dict, timeout: int = 120) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, env={**os.environ, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_step_materialized_again_elsewhere_with_other_metadata_adopts_the_published_version(store, tmp_path):
    first = _version(store.cache, {"model.bin": "weights\n", "result.json": '{"wall_s": 12.5}\n'})
    url = store.publish(first).url
    elsewhere = ObjectStore(store.url, tmp_path / "other-pod")  # another machine, an empty cache
    second = _version(elsewhere.cache, {"model.bin": "weights\n", "result.json": '{"wall_s": 14.1}\n'})
    value = elsewhere.publish_value({"path": str(second), "version": VERSION, "files_digest": read_record(second)["digest"]})

    published = read_record(first)["digest"]
    assert value["files_digest"] == published and value["kept_published"] is True
    assert "already published" in value["adopted"] and "kept" in value["adopted"]
    assert (second / "result.json").read_text() == '{"wall_s": 12.5}\n'  # this pod reads the published copy
    assert store.verify(url, published) == elsewhere.verify(url, published) == published
    assert ObjectStore(store.url, tmp_path / "third").fetch(f"{url}/result.json").read_text() == '{"wall_s": 12.5}\n'


WRITER = """
    import json, os, sys, time
    from pathlib import Path
    from rhythm_core.store import ObjectStore
    store = ObjectStore(sys.argv[1], Path(sys.argv[2]))
    while not os.path.exists(sys.argv[3]):  # every writer starts at once
        time.sleep(0.005)
    published = store.publish(Path(sys.argv[2]) / "stage" / sys.argv[4])
    print(json.dumps({"digest": published.digest, "adopted": published.adopted}))
"""


def test_two_writers_of_one_version_at_once_always_leave_a_version_that_verifies(store, tmp_path, s3):
    for round_ in range(3):
        name = f"{round_:016x}"
        caches = [tmp_path / f"round{round_}-writer{w}" for w in range(2)]
        digests = []
        for w, cache in enumerate(caches):  # same version, other files (and sizes): a real race on every key
            folder = _version(cache, {f"f{i}.bin": os.urandom(200_000 + 1000 * w) for i in range(5)}, name=name)
            digests.append(read_record(folder)["digest"])
        go = tmp_path / f"go-{round_}"
        writers = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(WRITER), store.url, str(cache), str(go), name],
                                    cwd=REPO, env={**os.environ, **s3.env}, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True) for cache in caches]
        time.sleep(1.5)
        go.touch()
        outcomes = []
        for writer in writers:
            out, err = writer.communicate(timeout=120)
            assert writer.returncode == 0, err
            outcomes.append(json.loads(out.strip().splitlines()[-1]))
        url = f"{store.url}/stage/{name}"
        winner = store._record(url)["digest"]
        assert winner in digests
        assert [o["digest"] for o in outcomes] == [winner, winner]  # both end with the published version
        assert sum(o["adopted"] is not None for o in outcomes) == 1, outcomes  # the loser says what happened
        assert store.verify(url, winner) == winner
        for cache in caches:  # and each writer's copy is the published one
            assert verify_artifact(cache / "stage" / name, winner) == winner
        data = f"{store._key(url)}/.rhythm-data/"
        uploads = {key[len(data):].split("/", 1)[0] for key in store.fs.find(data)}
        assert uploads == {store._record(url)["data"]}  # the loser removed its uploads


FETCHER = """
    import hashlib, json, os, sys, time
    from pathlib import Path
    from rhythm_core.store import ObjectStore
    store = ObjectStore(sys.argv[1], Path(sys.argv[2]))
    while not os.path.exists(sys.argv[3]):
        time.sleep(0.005)
    local = store.fetch(sys.argv[4])
    record = json.loads((local / ".rhythm-files.json").read_text())
    for name, sha in record["files"].items():
        assert hashlib.sha256((local / name).read_bytes()).hexdigest() == sha, name
    print("whole")
"""


def test_processes_fetching_one_version_into_one_cache_all_read_whole_files(store, tmp_path, s3):
    folder = _version(store.cache, {f"part{i}.bin": os.urandom(400_000) for i in range(8)})
    url = store.publish(folder).url
    shared = tmp_path / "shared-cache"
    for round_ in range(3):
        (shared / "stage").mkdir(parents=True, exist_ok=True)
        killed = shared / "stage" / f".fetch-{VERSION}-killed"  # what a fetch killed midway left
        killed.mkdir()
        go = tmp_path / f"go-{round_}"
        fetchers = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(FETCHER), store.url, str(shared), str(go), url],
                                     cwd=REPO, env={**os.environ, **s3.env}, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True) for _ in range(4)]
        time.sleep(1.5)
        go.touch()
        for fetcher in fetchers:
            out, err = fetcher.communicate(timeout=120)
            assert fetcher.returncode == 0 and out.strip() == "whole", err
        assert not killed.exists() and not list((shared / "stage").glob(".fetch-*"))
        if round_ == 1:
            (shared / "stage" / VERSION / "part3.bin").write_bytes(b"edited")  # the next round repairs it


def test_a_changed_cached_copy_is_never_served_and_the_check_covers_it(store, tmp_path):
    folder = _version(store.cache, {"a.txt": "alpha\n", "sub/b.txt": "beta\n"})
    url = store.publish(folder).url
    reader = ObjectStore(store.url, tmp_path / "reader")
    copy = reader.fetch(f"{url}/sub/b.txt")
    copy.write_text("edited\n")
    with pytest.raises(ArtifactChanged, match=r"sub/b.txt: changed after it was published.*local copy"):
        reader.verify(url)
    assert reader.fetch(f"{url}/sub/b.txt").read_text() == "beta\n"  # fetched again, not served
    copy.write_text("edited again\n")
    in_another_process = subprocess.run(
        [sys.executable, "-c", f"from pathlib import Path; from rhythm_core.store import ObjectStore; "
                               f"print(ObjectStore({store.url!r}, Path({str(reader.cache)!r})).fetch({url + '/sub/b.txt'!r}).read_text())"],
        cwd=REPO, env=os.environ.copy(), capture_output=True, text=True)
    assert in_another_process.stdout == "beta\n\n", in_another_process.stderr
    assert reader.verify(url) == read_record(folder)["digest"]


def test_a_forged_record_is_refused_on_the_store_and_locally(store, tmp_path):
    folder = _version(store.cache, {"a.txt": "alpha\n", "b.txt": "beta\n"})
    url = store.publish(folder).url
    digest = read_record(folder)["digest"]
    import hashlib

    forged = store._record(url)
    store.fs.pipe_file(_object(store, url, "b.txt"), b"forged\n")
    forged["files"]["b.txt"] = hashlib.sha256(b"forged\n").hexdigest()  # the list edited, the digest kept
    store.fs.pipe_file(f"{store._key(url)}/{FILES_MANIFEST}", json.dumps(forged).encode())
    for read in (lambda: ObjectStore(store.url, tmp_path / "r").fetch(url, digest), lambda: store.verify(url, digest)):
        with pytest.raises(ArtifactChanged, match=r"\.rhythm-files\.json: its file list gives digest .* claims"):
            read()

    local = _version(tmp_path / "local", {"a.txt": "alpha\n", "b.txt": "beta\n"})
    record = read_record(local)
    (local / "b.txt").write_text("forged\n")
    record["files"]["b.txt"] = hashlib.sha256(b"forged\n").hexdigest()
    (local / FILES_MANIFEST).write_text(json.dumps(record))
    with pytest.raises(ArtifactChanged, match="the record was changed after it was published"):
        verify_artifact(local / "b.txt", digest)


def test_a_change_on_the_store_is_not_hidden_by_a_warm_cache(store, tmp_path):
    folder = _version(store.cache, {"trajectories.jsonl": "{}\n" * 100})
    url = store.publish(folder).url
    reader = ObjectStore(store.url, tmp_path / "warm")
    reader.fetch(url)
    store.fs.pipe_file(_object(store, url, "trajectories.jsonl"), b"{}\n" * 99 + b'{"x":1}\n')
    with pytest.raises(ArtifactChanged, match=r"trajectories.jsonl: changed after it was published"):
        reader.fetch(url)
    store.fs.rm(_object(store, url, "trajectories.jsonl"))
    with pytest.raises(ArtifactChanged) as missing:
        reader.fetch(url)
    assert str(missing.value) == (f"{url}/trajectories.jsonl: missing from the store (the version's record names "
                                  f"it, sha256 {read_record(folder)['files']['trajectories.jsonl']})")
    assert store.list_versions("stage") == []  # a version missing an object is not listed


def test_a_dead_endpoint_mid_fetch_is_one_line_naming_the_variable(store, tmp_path, monkeypatch):
    url = store.publish(_version(store.cache, {"a.txt": "alpha\n"})).url
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    reader = ObjectStore(store.url, tmp_path / "r", storage_options={"config_kwargs": {"retries": {"max_attempts": 1},
                                                                                          "connect_timeout": 2}})
    with pytest.raises(StoreUnavailable) as dead:
        reader.fetch(url)
    message = str(dead.value)
    assert "\n" not in message and f"did not answer at http://127.0.0.1:9 (AWS_ENDPOINT_URL) while reading the record of {url}:" in message
    assert "botocore" not in message


def test_a_long_lived_process_follows_a_changed_endpoint(store, s3, tmp_path, monkeypatch):
    import dagster as dg

    from rhythm_pipeline.defs.resources import artifact_store_from_env

    monkeypatch.setenv("RHYTHM_ARTIFACTS", store.url)
    monkeypatch.setenv("RHYTHM_ARTIFACT_CACHE", str(tmp_path / "cache"))
    with dg.instance_for_test() as instance:
        resource = artifact_store_from_env()
        assert resource.store(instance).url == store.url
        monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
        with pytest.raises(StoreUnavailable, match="did not answer at http://127.0.0.1:9"):
            resource.store(instance)  # a new endpoint is used at once, not the store opened before
        monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "rotated-but-wrong")
        with pytest.raises(StoreUnavailable, match="credentials were refused"):
            resource.store(instance)


TEACHER = """
    import sys
    from pathlib import Path
    from rhythm_core.store import ObjectStore
    from rhythm_core.teacher.settings import TeacherSettings
    from rhythm_core.teacher.stage import teacher_stage
    store = ObjectStore(sys.argv[1], Path(sys.argv[2]))
    teacher_stage(TeacherSettings(backend="bayes"), "continuous", sys.argv[3], store.cache, store=store, workers=1)
"""


def test_a_killed_teacher_step_resumed_on_another_machine_replays_nothing_it_had_finished(store, s3, tmp_path):
    from rhythm_core.teacher.settings import TeacherSettings
    from rhythm_core.teacher.stage import teacher_stage

    seeds = "1000-1999"
    parts = f"{store.path}/teacher_trajectories/work"
    first = subprocess.Popen([sys.executable, "-c", textwrap.dedent(TEACHER), store.url, str(tmp_path / "pod-a"), seeds],
                             cwd=REPO, env={**os.environ, **s3.env, "RHYTHM_WORK_SYNC_S": "0"},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and first.poll() is None:
        segments = [p for p in store.fs.find(parts) if "/" in p and ".parts/" in p] if store.fs.exists(parts) else []
        if len(segments) >= 2:
            break
        time.sleep(0.05)
    assert first.poll() is None, first.communicate()[1][-2000:]  # still playing: kill it mid-run
    first.send_signal(signal.SIGKILL)
    first.wait()
    saved = b"".join(store.fs.cat_file(p) for p in sorted(store.fs.find(parts)) if ".parts/" in p)
    kept = saved.count(b"\n")
    assert 0 < kept < 1000

    other = ObjectStore(store.url, tmp_path / "pod-b")  # another pod: its cache holds nothing
    result = teacher_stage(TeacherSettings(backend="bayes"), "continuous", seeds, other.cache, store=other, workers=1)
    assert result["run"]["episodes_resumed"] == kept
    assert result["run"]["episodes_written_this_run"] == 1000 - kept
    assert result["n_episodes"] == 1000

    again = ObjectStore(store.url, tmp_path / "pod-c")  # and once published, a third pod plays nothing
    replayed = teacher_stage(TeacherSettings(backend="bayes"), "continuous", seeds, again.cache, store=again, workers=1)
    assert replayed["run"]["episodes_written_this_run"] == 0 and replayed["version"] == result["version"]
    assert not [p for p in store.fs.find(parts) if ".parts/" in p]  # the work's segments went with the publish
