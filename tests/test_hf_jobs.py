"""The Hugging Face Jobs backend against an in-memory Hub and Jobs API (nothing leaves the machine).

FakeHub mirrors the HfApi methods the backend calls: each call is bound against the real HfApi
signature (a wrong argument name fails), and the results are real CommitInfo / JobInfo / RepoUrl
objects. A submitted job really runs the generated script's main() in-process: it downloads the
staged inputs from the fake Hub at the pinned revision, runs the real training entry point's main()
(with a fake run_stage), uploads the outputs and prints the result line; its printed output becomes
the job's log stream.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import inspect
import io
import json
import re
import sys
import tomllib
import traceback
import zipfile
from pathlib import Path

import huggingface_hub
import pytest
from huggingface_hub import CommitInfo, HfApi, JobInfo
from huggingface_hub.hf_api import RepoUrl

from rhythm_core.compute.costs import default_timeout_s
from rhythm_core.compute.hf_jobs import (
    HUB_DEPENDENCY,
    JOB_RESULT_PREFIX,
    HFJobError,
    HFJobSpec,
    render_job_script,
    run_job,
    run_key_for,
)
from rhythm_core.training import entry

CANARY = "hf_" + "CANARYtoken0123456789abcdefXYZ"  # built, so no token-shaped literal is committed
ENDPOINT = "https://huggingface.co"
JOB_ID = "687fb701029421ae5549d998"
REAL_SNAPSHOT_DOWNLOAD = huggingface_hub.snapshot_download  # the job's is replaced while it runs
CONFIG = {"max_steps": 3, "short_context_steps": 0, "learning_rate": 1e-4, "base_model": "tiny"}
PROVENANCE = {"sft_dataset_version": "abc123", "teacher": "bayes"}


def _bind(method: str, *args, **kwargs) -> dict:
    """Bind a call against the real HfApi method (raises TypeError on a wrong argument name)."""
    bound = inspect.signature(getattr(HfApi, method)).bind(None, *args, **kwargs)
    return {k: v for k, v in bound.arguments.items() if k != "self"}


def _oid(*parts) -> str:
    return hashlib.sha1(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _type_prefix(repo_type: str) -> str:
    return "" if repo_type == "model" else f"{repo_type}s/"


class FakeHub:
    """In-memory Hub repos plus one Job, behind HfApi's method signatures."""

    def __init__(self, *, user="alice", token=None, run_stage=None, interrupt_at=None, break_at=None,
                 corrupt_wheel=False, inject_lines=(), drop_result_line=False, monkeypatch=None, workdir=None):
        self.user = user
        self.token = token
        self.calls: list[tuple[str, dict]] = []
        self.repos: dict[tuple[str, str], dict] = {}
        self.run_stage = run_stage or fake_run_stage
        self.interrupt_at = interrupt_at  # a follow=True log stream raises this at line i
        self.break_at = break_at  # a follow=True log stream fails with a ConnectionError at line i
        self.corrupt_wheel = corrupt_wheel
        self.inject_lines = list(inject_lines)
        self.drop_result_line = drop_result_line  # the log never shows the RHYTHM_JOB_RESULT line
        self.monkeypatch = monkeypatch
        self.workdir = workdir
        self.log_lines: list[str] = []
        self.final_stage = None
        self.final_message = None
        self.stages: list[str] = []
        self.script_text = None
        self.command = None
        self.job_side = {}

    # --- bookkeeping
    def _record(self, method: str, *args, **kwargs) -> dict:
        arguments = _bind(method, *args, **kwargs)
        self.calls.append((method, arguments))
        return arguments

    def called(self, method: str) -> list[dict]:
        return [a for m, a in self.calls if m == method]

    def files(self, repo_type: str, repo_id: str, revision: str | None = None) -> dict[str, bytes]:
        commits = self.repos[(repo_type, repo_id)]["commits"]
        if revision is None:
            return commits[-1][1]
        return next(files for oid, files in commits if oid == revision)

    # --- Hub
    def whoami(self, *args, **kwargs) -> dict:
        self._record("whoami", *args, **kwargs)
        return {"type": "user", "name": self.user}

    def create_repo(self, *args, **kwargs) -> RepoUrl:
        a = self._record("create_repo", *args, **kwargs)
        key = (a.get("repo_type") or "model", a["repo_id"])
        if key in self.repos and not a.get("exist_ok"):
            raise FileExistsError(key)
        self.repos.setdefault(key, {"private": a.get("private"), "commits": []})
        return RepoUrl(f"{ENDPOINT}/{_type_prefix(key[0])}{key[1]}", endpoint=ENDPOINT)

    def upload_folder(self, *args, **kwargs) -> CommitInfo:
        a = self._record("upload_folder", *args, **kwargs)
        repo_type = a.get("repo_type") or "model"
        repo = self.repos[(repo_type, a["repo_id"])]  # like the Hub: the repo must exist
        files = dict(repo["commits"][-1][1]) if repo["commits"] else {}
        base = (a.get("path_in_repo") or "").strip("/")
        prefix = f"{base}/" if base else ""
        patterns = a.get("delete_patterns")
        patterns = [patterns] if isinstance(patterns, str) else (patterns or [])
        for path in list(files):
            rel = path[len(prefix):] if path.startswith(prefix) else None
            if rel is not None and rel != ".gitattributes" and any(fnmatch.fnmatch(rel, p) for p in patterns):
                del files[path]
        folder = Path(a["folder_path"])
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                files[prefix + p.relative_to(folder).as_posix()] = p.read_bytes()
        parent = repo["commits"][-1][0] if repo["commits"] else None
        oid = _oid(parent, sorted((k, hashlib.sha256(v).hexdigest()) for k, v in files.items()))
        repo["commits"].append((oid, files))
        return CommitInfo(commit_url=f"{ENDPOINT}/{_type_prefix(repo_type)}{a['repo_id']}/commit/{oid}",
                          commit_message=a.get("commit_message") or "", commit_description="", oid=oid)

    def snapshot_download(self, *args, **kwargs) -> str:
        a = dict(inspect.signature(REAL_SNAPSHOT_DOWNLOAD).bind(*args, **kwargs).arguments)
        self.calls.append(("snapshot_download", a))
        files = self.files(a.get("repo_type") or "model", a["repo_id"], a.get("revision"))
        patterns = a.get("allow_patterns")
        patterns = [patterns] if isinstance(patterns, str) else patterns
        local = Path(a["local_dir"])
        for path, data in files.items():
            if patterns is None or any(fnmatch.fnmatch(path, p) for p in patterns):
                target = local / path
                target.parent.mkdir(parents=True, exist_ok=True)
                if self.corrupt_wheel and path.endswith(".whl"):
                    data = data + b"tampered"
                target.write_bytes(data)
        return str(local)

    def client(self, *args, **kwargs):
        """Stands in for the HfApi class inside the job."""
        a = dict(inspect.signature(HfApi.__init__).bind(None, *args, **kwargs).arguments)
        self.job_side["client_token"] = a.get("token")
        return self

    # --- Jobs
    def run_uv_job(self, *args, **kwargs) -> JobInfo:
        a = self._record("run_uv_job", *args, **kwargs)
        self.script_text = Path(a["script"]).read_text()
        self.command = self._uv_command(a)
        self._run_job(a)
        return self._info(a["namespace"], "SCHEDULING")

    def _uv_command(self, a: dict) -> list[str] | None:
        """The command the real HfApi builds (local files moved to its artifacts bucket, not uploaded here)."""
        if not hasattr(HfApi, "_create_uv_command_env_and_secrets"):
            return None

        class Offline:
            uploaded: dict = {}

            def _upload_scripts_to_bucket(self, *, namespace, remote_to_local_file_names, token):
                Offline.uploaded = dict(remote_to_local_file_names)
                return []

        command, env, secrets, _ = HfApi._create_uv_command_env_and_secrets(
            Offline(), script=a["script"], script_args=a.get("script_args"), dependencies=a.get("dependencies"),
            python=a.get("python"), env=a.get("env"), secrets=a.get("secrets"), namespace=a["namespace"],
            token=a.get("token"))
        self.bucket_files = Offline.uploaded
        return command

    def _run_job(self, a: dict) -> None:
        """Run the submitted script's main() here, as the job would, capturing its output as the log."""
        ns = {"__name__": "rhythm_job"}
        exec(compile(self.script_text, a["script"], "exec"), ns)
        installed = self.job_side.setdefault("installed", [])

        def install_wheels(wheels):
            assert all(Path(wheel).is_file() and Path(wheel).suffix == ".whl" for wheel in wheels)
            installed.extend(Path(wheel).name for wheel in wheels)

        def stream(cmd):  # the entry point in-process (once, whatever its launcher); a crash reads like a
            # subprocess's traceback + exit 1
            at = cmd.index("rhythm_core.training.entry")
            assert cmd[0] == sys.executable and cmd[at - 1] == "-m"
            self.job_side["launcher"], self.job_side["entry_argv"] = cmd[1:at - 1], cmd[at + 1:]
            print("+ " + " ".join(cmd))
            try:
                return entry.main(cmd[at + 1:])
            except Exception:
                traceback.print_exc(file=sys.stdout)
                return 1

        ns["install_wheels"] = install_wheels
        ns["stream"] = stream
        out = io.StringIO()
        with self.monkeypatch.context() as m:
            m.setenv("HF_TOKEN", a["secrets"]["HF_TOKEN"])  # what the secret becomes inside the job
            m.setattr(huggingface_hub, "snapshot_download", self.snapshot_download)
            m.setattr(huggingface_hub, "HfApi", self.client)
            m.setattr(entry, "run_stage", self.run_stage)
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                print("===== Job started at 2025-07-22 16:06:31 =====")  # fetch_job_logs drops this line
                for line in self.inject_lines:
                    print(line)
                try:
                    code = ns["main"](list(a["script_args"]) + [f"--workdir={self.workdir}"])
                except Exception:
                    traceback.print_exc(file=sys.stdout)
                    code = 1
        self.log_lines = [line for line in out.getvalue().splitlines() if not line.startswith("===== Job started")
                          and not (self.drop_result_line and line.startswith(JOB_RESULT_PREFIX))]
        self.final_stage = "COMPLETED" if code == 0 else "ERROR"
        self.final_message = None if code == 0 else f"Job failed with exit code: {code}"
        self.stages = ["RUNNING", self.final_stage]

    def _info(self, namespace: str, stage: str, message: str | None = None) -> JobInfo:
        a = self.called("run_uv_job")[-1]
        return JobInfo(id=JOB_ID, createdAt="2025-07-22T16:06:25.079Z", dockerImage=a.get("image")
                       or "ghcr.io/astral-sh/uv:python3.12-bookworm", command=self.command, arguments=[],
                       environment=a.get("env") or {}, secrets={k: "<encrypted>" for k in a.get("secrets") or {}},
                       flavor=a.get("flavor"), owner={"id": "5e9ecfc04957053f60648a3e", "name": namespace,
                                                      "type": "user"},
                       status={"stage": stage, "message": message}, endpoint=ENDPOINT)

    def fetch_job_logs(self, *args, **kwargs):
        a = self._record("fetch_job_logs", *args, **kwargs)
        assert a["job_id"] == JOB_ID
        return self._events(bool(a.get("follow")))

    def _events(self, follow: bool):
        for i, line in enumerate(self.log_lines):
            if follow and self.interrupt_at is not None and i == self.interrupt_at[0]:
                raise self.interrupt_at[1]
            if follow and i == self.break_at:
                raise ConnectionError("stream reset by peer")
            yield line

    def inspect_job(self, *args, **kwargs) -> JobInfo:
        a = self._record("inspect_job", *args, **kwargs)
        assert a["job_id"] == JOB_ID
        stage = self.stages.pop(0) if len(self.stages) > 1 else self.stages[0]
        terminal = stage in ("COMPLETED", "ERROR", "CANCELED", "DELETED")
        return self._info(a["namespace"], stage, self.final_message if terminal else None)

    def cancel_job(self, *args, **kwargs) -> None:
        a = self._record("cancel_job", *args, **kwargs)
        assert a["job_id"] == JOB_ID
        self.stages = ["CANCELED"]


