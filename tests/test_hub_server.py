"""The local Hub + Jobs server (tests/hub_server.py) driven by the real huggingface_hub HfApi over HTTP."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import sys
import sysconfig
import textwrap
import time
import zipfile
from pathlib import Path

import huggingface_hub
import pytest
from huggingface_hub import HfApi, snapshot_download
from huggingface_hub.errors import HfHubHTTPError

from tests.hub_server import HARDWARE, TIMEOUT_MESSAGE, serve

pytestmark = pytest.mark.filterwarnings("ignore:'HfApi.run_uv_job' is experimental")


@pytest.fixture(autouse=True)
def online(monkeypatch):
    # huggingface_hub reads HF_HUB_OFFLINE once, at import: make sure this process may reach the local server.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)


@pytest.fixture
def server():
    with serve() as hub:
        yield hub


def _api(server) -> HfApi:
    return HfApi(endpoint=server.url, token=server.token)


def _script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def _files_under(root) -> dict[str, bytes]:
    root = Path(root)
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and ".cache" not in p.relative_to(root).parts}


def _run(api: HfApi, server, script: str, **kwargs):
    return api.run_uv_job(script, namespace=server.user, token=server.token, **kwargs)


# --------------------------------------------------------------------------------------------------
# Hub


def test_whoami_and_a_wrong_token_is_refused_with_401(server):
    assert _api(server).whoami()["name"] == server.user
    bad = HfApi(endpoint=server.url, token="hf_" + "wrongToken" * 3)
    with pytest.raises(HfHubHTTPError) as error:
        bad.whoami()
    assert error.value.response.status_code == 401
    with pytest.raises(HfHubHTTPError) as error:
        bad.create_repo("alice/nope", repo_type="dataset", private=True)
    assert error.value.response.status_code == 401
    assert ("dataset", "alice/nope") not in server.repos
    # recorded requests never hold the token
    assert all(server.token not in str(r.headers) for r in server.requests)
    assert server.requests[0].headers["authorization"] == "Bearer ***"


def test_upload_folder_and_snapshot_download_round_trip(server, tmp_path):
    api = _api(server)
    url = api.create_repo("alice/staging", repo_type="dataset", private=True, exist_ok=True)
    assert url.repo_id == "alice/staging" and url.repo_type == "dataset"
    api.create_repo("alice/staging", repo_type="dataset", private=True, exist_ok=True)  # exists: fine

    first = tmp_path / "first"
    (first / "train").mkdir(parents=True)
    (first / "dataset_dict.json").write_text('{"splits": ["train"]}')
    (first / "train" / "data.arrow").write_bytes(os.urandom(3000))
    (first / "old.txt").write_text("goes away")
    one = api.upload_folder(repo_id="alice/staging", folder_path=first, path_in_repo="runs/a", repo_type="dataset",
                            commit_message="inputs a", commit_description="first", delete_patterns="*")
    assert len(one.oid) == 40 and one.commit_url.endswith(f"/datasets/alice/staging/commit/{one.oid}")
    commit = server.repo("dataset", "alice/staging").commit(one.oid)
    assert (commit.message, commit.description) == ("inputs a", "first")

    second = tmp_path / "second"
    (second / "train").mkdir(parents=True)
    (second / "dataset_dict.json").write_text('{"splits": ["train"], "v": 2}')
    (second / "train" / "data.arrow").write_bytes((first / "train" / "data.arrow").read_bytes())
    two = api.upload_folder(repo_id="alice/staging", folder_path=second, path_in_repo="runs/a", repo_type="dataset",
                            commit_message="inputs a v2", delete_patterns="*")
    assert two.oid != one.oid
    ops = [op["key"] for op in server.requests_to("commit")[-1].body]
    assert ops.count("deletedFile") == 1 and ops.count("file") == 1  # old.txt deleted; data.arrow unchanged

    # each commit is a full snapshot, downloadable at its pinned revision
    got = snapshot_download("alice/staging", repo_type="dataset", revision=one.oid, allow_patterns=["runs/a/*"],
                            local_dir=tmp_path / "dl1", token=server.token, endpoint=server.url,
                            cache_dir=tmp_path / "cache")
    assert _files_under(Path(got) / "runs/a") == _files_under(first)
    got = api.snapshot_download("alice/staging", repo_type="dataset", revision=two.oid,
                                allow_patterns=["runs/a/train/*"], local_dir=tmp_path / "dl2",
                                cache_dir=tmp_path / "cache")
    assert _files_under(got) == {"runs/a/train/data.arrow": (first / "train" / "data.arrow").read_bytes()}
    assert set(server.files("dataset", "alice/staging", two.oid)) == {
        ".gitattributes", "runs/a/dataset_dict.json", "runs/a/train/data.arrow"}
    heads = [r for r in server.requests_to("resolve") if r.method == "HEAD"]
    assert heads and all(r.status == 200 for r in heads)

    # a model repo, downloaded at main (repo info -> sha -> files)
    api.create_repo("alice/model", repo_type="model", private=True, exist_ok=True)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "adapter.safetensors").write_bytes(b"weights")
    done = api.upload_folder(repo_id="alice/model", folder_path=tmp_path / "model", repo_type="model",
                             commit_message="out")
    got = snapshot_download("alice/model", allow_patterns=["*.safetensors"], local_dir=tmp_path / "dl3",
                            token=server.token, endpoint=server.url, cache_dir=tmp_path / "cache")
    assert _files_under(got) == {"adapter.safetensors": b"weights"}
    assert api.model_info("alice/model").sha == done.oid


def test_lfs_files_through_hf_xet_and_cdn_redirects(tmp_path):
    with serve(lfs_threshold=1000, redirect_downloads=True) as server:
        api = _api(server)
        api.create_repo("alice/big", repo_type="model", private=True)
        folder = tmp_path / "up"
        folder.mkdir()
        big = os.urandom(5000) + b"x" * 70_000  # an incompressible part and a compressible one
        (folder / "model.bin").write_bytes(big)
        (folder / "config.json").write_text("{}")
        commit = api.upload_folder(repo_id="alice/big", folder_path=folder, commit_message="weights")
        lfs = server.requests_to("commit")[-1].body
        assert {op["key"] for op in lfs[1:]} == {"file", "lfsFile"}
        assert [op["value"]["oid"] for op in lfs if op["key"] == "lfsFile"] == [hashlib.sha256(big).hexdigest()]
        assert server.requests_to("cas_xorb") and server.requests_to("repo_xet_token")

        got = snapshot_download("alice/big", revision=commit.oid, local_dir=tmp_path / "dl", token=server.token,
                                endpoint=server.url, cache_dir=tmp_path / "cache")
        assert _files_under(got) == {".gitattributes": server.files("model", "alice/big")[".gitattributes"],
                                     "model.bin": big, "config.json": b"{}"}
        cdn = server.requests_to("cdn")
        assert cdn and all("authorization" not in r.headers for r in cdn)  # auth never leaves the "Hub"
        assert all(r.status == 302 for r in server.requests_to("resolve"))


# --------------------------------------------------------------------------------------------------
# Jobs


def test_uv_job_runs_locally_with_its_secret_and_streams_its_log(server, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the test's own environment must not leak into the job
    script = _script(tmp_path, "job.py", """
        import os, shutil, sys
        from huggingface_hub import HfApi
        print("args", sys.argv[1:])
        print("endpoint", os.environ["HF_ENDPOINT"])
        print("offline", os.environ.get("HF_HUB_OFFLINE"), "uv", shutil.which("uv"))
        print("token length", len(os.environ["HF_TOKEN"]))
        api = HfApi()  # HF_ENDPOINT and HF_TOKEN from the job's environment
        api.create_repo("alice/out", repo_type="model", private=True, exist_ok=True)
        os.makedirs("out")
        open("out/result.txt", "w").write("trained")
        commit = api.upload_folder(repo_id="alice/out", folder_path="out", commit_message="result")
        print("RESULT", commit.oid)
    """)
    api = _api(server)
    job = _run(api, server, script, script_args=["--stage=sft", "x y"], dependencies=["huggingface_hub>=0.34"],
               flavor="a10g-small", timeout="2h", labels={"rhythm_stage": "sft"}, python="3.11",
               secrets={"HF_TOKEN": server.token})
    assert job.status.stage in ("SCHEDULING", "RUNNING") and job.flavor == "a10g-small"
    lines = list(api.fetch_job_logs(job_id=job.id, namespace=server.user, follow=True))
    info = api.inspect_job(job_id=job.id, namespace=server.user)
    assert info.status.stage == "COMPLETED" and info.status.message is None
    assert lines[:4] == ["args ['--stage=sft', 'x y']", f"endpoint {server.url}", "offline None uv None",
                         f"token length {len(server.token)}"]
    oid = lines[-1].split()[-1]
    assert server.files("model", "alice/out", oid)["result.txt"] == b"trained"
    assert not any(server.token in line for line in lines)  # the secret is not in the log
    assert info.started_at and info.finished_at and info.durations.total_secs is not None
    assert info.durations.running_secs is not None and info.labels["rhythm_stage"] == "sft"
    assert info.secrets == {"HF_TOKEN": None}

    record = server.jobs[job.id]
    assert record.command[:6] == ["uv", "run", "--with", "huggingface_hub>=0.34", "--python", "3.11"]
    assert record.command[6] == "/data/job.py" and record.volumes[0]["mountPath"] == "/data"
    assert record.spec["timeoutSeconds"] == 7200 and record.uv_with == ["huggingface_hub>=0.34"]
    assert Path(record.argv[0]).parent.parent.name == "venv" and record.argv[2:] == ["--stage=sft", "x y"]
    assert {"HF_ENDPOINT", "HF_TOKEN", "PYTHONUNBUFFERED", "PIP_NO_INDEX"} <= set(record.env_keys)
    assert "HF_HUB_OFFLINE" not in record.env_keys and record.exit_code == 0
    assert record.lines == lines
    assert all(server.token not in str(r.body) for r in server.requests)  # nor in the recorded requests
    assert server.requests_to("create_job")[0].body["secrets"] == {"HF_TOKEN": "***"}
    # the script reached the job through the jobs-artifacts bucket, uploaded with hf_xet
    bucket = server.buckets["alice/jobs-artifacts"]["files"]
    assert [Path(p).name for p in bucket] == ["job.py"] and next(iter(bucket.values())) == Path(script).read_bytes()
    # a later non-follow read returns the same lines
    assert list(api.fetch_job_logs(job_id=job.id, namespace=server.user)) == lines


def test_failing_job_ends_in_error(server, tmp_path):
    script = _script(tmp_path, "fail.py", """
        print("about to fail")
        raise RuntimeError("CUDA out of memory")
    """)
    api = _api(server)
    job = _run(api, server, script)
    lines = list(api.fetch_job_logs(job_id=job.id, namespace=server.user, follow=True))
    info = api.inspect_job(job_id=job.id, namespace=server.user)
    assert info.status.stage == "ERROR" and info.status.message == "Job failed with exit code: 1"
    assert lines[0] == "about to fail" and lines[-1] == "RuntimeError: CUDA out of memory"
    assert server.jobs[job.id].exit_code == 1


def test_cancel_kills_the_running_job(tmp_path):
    script = _script(tmp_path, "slow.py", """
        import time
        print("started", flush=True)
        time.sleep(60)
        print("never")
    """)
    with serve(schedule_delay=0.5) as server:
        api = _api(server)
        job = _run(api, server, script)
        assert api.inspect_job(job_id=job.id, namespace=server.user).status.stage == "SCHEDULING"
        events = iter(api.fetch_job_logs(job_id=job.id, namespace=server.user, follow=True))
        assert next(events) == "started"
        record = server.jobs[job.id]
        assert record.process_alive()
        api.cancel_job(job_id=job.id, namespace=server.user)
        assert list(events) == []  # the stream ends with the job
        info = api.inspect_job(job_id=job.id, namespace=server.user)
        assert info.status.stage == "CANCELED"
        assert info.durations.scheduling_secs >= 0 and record.durations["scheduling"] >= 0.5
        assert not record.process_alive()
        with pytest.raises(ProcessLookupError):
            os.kill(record.pid, 0)

        # canceled while still scheduling: it never starts
        queued = _run(api, server, script)
        api.cancel_job(job_id=queued.id, namespace=server.user)
        assert server.wait_job(queued.id).stage == "CANCELED" and server.jobs[queued.id].argv is None

        # canceled from elsewhere (the knob): the client sees CANCELED too
        server.schedule_delay, server.cancel_jobs_after_s = 0.0, 0.5
        other = _run(api, server, script)
        assert list(api.fetch_job_logs(job_id=other.id, namespace=server.user, follow=True)) == ["started"]
        assert api.inspect_job(job_id=other.id, namespace=server.user).status.stage == "CANCELED"


def test_a_job_past_its_timeout_is_killed_and_ends_in_error(server, tmp_path):
    script = _script(tmp_path, "forever.py", """
        import time
        print("working", flush=True)
        time.sleep(60)
    """)
    api = _api(server)
    job = _run(api, server, script, timeout="1s")  # the client sends timeoutSeconds: 1
    assert server.requests_to("create_job")[-1].body["timeoutSeconds"] == 1
    assert list(api.fetch_job_logs(job_id=job.id, namespace=server.user, follow=True)) == ["working"]
    info = api.inspect_job(job_id=job.id, namespace=server.user)
    assert info.status.stage == "ERROR" and "timeout" in info.status.message.lower()
    assert info.status.message == TIMEOUT_MESSAGE and not server.jobs[job.id].process_alive()
    assert 1 <= server.jobs[job.id].durations["running"] < 10

    server.job_timeout_s = 0.5  # the knob: whatever the job asked for
    job = _run(api, server, script, timeout="2h")
    assert server.wait_job(job.id).message == TIMEOUT_MESSAGE


def test_a_broken_log_stream(tmp_path):
    script = _script(tmp_path, "ticks.py", """
        import time
        for i in range(6):
            print(f"tick {i}", flush=True)
            time.sleep(0.4)
    """)
    expected = [f"tick {i}" for i in range(6)]
    with serve(break_log_stream_after=2) as server:
        api = _api(server)
        # the stream is cut after 2 lines; the client reconnects and resumes where it was
        job = _run(api, server, script)
        assert list(api.fetch_job_logs(job_id=job.id, namespace=server.user, follow=True)) == expected
        assert server.jobs[job.id].streams_cut == 1 and len(server.requests_to("job_logs")) >= 2

        # ... unless reconnecting fails: follow=True raises mid-job; the whole log reads once it ended
        server.log_stream_error_status = 503
        job = _run(api, server, script)
        seen = []
        with pytest.raises(HfHubHTTPError) as error:
            for line in api.fetch_job_logs(job_id=job.id, namespace=server.user, follow=True):
                seen.append(line)
        assert error.value.response.status_code == 503 and seen == expected[:2]
        assert server.wait_job(job.id).stage == "COMPLETED"
        assert list(api.fetch_job_logs(job_id=job.id, namespace=server.user, follow=False)) == expected


def test_list_jobs_hardware_prices(server):
    hardware = {h.name: h for h in _api(server).list_jobs_hardware()}
    for name, per_hour in {"cpu-basic": 0.01, "a10g-small": 1.00, "a10g-large": 1.50, "a100-large": 2.50}.items():
        assert hardware[name].unit_label == "minute"
        assert hardware[name].unit_cost_usd == pytest.approx(per_hour / 60)
        assert round(hardware[name].unit_cost_usd * 60, 6) == per_hour
        assert hardware[name].unit_cost_micro_usd == round(per_hour / 60 * 1e6)
    assert hardware["cpu-basic"].accelerator is None and hardware["a100-large"].accelerator.model == "A100"
    assert len(hardware) == len(HARDWARE)


def _tiny_wheel(folder: Path, name: str, version: str = "0.1.0") -> Path:
    files = {f"{name}.py": f"VALUE = 'installed {name}'\n".encode(),
             f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{name}-{version}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                 b"Tag: py3-none-any\n"}
    record = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
              f"{len(data)}" for path, data in files.items()] + [f"{name}-{version}.dist-info/RECORD,,"]
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
        zf.writestr(f"{name}-{version}.dist-info/RECORD", "\n".join(record) + "\n")
    return wheel


def test_a_job_pip_installs_a_wheel_into_its_throwaway_venv(server, tmp_path, monkeypatch):
    name = "hub_server_tiny_pkg"
    wheel = _tiny_wheel(tmp_path, name)
    fake_bin = tmp_path / "bin"  # a `uv` on this process's PATH must not reach the job (it would install here)
    fake_bin.mkdir()
    (fake_bin / "uv").write_text("#!/bin/sh\necho 'uv must not run in the job' >&2\nexit 1\n")
    (fake_bin / "uv").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}{os.pathsep}{os.environ.get('PATH', '')}")
    script = _script(tmp_path, "install.py", f"""
        import shutil, subprocess, sys
        wheel = sys.argv[1]
        cmd = ["uv", "pip", "install", "--python", sys.executable, wheel] if shutil.which("uv") else \\
              [sys.executable, "-m", "pip", "install", wheel]
        subprocess.check_call(cmd)
        import {name}, huggingface_hub
        print("VALUE", {name}.VALUE)
        print("FROM", {name}.__file__.startswith(sys.prefix), sys.prefix != sys.base_prefix)
        print("HUB", huggingface_hub.__version__)
    """)
    api = _api(server)
    job = _run(api, server, script, script_args=[str(wheel)])  # run_uv_job ships the wheel with the script
    lines = list(api.fetch_job_logs(job_id=job.id, namespace=server.user, follow=True))
    assert api.inspect_job(job_id=job.id, namespace=server.user).status.stage == "COMPLETED", lines
    assert f"VALUE installed {name}" in lines and "FROM True True" in lines
    assert f"HUB {huggingface_hub.__version__}" in lines  # the test venv's packages import in the job
    record = server.jobs[job.id]
    assert record.argv[2] != str(wheel) and Path(record.argv[2]).read_bytes() == wheel.read_bytes()
    # the test venv is unchanged
    assert importlib.util.find_spec(name) is None
    site = Path(sysconfig.get_path("purelib"))
    assert not list(site.glob(f"{name}*")) and str(site).startswith(sys.prefix)


def test_stop_ends_running_jobs_and_streams(tmp_path):
    script = _script(tmp_path, "slow.py", """
        import time
        print("up", flush=True)
        time.sleep(60)
    """)
    with serve() as server:
        api = _api(server)
        job = _run(api, server, script)
        deadline = time.monotonic() + 20
        while server.jobs[job.id].lines != ["up"] and time.monotonic() < deadline:
            time.sleep(0.05)
        record = server.jobs[job.id]
        assert record.process_alive()
    assert not record.process_alive() and record.stage == "ERROR" and record.finished_at is not None
