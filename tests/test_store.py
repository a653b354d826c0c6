"""The artifact store on a real S3 server (SeaweedFS on 127.0.0.1) and on a local folder: publishing
(files first, the record last), fetching into a cache checked against the record, what a reader
does with a version whose record never arrived or whose file changed, and the one-line errors for a
store that cannot be used."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from rhythm_core.store import (
    FILES_MANIFEST,
    ArtifactChanged,
    LocalStore,
    ObjectStore,
    StoreUnavailable,
    open_store,
    publish_dir,
    staging,
    write_files_manifest,
)

REPO = Path(__file__).resolve().parents[1]


def _artifact(root: Path, name: str = "0123456789abcdef", files: dict | None = None) -> Path:
    """A published local artifact folder under root/stage/<name>."""
    files = files or {"a.txt": "alpha\n", "sub/b.bin": "beta\n"}
    with staging(root / "stage") as staged:
        for rel, text in files.items():
            (staged / rel).parent.mkdir(parents=True, exist_ok=True)
            (staged / rel).write_text(text)
        return publish_dir(staged, root / "stage" / name, kind="checkpoint", published=True, overwrite=True)


def test_a_published_version_round_trips_through_the_store_and_is_fetched_once(store, tmp_path):
    folder = _artifact(store.cache)
    url = store.publish(folder).url
    assert url == f"{store.url}/stage/0123456789abcdef" and store.exists(f"{url}/{FILES_MANIFEST}")

    reader = ObjectStore(store.url, tmp_path / "reader-cache")  # another machine: an empty cache
    local = reader.fetch(f"{url}/sub/b.bin", json.loads((folder / FILES_MANIFEST).read_text())["digest"])
    assert local == tmp_path / "reader-cache" / "stage" / "0123456789abcdef" / "sub" / "b.bin"
    assert local.read_text() == "beta\n"
    stamp = local.parents[1] / ".rhythm-fetched"
    first = stamp.stat().st_mtime_ns
    reader.fetch(url)  # checked against the same record: the cache is reused, nothing downloaded
    assert stamp.stat().st_mtime_ns == first
    assert reader.verify(url) == json.loads((folder / FILES_MANIFEST).read_text())["digest"]


def test_values_carry_store_urls_between_steps_and_cache_paths_inside_one(store, tmp_path):
    folder = _artifact(store.cache)
    value = {"path": str(folder), "model_dir": str(folder / "sub"), "version": "v", "files": [str(folder / "a.txt")]}
    handed_on = store.publish_value(value)
    assert handed_on["path"].startswith("s3://") and handed_on["files"][0].endswith("/stage/0123456789abcdef/a.txt")
    reader = ObjectStore(store.url, tmp_path / "elsewhere")
    local = reader.fetch_value(handed_on)
    assert Path(local["model_dir"]) == tmp_path / "elsewhere" / "stage" / "0123456789abcdef" / "sub"
    assert (Path(local["path"]) / "a.txt").read_text() == "alpha\n"


def _object(store, url: str, name: str) -> str:
    return f"{store._data_key(url, store._record(url))}/{name}"


def test_a_published_version_is_never_overwritten(store):
    url = store.publish(_artifact(store.cache)).url
    other = _artifact(store.cache, files={"a.txt": "something else\n"})  # same version, other files
    published = store.publish(other)
    assert published.adopted and "already published" in published.adopted
    assert store.fs.cat_file(_object(store, url, "a.txt")) == b"alpha\n"
    assert (other / "a.txt").read_text() == "alpha\n"  # this run reads the published version


def test_a_file_changed_on_the_store_is_caught_by_the_check_and_by_the_next_reader(store, tmp_path):
    url = store.publish(_artifact(store.cache)).url
    recorded = json.loads((store.cache / "stage" / "0123456789abcdef" / FILES_MANIFEST).read_text())
    store.fs.pipe_file(_object(store, url, "sub/b.bin"), b"tampered\n")
    with pytest.raises(ArtifactChanged) as checked:
        store.verify(url, recorded["digest"])
    message = str(checked.value)
    assert f"{url}/sub/b.bin" in message and recorded["files"]["sub/b.bin"] in message
    with pytest.raises(ArtifactChanged, match="sub/b.bin: changed after it was published"):
        ObjectStore(store.url, tmp_path / "fresh").fetch(url)
    assert not (tmp_path / "fresh" / "stage" / "0123456789abcdef").exists()  # nothing half-fetched is kept


def test_a_version_whose_record_never_arrived_does_not_exist_and_its_uploads_are_removed(store, tmp_path, monkeypatch):
    from rhythm_core.store import objects

    folder = _artifact(store.cache)
    url = store.url_of(folder)
    orphan = f"{store._key(url)}/.rhythm-data/killed-writer"
    store.fs.put_file(str(folder / "a.txt"), f"{orphan}/a.txt")  # an upload killed before its record
    with pytest.raises(ArtifactChanged, match="no published artifact holds it"):
        ObjectStore(store.url, tmp_path / "r").fetch(url)
    assert store.list_versions("stage") == []
    assert store.publish(folder).url == url and store.list_versions("stage") == [url]
    assert store.fs.exists(f"{orphan}/a.txt")  # young: maybe a writer still uploading
    monkeypatch.setattr(objects, "ORPHAN_GRACE_S", 0)
    store.publish(folder)  # the next publish in the version removes what no record names
    assert not store.fs.exists(f"{orphan}/a.txt")
    assert ObjectStore(store.url, tmp_path / "r2").fetch(f"{url}/a.txt").read_text() == "alpha\n"


def test_a_publish_killed_after_some_files_leaves_no_version_and_the_next_run_completes_it(store, s3, tmp_path):
    folder = _artifact(store.cache, files={f"f{i}.txt": f"{i}\n" * 1000 for i in range(6)})
    killer = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(REPO)!r})
        from rhythm_core.store import ObjectStore
        store = ObjectStore({store.url!r}, __import__("pathlib").Path({str(store.cache)!r}))
        put, sent = store.fs.put_file, []
        def put_then_die(*args, **kwargs):
            put(*args, **kwargs)
            sent.append(args)
            if len(sent) == 3:
                os.kill(os.getpid(), signal.SIGKILL)
        store.fs.put_file = put_then_die
        store.publish({str(folder)!r})
    """)
    done = subprocess.run([sys.executable, "-c", killer], env={**os.environ, **s3.env}, capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL, done.stderr
    url = store.url_of(folder)
    assert len(store.fs.find(store._key(url))) == 3  # three files up, no record
    with pytest.raises(ArtifactChanged):
        ObjectStore(store.url, tmp_path / "reader").fetch(url)
    assert store.publish(folder).url == url  # the re-run completes it
    assert ObjectStore(store.url, tmp_path / "reader").fetch(f"{url}/f5.txt").read_text() == "5\n" * 1000


@pytest.mark.parametrize("spec, expected", [
    ("gs://bucket/prefix", "gs:// filesystem is not installed (pip install gcsfs)"),
    ("ftp://host/x", "unknown scheme ftp://"),
    ("s3://", "name a bucket"),
])
def test_a_store_that_cannot_be_opened_is_refused_in_one_line_naming_the_variable(spec, expected, tmp_path):
    with pytest.raises(StoreUnavailable) as refused:
        open_store(spec, default_root=tmp_path)
    assert str(refused.value).startswith(f"RHYTHM_ARTIFACTS={spec}") and expected in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_missing_bucket_refused_credentials_and_a_dead_endpoint_are_refused(s3, tmp_path, monkeypatch):
    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(StoreUnavailable, match="bucket no-such-bucket does not exist"):
        open_store("s3://no-such-bucket/x", default_root=tmp_path).check()
    bucket = s3.make_bucket(f"rhythm-{uuid.uuid4().hex[:10]}")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with pytest.raises(StoreUnavailable, match="credentials were refused"):
        open_store(f"s3://{bucket}/x", default_root=tmp_path).check()
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3.env["AWS_SECRET_ACCESS_KEY"])
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    with pytest.raises(StoreUnavailable, match="did not answer at http://127.0.0.1:9"):
        open_store(f"s3://{bucket}/x", default_root=tmp_path).check()