def fake_run_stage(stage, config, dataset, out, init=None, on_log=None, provenance=None):
    """Stands in for training: checks what the job staged, logs two steps, writes a checkpoint."""
    out = Path(out)
    model = out / "model"
    model.mkdir(parents=True)
    (model / "model.safetensors").write_bytes(b"weights")
    on_log({"step": 1, "loss": 2.5})
    on_log({"step": 2, "loss": 1.25})
    return {"path": str(out), "model_dir": str(model), "final_train_loss": 1.25, "stage": stage, "config": config,
            "provenance": provenance, "dataset_files": sorted(p.name for p in Path(dataset).rglob("*") if p.is_file()),
            "init_files": sorted(p.name for p in Path(init).rglob("*") if p.is_file()) if init else None}


def crashing_run_stage(*args, **kwargs):
    raise RuntimeError("CUDA out of memory while allocating 4.00 GiB")


@pytest.fixture
def inputs(tmp_path):
    dataset = tmp_path / "sft_dataset"
    (dataset / "train").mkdir(parents=True)
    (dataset / "dataset_dict.json").write_text('{"splits": ["train"]}')
    (dataset / "train" / "data-00000-of-00001.arrow").write_bytes(b"arrow bytes")
    init = tmp_path / "sft_model"
    init.mkdir()
    (init / "adapter_model.safetensors").write_bytes(b"adapter")
    (tmp_path / "wheels").mkdir()
    wheels = [tmp_path / "wheels" / "openenv_rhythm_env-0.1.0-py3-none-any.whl",
              tmp_path / "wheels" / "rhythm-0.1.0-py3-none-any.whl"]  # the environment package's, then rhythm's
    for wheel, module in zip(wheels, ("rhythm_env/sim/spec.py", "rhythm_core/training/entry.py")):
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr(module, "print('module')\n")
    return {"dataset": dataset, "init": init, "wheels": wheels}


@pytest.fixture
def make_hub(monkeypatch, tmp_path):
    def make(**kwargs):
        workdir = tmp_path / "job"
        return FakeHub(monkeypatch=monkeypatch, workdir=workdir, **kwargs)

    return make


def _run(hub, inputs, *, stage="sft", spec=None, token=CANARY, on_metrics=None, with_init=False):
    logged: list[str] = []
    # run_job is what the hf_jobs compute backend calls (ComputeResource._hf_job in rhythm_pipeline)
    job = run_job(stage, CONFIG, dataset_dir=inputs["dataset"], init_dir=inputs["init"] if with_init else None,
                  provenance=PROVENANCE, api=hub, spec=spec or HFJobSpec(namespace="rhythm-org"),
                  project_root=None, token=token, log=logged.append, on_metrics=on_metrics,
                  poll_interval=0, wheels=inputs["wheels"])
    return job, logged


def _pep723(script: str) -> dict:
    """The script's inline metadata, read with PEP 723's reference regex."""
    regex = r"(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$"
    block = next(m for m in re.finditer(regex, script) if m.group("type") == "script")
    content = "".join(line[2:] if line.startswith("# ") else line[1:]
                      for line in block.group("content").splitlines(keepends=True))
    return tomllib.loads(content)


# --------------------------------------------------------------------------------------------------