@pytest.mark.parametrize("artifacts, env, expected", [
    ("gs://bucket/rhythm", {}, "gs:// filesystem is not installed"),
    ("s3://{bucket}/rhythm", {"AWS_SECRET_ACCESS_KEY": "wrong"}, "credentials were refused"),
    ("s3://{bucket}/rhythm", {"AWS_ENDPOINT_URL": "http://127.0.0.1:9"}, "did not answer"),
])
def test_the_demo_refuses_an_unusable_store_in_one_line_before_any_work(s3, tmp_path, artifacts, env, expected):
    bucket = s3.make_bucket(f"rhythm-{uuid.uuid4().hex[:10]}")
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text((REPO / "dagster_home" / "dagster.yaml").read_text())
    done = subprocess.run([sys.executable, "-m", "rhythm_pipeline.demo"], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **s3.env, "DAGSTER_HOME": str(home),
                                            "RHYTHM_ARTIFACTS": artifacts.format(bucket=bucket), **env})
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "RHYTHM_ARTIFACTS=" in lines[0] and expected in lines[0]
    assert not (home / "storage" / "runs").exists() and not list((home / "storage").glob("*/teacher_trajectories"))


def test_a_local_store_is_the_folder_itself(tmp_path):
    opened = open_store("", default_root=tmp_path / "root")
    assert isinstance(opened, LocalStore) and opened.cache == tmp_path / "root"
    folder = _artifact(opened.cache)
    assert opened.publish(folder).url == str(folder) and opened.fetch(folder) == folder
    write_files_manifest(folder, "checkpoint", published=True)
    (folder / "a.txt").write_text("changed\n")
    with pytest.raises(ArtifactChanged, match="a.txt: changed after it was published"):
        opened.fetch(folder)