def test_completed_job_round_trip(make_hub, inputs):
    hub = make_hub()
    metrics: list[dict] = []
    job, logged = _run(hub, inputs, on_metrics=metrics.append)

    # staged inputs: one commit of the private staging dataset repo, pinned by its oid
    staging = "rhythm-org/rhythm-jobs"
    assert hub.called("create_repo")[0] == {"repo_id": staging, "repo_type": "dataset", "private": True,
                                            "exist_ok": True, "token": CANARY}
    upload = hub.called("upload_folder")[0]
    run_key = job["run_key"]
    assert upload["repo_id"] == staging and upload["repo_type"] == "dataset"
    assert upload["path_in_repo"] == f"runs/{run_key}" and re.fullmatch(r"sft-[0-9a-f]{12}", run_key)
    staged = hub.files("dataset", staging, job["input_revision"])
    prefix = f"runs/{run_key}/"
    wheels = inputs["wheels"]
    assert set(staged) == {prefix + p for p in [
        *(w.name for w in wheels), "config.json", "provenance.json", "dataset/dataset_dict.json",
        "dataset/train/data-00000-of-00001.arrow"]}
    assert all(staged[prefix + w.name] == w.read_bytes() for w in wheels)
    assert json.loads(staged[prefix + "config.json"]) == CONFIG
    assert json.loads(staged[prefix + "provenance.json"]) == PROVENANCE
    # the code version: every wheel's name and sha256, in the order they are installed
    listed = "".join(f"{w.name} {hashlib.sha256(w.read_bytes()).hexdigest()}\n" for w in wheels)
    assert job["code_version"] == hashlib.sha256(listed.encode()).hexdigest()

    # submission
    sub = hub.called("run_uv_job")[0]
    # no timeout configured: it follows the stage's size (a 3-step run gets the 20-minute setup allowance and more)
    assert sub["flavor"] == "a10g-small" and sub["timeout"] == default_timeout_s("sft", CONFIG) and sub["python"] == "3.11"
    assert 1200 < sub["timeout"] <= 1800
    assert sub["namespace"] == "rhythm-org"
    assert sub["secrets"] == {"HF_TOKEN": CANARY}
    assert "image" not in sub and "env" not in sub
    assert sub["dependencies"] == ["huggingface_hub>=0.34"]
    assert Path(sub["script"]).name == "rhythm_sft_job.py"
    args = sub["script_args"]
    assert f"--input-revision={job['input_revision']}" in args
    assert f"--staging-repo={staging}" in args and "--result-repo=rhythm-org/rhythm-sft" in args
    assert f"--code-version={job['code_version']}" in args and "--stage=sft" in args and "--no-init" in args
    assert f"--wheels={wheels[0].name},{wheels[1].name}" in args
    # run_uv_job ships local files named in the args and rejects missing *.py/*.yaml/...: none here
    assert not any(Path(x).exists() or Path(x).suffix in {".py", ".sh", ".yaml", ".yml", ".toml"} for x in args)
    if hub.command is not None:  # the command the real HfApi builds from this submission
        assert hub.command == ["uv", "run", "--with", "huggingface_hub>=0.34", "--python", "3.11",
                               "/data/rhythm_sft_job.py", *args]
        assert list(hub.bucket_files) == ["rhythm_sft_job.py"]

    # the script: real Python with PEP 723 metadata and the exact input revision
    script = hub.script_text
    compile(script, "rhythm_sft_job.py", "exec")
    assert job["input_revision"] in script and job["code_version"] in script
    assert _pep723(script)["dependencies"] == [HUB_DEPENDENCY]  # what run_uv_job is given too

    # inside the job: pinned download with the secret, the wheels installed (in one call), the entry point run
    download = next(a for m, a in hub.calls if m == "snapshot_download")
    assert download["repo_id"] == staging and download["repo_type"] == "dataset"
    assert download["revision"] == job["input_revision"] and download["allow_patterns"] == [f"runs/{run_key}/*"]
    assert download["token"] == CANARY and hub.job_side["client_token"] == CANARY
    assert hub.job_side["installed"] == [w.name for w in wheels]
    argv = hub.job_side["entry_argv"]
    assert argv[argv.index("--stage") + 1] == "sft" and "--init" not in argv and "--provenance" in argv

    # statuses and streamed logs
    stages_seen = [line for line in logged if line.startswith(f"[hf-jobs] job {JOB_ID}: ")]
    assert stages_seen == [f"[hf-jobs] job {JOB_ID}: RUNNING", f"[hf-jobs] job {JOB_ID}: COMPLETED"]
    assert hub.called("fetch_job_logs")[0] == {"job_id": JOB_ID, "namespace": "rhythm-org", "follow": True,
                                               "token": CANARY}
    for line in hub.log_lines:
        assert line in logged
    assert sum(line.startswith("RHYTHM_LOG ") for line in logged) == 2
    assert metrics == [{"step": 1, "loss": 2.5}, {"step": 2, "loss": 1.25}]
    assert not hub.called("cancel_job")

    # outputs: the private result model repo, one commit holding this run's output directory
    result_repo = "rhythm-org/rhythm-sft"
    assert {"repo_id": result_repo, "repo_type": "model", "private": True, "exist_ok": True} in hub.called("create_repo")
    assert hub.called("upload_folder")[1]["delete_patterns"] == "*"
    assert job["hub_repo_id"] == result_repo
    assert job["hub_revision"] == hub.repos[("model", result_repo)]["commits"][-1][0]
    outputs = hub.files("model", result_repo, job["hub_revision"])
    assert set(outputs) == {"result.json", "model/model.safetensors"}
    assert job["result"] == json.loads(outputs["result.json"])
    assert job["result"]["config"] == CONFIG and job["result"]["provenance"] == PROVENANCE
    assert job["result"]["dataset_files"] == ["data-00000-of-00001.arrow", "dataset_dict.json"]
    assert job["status"] == "COMPLETED" and job["job_id"] == JOB_ID and job["flavor"] == "a10g-small"
    assert job["job_url"] == f"{ENDPOINT}/jobs/rhythm-org/{JOB_ID}"

    # the token: only ever the secret
    assert CANARY not in script and not any(CANARY in a for a in args)
    assert not any(CANARY in line for line in logged)
    assert CANARY not in json.dumps(job, default=str)


def test_grpo_ships_the_init_checkpoint_and_namespace_defaults_to_the_user(make_hub, inputs):
    hub = make_hub(user="alice")
    spec = HFJobSpec(flavor="l4x1", timeout="30m", image="pytorch/pytorch:2.6.0-cuda12.4-cudnn9-devel", python=None)
    job, _ = _run(hub, inputs, stage="grpo", spec=spec, with_init=True)
    assert hub.called("whoami") == [{"token": CANARY}]
    sub = hub.called("run_uv_job")[0]
    assert sub["namespace"] == "alice" and sub["flavor"] == "l4x1" and sub["timeout"] == 1800  # "30m", in seconds
    assert sub["image"] == "pytorch/pytorch:2.6.0-cuda12.4-cudnn9-devel" and "python" not in sub
    assert "--init" in sub["script_args"] and "--stage=grpo" in sub["script_args"]
    staged = hub.files("dataset", "alice/rhythm-jobs", job["input_revision"])
    assert f"runs/{job['run_key']}/init/adapter_model.safetensors" in staged
    argv = hub.job_side["entry_argv"]
    assert Path(argv[argv.index("--init") + 1]).name == "init"
    assert job["hub_repo_id"] == "alice/rhythm-grpo" and job["result"]["init_files"] == ["adapter_model.safetensors"]
    assert job["run_key"].startswith("grpo-")


def test_training_on_a_two_gpu_flavor_runs_the_entry_under_torchrun_on_two_processes(make_hub, inputs):
    hub = make_hub()
    job, logged = _run(hub, inputs, spec=HFJobSpec(namespace="rhythm-org", flavor="a10g-largex2"))
    sub = hub.called("run_uv_job")[0]
    assert sub["flavor"] == "a10g-largex2" and "--processes=2" in sub["script_args"]
    assert hub.job_side["launcher"] == ["-m", "rhythm_core.compute.launch", "--processes=2"]
    assert "'processes': 2" in hub.script_text  # the script's own defaults say it too
    assert (job["gpus"], job["processes"]) == (2, 2) and job["cost"]["usd_per_hour"] == 3.00
    assert any("a10g-largex2 at $3.00/h" in line and "2 GPU(s), 2 process(es)" in line for line in logged)


def test_one_gpu_flavors_and_play_run_the_entry_on_one_plain_process(make_hub, inputs):
    hub = make_hub()
    job, _ = _run(hub, inputs)  # a10g-small
    assert hub.job_side["launcher"] == [] and "--processes=1" in hub.called("run_uv_job")[0]["script_args"]
    assert (job["gpus"], job["processes"]) == (1, 1)
    ns = _script_namespace()
    assert ns["entry_command"]("rhythm_core.evaluation.entry", 1) == [sys.executable, "-m", "rhythm_core.evaluation.entry"]


def test_failed_job_raises_with_id_message_and_log_tail(make_hub, inputs):
    hub = make_hub(run_stage=crashing_run_stage)
    spec = HFJobSpec(namespace="rhythm-org", log_tail_lines=6)
    with pytest.raises(HFJobError) as err:
        _run(hub, inputs, spec=spec)
    text = str(err.value)
    assert JOB_ID in text and "ERROR" in text and "Job failed with exit code: 1" in text
    assert "CUDA out of memory" in text  # the traceback's last line is in the tail
    assert "rhythm_core.training.entry exited with code 1" in text
    assert err.value.log_tail == hub.log_lines[-6:] and len(err.value.log_tail) == 6
    assert hub.log_lines[0] not in text  # only the tail
    assert err.value.job_id == JOB_ID and err.value.stage == "ERROR"
    assert not hub.called("cancel_job") and ("model", "rhythm-org/rhythm-sft") not in hub.repos
    assert CANARY not in text


def test_tampered_wheel_fails_the_job(make_hub, inputs):
    hub = make_hub(corrupt_wheel=True)
    with pytest.raises(HFJobError, match="expected"):
        _run(hub, inputs)
    assert hub.job_side["installed"] == [] and "entry_argv" not in hub.job_side


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt(), pytest.param("dagster", id="dagster-interrupt")])
def test_interrupt_while_following_cancels_the_job_once(make_hub, inputs, interrupt):
    if interrupt == "dagster":
        dagster = pytest.importorskip("dagster")
        interrupt = dagster.DagsterExecutionInterruptedError()
    hub = make_hub(interrupt_at=(3, interrupt))
    with pytest.raises(type(interrupt)):
        _run(hub, inputs)
    assert hub.called("cancel_job") == [{"job_id": JOB_ID, "namespace": "rhythm-org", "token": CANARY}]
    assert not hub.called("inspect_job")


def test_failing_callback_cancels_the_job(make_hub, inputs):
    hub = make_hub()

    def on_metrics(entry):
        raise ValueError("metrics sink is down")

    with pytest.raises(ValueError, match="metrics sink"):
        _run(hub, inputs, on_metrics=on_metrics)
    assert len(hub.called("cancel_job")) == 1


def test_broken_log_stream_falls_back_to_polling_and_reads_the_rest(make_hub, inputs):
    hub = make_hub(break_at=2)
    metrics: list[dict] = []
    job, logged = _run(hub, inputs, on_metrics=metrics.append)
    assert job["status"] == "COMPLETED" and job["hub_repo_id"] == "rhythm-org/rhythm-sft"
    assert not hub.called("cancel_job")
    assert [a["follow"] for a in hub.called("fetch_job_logs")] == [True, False]
    assert any("broke off" in line and "ConnectionError" in line for line in logged)
    job_lines = [line for line in logged if not line.startswith("[hf-jobs]")]
    assert job_lines == hub.log_lines  # every line once, none twice
    assert len(metrics) == 2


def test_token_printed_by_the_job_is_redacted(make_hub, inputs):
    hub = make_hub(inject_lines=[f"env: HF_TOKEN={CANARY}"])
    job, logged = _run(hub, inputs)
    assert "env: HF_TOKEN=***" in logged
    assert not any(CANARY in line for line in logged)
    assert CANARY not in json.dumps(job, default=str)


def test_completed_job_without_result_line_raises(make_hub, inputs):
    hub = make_hub(drop_result_line=True)
    with pytest.raises(HFJobError, match=f"{JOB_ID} ended COMPLETED.*no usable RHYTHM_JOB_RESULT"):
        _run(hub, inputs)
    assert [a["follow"] for a in hub.called("fetch_job_logs")] == [True, False]  # looked again


def test_arguments_are_checked_before_anything_is_uploaded(make_hub, inputs):
    hub = make_hub()
    with pytest.raises(ValueError, match="grpo stage needs init_dir"):
        _run(hub, inputs, stage="grpo")
    with pytest.raises(ValueError, match="unknown stage"):
        _run(hub, inputs, stage="dpo")
    with pytest.raises(ValueError, match="token"):
        _run(hub, inputs, token=None)
    assert hub.calls == []
    hub.token = CANARY  # an HfApi(token=...) carries its own
    job, _ = _run(hub, inputs, token=None)
    assert hub.called("run_uv_job")[0]["secrets"] == {"HF_TOKEN": CANARY}


def test_run_key_depends_on_code_config_and_inputs(inputs, tmp_path):
    key = run_key_for("sft", "a" * 64, CONFIG, inputs["dataset"], None, PROVENANCE)
    assert key == run_key_for("sft", "a" * 64, dict(reversed(CONFIG.items())), inputs["dataset"], None, PROVENANCE)
    assert key != run_key_for("sft", "b" * 64, CONFIG, inputs["dataset"], None, PROVENANCE)
    assert key != run_key_for("sft", "a" * 64, {**CONFIG, "max_steps": 4}, inputs["dataset"], None, PROVENANCE)
    (inputs["dataset"] / "train" / "data-00000-of-00001.arrow").write_bytes(b"other rows")
    assert key != run_key_for("sft", "a" * 64, CONFIG, inputs["dataset"], None, PROVENANCE)


def _rendered_script() -> str:
    return render_job_script(stage="sft", run_key="sft-0123456789ab", staging_repo="o/rhythm-jobs",
                             input_revision="f" * 40,
                             wheels=["openenv_rhythm_env-0.1.0-py3-none-any.whl", "rhythm-0.1.0-py3-none-any.whl"],
                             code_version="c" * 64, result_repo="o/rhythm-sft", init=False, provenance=True)


def _script_namespace() -> dict:
    ns = {"__name__": "rhythm_job"}
    exec(compile(_rendered_script(), "rhythm_sft_job.py", "exec"), ns)
    return ns


def test_job_script_defaults_stream_and_missing_token(monkeypatch, capsys):
    ns = _script_namespace()
    assert ns["JOB_RESULT_PREFIX"] == JOB_RESULT_PREFIX
    args = ns["parse_args"]([])
    assert (args.input_revision, args.init, args.provenance) == ("f" * 40, False, True)
    code = ns["stream"]([sys.executable, "-c", "import sys; print('one'); print('two', file=sys.stderr); sys.exit(3)"])
    assert code == 3
    assert capsys.readouterr().out.splitlines()[-2:] == ["one", "two"]
    monkeypatch.delenv("HF_TOKEN", raising=False)
    assert ns["main"]([]) == 2
    assert "HF_TOKEN is not set" in capsys.readouterr().err


def test_job_script_is_the_source_of_an_importable_module():
    from rhythm_core.compute import hf_job_script

    source = inspect.getsource(hf_job_script)
    script = _rendered_script()
    kept = [line for line in source.splitlines() if not line.startswith("DEFAULTS")]
    assert all(line in script.splitlines() for line in kept)  # only the DEFAULTS line is written in
    args = hf_job_script.parse_args(["--stage=grpo", "--init"])  # as a module, the options come from argv
    assert (args.stage, args.init, args.provenance, args.run_key) == ("grpo", True, None, None)


def test_rebase_paths_moves_paths_under_the_job_directory_only():
    from rhythm_core.store import rebase_paths

    result = {"path": "/tmp/rhythm-job-x/out", "model_dir": "/tmp/rhythm-job-x/out/model", "steps": 3,
              "base_path": "tiny", "sibling": "/tmp/rhythm-job-x/outside"}
    assert rebase_paths(result, "/tmp/rhythm-job-x/out", "/data/staged") == {
        "path": "/data/staged", "model_dir": "/data/staged/model", "steps": 3, "base_path": "tiny",
        "sibling": "/tmp/rhythm-job-x/outside"}


def test_build_wheels_packages_the_working_tree_as_its_two_distributions(tmp_path):
    from rhythm_core.compute.wheels import build_wheels

    root = Path(__file__).resolve().parents[1]
    had_build_dir = {folder: (folder / "build").exists() for folder in (root, root / "envs" / "rhythm_env")}
    env_wheel, wheel = build_wheels(root, dest=tmp_path / "a")
    assert env_wheel.name.startswith("openenv_rhythm_env-") and wheel.name.startswith("rhythm-")
    env_names, names = zipfile.ZipFile(env_wheel).namelist(), zipfile.ZipFile(wheel).namelist()
    assert all(w.name.endswith("-py3-none-any.whl") for w in (env_wheel, wheel))
    # each distribution under its own top-level names: the environment's layers in its wheel alone
    assert "rhythm_env/sim/spec.py" in env_names and "rhythm_env/text/week.py" in env_names
    assert "rhythm_env/openenv.yaml" in env_names and "rhythm_env/server/app.py" in env_names
    assert "rhythm_core/training/entry.py" in names and "rhythm_core/compute/hf_jobs.py" in names
    assert {n.split("/")[0] for n in env_names if ".dist-info/" not in n} == {"rhythm_env"}  # nothing of rhythm_core
    assert not any(n.startswith(("rhythm_env/", "rhythm_core/env/", "envs/")) for n in names)
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "Requires-Dist: openenv-rhythm-env" in metadata.splitlines()  # installed beside it in the job
    assert not any("__pycache__" in n for n in env_names + names)
    again = build_wheels(root, dest=tmp_path / "b")  # same code, same bytes, same code version
    assert [w.read_bytes() for w in again] == [env_wheel.read_bytes(), wheel.read_bytes()]
    # built from a copy, not in the working tree
    assert {folder: (folder / "build").exists() for folder in had_build_dir} == had_build_dir


def test_fetch_training_result_downloads_the_revision_and_localizes_paths(make_hub, inputs, tmp_path):
    from rhythm_core.compute.hf_jobs import fetch_training_result
    from rhythm_core.training.publish import publish_checkpoint

    hub = make_hub()
    job, _ = _run(hub, inputs)
    out = tmp_path / "local_copy"
    result = fetch_training_result(job, out, download=hub.snapshot_download)
    download = hub.called("snapshot_download")[-1]
    assert (download["repo_id"], download["revision"]) == (job["hub_repo_id"], job["hub_revision"])
    on_disk = json.loads((out / "result.json").read_text())
    assert {k: v for k, v in result.items() if k != "hf_job"} == {k: v for k, v in on_disk.items() if k != "hf_job"}
    assert result == on_disk  # the job summary is on disk too, so publish_checkpoint (which re-reads it) keeps it
    job_paths = [v for v in on_disk.values() if isinstance(v, str) and v.startswith("/")]
    assert job_paths and all(v.startswith(str(out)) for v in job_paths)
    assert result["hf_job"]["job_id"] == job["job_id"] and result["hf_job"]["hub_revision"] == job["hub_revision"]
    assert CANARY not in json.dumps(result)
    published = publish_checkpoint(out, tmp_path / "root", "sft_checkpoint")  # what the asset reports from
    assert published["hf_job"] == result["hf_job"]
    assert Path(published["model_dir"]).parent == Path(published["path"]) and Path(published["model_dir"]).is_dir()
    with pytest.raises(HFJobError, match="holds no result.json"):
        fetch_training_result(job, tmp_path / "empty", download=lambda *a, **k: None)


def test_a_play_job_file_that_does_not_match_its_manifest_entry_lands_nowhere(tmp_path):
    """The students' play job's trajectory files come back through its result repo: a file whose
    bytes differ from its sha256 manifest entry fails naming the job, and nothing reaches `out_dir`."""
    import hashlib

    from rhythm_core.compute.hf_jobs import run_play_job

    model = tmp_path / "sft_model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    good = b'{"seed": 0}\n'
    job = {"job_id": "job-1", "status": "COMPLETED", "hub_repo_id": "alice/rhythm-play", "hub_revision": "abc",
           "remote_out_dir": "/job/out", "job_url": "http://hub/jobs/job-1"}
    seen = {}

    def run(stage, config, init_dir):
        seen.update(stage=stage, config=config, folders=sorted(p.name for p in Path(init_dir).iterdir()))
        return job

    def download(repo_id, revision, local_dir):  # the repo as the job published it, one file altered since
        entry = {"player": "student_sft", "condition": "ood", "sha256": hashlib.sha256(good).hexdigest()}
        Path(local_dir).mkdir(parents=True)
        Path(local_dir, "result.json").write_text(json.dumps({"files": {"student_sft__ood.jsonl": entry}}))
        Path(local_dir, "student_sft__ood.jsonl").write_bytes(b'{"seed": 1}\n')

    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(HFJobError, match="job job-1: student_sft__ood.jsonl does not match its manifest entry") as info:
        run_play_job({"condition": "ood", "seeds": "10000"}, {"student_sft": str(model)}, out, threads=2, run=run,
                     download=download)
    assert info.value.job_id == "job-1" and info.value.job_url == "http://hub/jobs/job-1"
    assert seen["stage"] == "play" and seen["folders"] == ["student_sft"]
    assert seen["config"]["recorded_as"] == {"student_sft": str(model)} and seen["config"]["threads"] == 2
    assert list(out.iterdir()) == []
