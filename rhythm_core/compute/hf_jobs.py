"""Run a stage that needs a model on Hugging Face Jobs with the exact local code: training (sft,
grpo) and the students' evaluation play (play).

The job runs the same entry point as the local subprocess (`python -m rhythm_core.training.entry`,
or `python -m rhythm_core.evaluation.entry` for play):

1. the working tree is built into wheels, the environment package's (envs/rhythm_env, which rhythm
   depends on) and rhythm's; a hash of their sha256s is the code version (`code_version_of`);
2. the wheels and the inputs (dataset, init checkpoint, config.json, provenance.json) are uploaded to
   the private dataset repo `{namespace}/{staging_repo}` under `runs/{run_key}/`, where `run_key` is
   the stage plus a hash of (code version, config, inputs), so identical inputs reuse one folder;
   the commit oid pins the inputs' revision;
3. the uv script (PEP 723) `hf_job_script.py`, with the run's values written in, is submitted with
   `HfApi.run_uv_job`; inside the job it downloads `runs/{run_key}` at that revision, checks the
   wheels' code version, installs them, runs the entry point (its output is the job log), uploads the
   output directory to the private model repo `{namespace}/{result_repo_prefix}-{stage}` (each
   commit holds exactly one run's outputs) and prints `RHYTHM_JOB_RESULT {json}` with the repo id
   and commit oid;
4. the job's logs are followed (every line goes to `log`, `RHYTHM_LOG` entries to `on_metrics`)
   until the job ends; an interruption of the caller cancels the job.

The token only travels as the job secret HF_TOKEN (and authenticates the API calls): it is never
written into the script, its arguments, the environment, the logs or the returned record.
Hub and Jobs calls go through the injected `api` (an `HfApi` or a test double).
"""

from __future__ import annotations

import hashlib
import json
import os
import pprint
import shutil
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..store import LOG_PREFIX, rebase_paths, sha256_dir, sha256_file, write_result
from . import hf_job_script
from .costs import billed, default_timeout_s, flavor_gpus, job_budget, parse_timeout
from .hf_job_script import JOB_RESULT_PREFIX, code_version_of
from .wheels import build_wheels

STAGES = ("sft", "grpo", "play")
# Stages after which a job never runs again (huggingface_hub's TERMINAL_JOB_STAGES).
TERMINAL_STAGES = frozenset({"COMPLETED", "CANCELED", "ERROR", "DELETED"})
HUB_DEPENDENCY = "huggingface_hub>=0.34"  # as in hf_job_script's PEP 723 block
# The line of hf_job_script that render_job_script replaces with the run's values (config, inputs, revision).
_DEFAULTS_LINE = "DEFAULTS: dict = {}\n"


class HFJobError(RuntimeError):
    """A Hugging Face job ended without a usable result (failed, canceled, or no result line)."""

    def __init__(self, message: str, *, job_id: str, stage: str | None, status_message: str | None,
                 log_tail: list[str], job_url: str | None = None, cost: dict | None = None):
        super().__init__(message)
        self.cost = cost
        self.job_id = job_id
        self.stage = stage
        self.status_message = status_message
        self.log_tail = log_tail
        self.job_url = job_url

    @classmethod
    def in_result(cls, job: dict, problem: str) -> HFJobError:
        """A finished job whose published result is unusable (`problem` says how)."""
        return cls(f"job {job['job_id']}: {problem}", job_id=job["job_id"], stage=job.get("status"),
                   status_message=None, log_tail=[], job_url=job.get("job_url"))


@dataclass
class HFJobSpec:
    flavor: str = "a10g-small"
    timeout: str | None = None  # "2h", "45m" or seconds; None: from the stage's size (costs.default_timeout_s)
    max_usd: float | None = None  # refuse a job whose cost cap (price per hour × timeout) is above this
    namespace: str | None = None  # user/org that owns the staging repo, the result repo and the job
    image: str | None = None  # None: the uv job default image
    python: str | None = "3.11"
    staging_repo: str = "rhythm-jobs"  # dataset repo for the wheels + inputs
    result_repo_prefix: str = "rhythm"  # model repo "{namespace}/{prefix}-{stage}" for outputs
    log_tail_lines: int = 40


# --------------------------------------------------------------------------------------------------
# The job script


def render_job_script(*, stage: str, run_key: str, staging_repo: str, input_revision: str, wheels: list[str],
                      code_version: str, result_repo: str, init: bool, provenance: bool, processes: int = 1) -> str:
    """The uv script a job runs: the source of `hf_job_script` with the values written in as its
    DEFAULTS (the job also gets them as args)."""
    defaults = {"stage": stage, "run_key": run_key, "staging_repo": staging_repo, "input_revision": input_revision,
                "wheels": list(wheels), "code_version": code_version, "result_repo": result_repo, "init": bool(init),
                "provenance": bool(provenance), "processes": int(processes)}
    source = Path(hf_job_script.__file__).read_text(encoding="utf-8")
    if source.count(_DEFAULTS_LINE) != 1:
        raise RuntimeError(f"{hf_job_script.__file__} must hold the line {_DEFAULTS_LINE.strip()!r} exactly once")
    return source.replace(_DEFAULTS_LINE, f"DEFAULTS = {pprint.pformat(defaults, width=100, sort_dicts=False)}\n")


def _script_args(*, stage, run_key, staging_repo, input_revision, wheels, code_version, result_repo, init,
                 provenance, processes=1) -> list[str]:
    # `--name=value` forms: run_uv_job uploads any argument that names a local file, and no value here should.
    return [f"--stage={stage}", f"--run-key={run_key}", f"--staging-repo={staging_repo}",
            f"--input-revision={input_revision}", f"--wheels={','.join(wheels)}", f"--code-version={code_version}",
            f"--result-repo={result_repo}", "--init" if init else "--no-init",
            "--provenance" if provenance else "--no-provenance", f"--processes={processes}"]


# --------------------------------------------------------------------------------------------------
# Helpers


def link_or_copy(src, dst):
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


def _repo_id(namespace: str, name: str) -> str:
    return name if "/" in name else f"{namespace}/{name}"


def _redact(text: str, token: str) -> str:
    return text.replace(token, "***") if token and token in text else text


def _stage_name(info) -> str | None:
    stage = getattr(getattr(info, "status", None), "stage", None)
    return getattr(stage, "value", stage)


def _status_message(info) -> str | None:
    return getattr(getattr(info, "status", None), "message", None)


def _payload(line: str, prefix: str):
    """The JSON after `prefix` in `line`, or None when the line has none (or it does not parse)."""
    at = line.find(prefix)
    if at < 0:
        return None
    try:
        return json.loads(line[at + len(prefix):])
    except ValueError:
        return None


def run_key_for(stage: str, code_version: str, config: dict, dataset_dir, init_dir=None,
                provenance: dict | None = None) -> str:
    """`{stage}-{12 hex}`: a hash of the code version, the config and the inputs' contents."""
    material = {"code_version": code_version, "config": config,
                "dataset": sha256_dir(dataset_dir) if dataset_dir else None,
                "init": sha256_dir(init_dir) if init_dir else None, "provenance": provenance}
    digest = hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()
    return f"{stage}-{digest[:12]}"


# --------------------------------------------------------------------------------------------------
# Running a job


def run_job(stage: str, config: dict, *, dataset_dir=None, init_dir=None, provenance: dict | None = None, api,
            spec: HFJobSpec, project_root, token: str | None, log: Callable[[str], None],
            on_metrics: Callable[[dict], None] | None = None, poll_interval: float = 5.0,
            wheels: list[Path] | None = None) -> dict:
    """Run one stage on Hugging Face Jobs; returns the job's record (see the module doc). Training
    stages read `dataset_dir` (and `init_dir`, the checkpoint GRPO starts from); play reads
    `init_dir`, a folder holding each student's model folder.

    Raises HFJobError when the job ends in any stage but COMPLETED or prints no result line. If the
    caller is interrupted (any exception, KeyboardInterrupt, Dagster's interruption) while the job
    runs, the job is canceled and the exception re-raised."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; allowed: {', '.join(STAGES)}")
    if stage in ("grpo", "play") and not init_dir:
        raise ValueError(f"the {stage} stage needs init_dir (the model folder{'s' if stage == 'play' else ''} "
                         "it starts from)")
    if stage != "play":
        dataset_dir = Path(dataset_dir)
        if not dataset_dir.is_dir():
            raise FileNotFoundError(f"dataset directory {dataset_dir} does not exist")
    if init_dir is not None and not Path(init_dir).is_dir():
        raise FileNotFoundError(f"init directory {init_dir} does not exist")
    token = token or getattr(api, "token", None)
    if not isinstance(token, str) or not token:
        raise ValueError("a Hugging Face token is needed: the job reads the private staging repo with it")
    # What the job may cost, before anything is uploaded: a refused job costs nothing.
    timeout_s = parse_timeout(spec.timeout) if spec.timeout else default_timeout_s(stage, config)
    budget = job_budget(spec.flavor, timeout_s, max_usd=spec.max_usd, api=api, token=token)
    gpus = flavor_gpus(spec.flavor, api, token)
    processes = max(1, gpus) if stage != "play" else 1  # training: one process per GPU; play: one process
    log(f"[hf-jobs] {stage} job may cost {budget.describe()}; {gpus} GPU(s), {processes} process(es)")
    namespace = spec.namespace or api.whoami(token=token)["name"]
    staging_repo_id = _repo_id(namespace, spec.staging_repo)
    result_repo_id = _repo_id(namespace, f"{spec.result_repo_prefix}-{stage}")

    with tempfile.TemporaryDirectory(prefix="rhythm-hf-job-") as tmp:
        tmp = Path(tmp)
        # 1. The code and the inputs, in one commit of the staging repo.
        if wheels is None:
            log(f"[hf-jobs] building the wheels of {project_root}")
            wheels = build_wheels(project_root, dest=tmp / "wheel")
        wheels = [Path(wheel) for wheel in wheels]
        for wheel in wheels:
            if wheel.suffix != ".whl" or not wheel.is_file():
                raise FileNotFoundError(f"{wheel} is not a wheel file")
        code_version = code_version_of(wheels)
        run_key = run_key_for(stage, code_version, config, dataset_dir, init_dir, provenance)
        run_dir = tmp / "run"
        run_dir.mkdir()
        for wheel in wheels:
            link_or_copy(wheel, run_dir / wheel.name)
        (run_dir / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True, default=str) + "\n")
        if provenance is not None:
            (run_dir / "provenance.json").write_text(
                json.dumps(provenance, indent=2, sort_keys=True, default=str) + "\n")
        if dataset_dir is not None:
            shutil.copytree(dataset_dir, run_dir / "dataset", copy_function=link_or_copy)
        if init_dir is not None:
            shutil.copytree(init_dir, run_dir / "init", copy_function=link_or_copy)
        log(f"[hf-jobs] code version {code_version[:12]} ({', '.join(w.name for w in wheels)}); uploading inputs to "
            f"{staging_repo_id}/runs/{run_key}")
        api.create_repo(staging_repo_id, repo_type="dataset", private=True, exist_ok=True, token=token)
        commit = api.upload_folder(repo_id=staging_repo_id, folder_path=str(run_dir), path_in_repo=f"runs/{run_key}",
                                   repo_type="dataset", commit_message=f"rhythm {stage} inputs {run_key}",
                                   token=token)
        input_revision = commit.oid
        log(f"[hf-jobs] inputs at {staging_repo_id}@{input_revision}")

        # 2-3. The job script, submitted as a uv job with the token as its only secret.
        values = {"stage": stage, "run_key": run_key, "staging_repo": staging_repo_id,
                  "input_revision": input_revision, "wheels": [w.name for w in wheels], "code_version": code_version,
                  "result_repo": result_repo_id, "init": init_dir is not None, "provenance": provenance is not None,
                  "processes": processes}
        script = tmp / "job" / f"rhythm_{stage}_job.py"
        script.parent.mkdir()
        script.write_text(render_job_script(**values))
        submit = {"script_args": _script_args(**values), "dependencies": [HUB_DEPENDENCY], "flavor": spec.flavor,
                  "timeout": timeout_s, "labels": {"rhythm_stage": stage, "rhythm_run_key": run_key},
                  "namespace": namespace, "secrets": {"HF_TOKEN": token}, "token": token}
        if spec.python:
            submit["python"] = spec.python
        if spec.image:
            submit["image"] = spec.image
        job = api.run_uv_job(str(script), **submit)
    job_id = job.id
    job_url = getattr(job, "url", None)
    flavor = getattr(job, "flavor", None) or spec.flavor
    flavor = getattr(flavor, "value", flavor)
    log(f"[hf-jobs] submitted job {job_id} ({flavor}, timeout {timeout_s} s): {job_url or 'no url'}")

    # 4. Follow the logs, then wait for a terminal stage; cancel if the caller is interrupted.
    tail: deque[str] = deque(maxlen=max(0, spec.log_tail_lines))
    seen = 0
    job_result: dict | None = None

    def handle(raw) -> None:
        nonlocal job_result
        for line in _redact(str(raw), token).splitlines() or [""]:
            tail.append(line)
            log(line)
            if LOG_PREFIX in line:
                entry = _payload(line, LOG_PREFIX)
                if on_metrics is not None and isinstance(entry, dict):
                    on_metrics(entry)
            elif JOB_RESULT_PREFIX in line:
                payload = _payload(line, JOB_RESULT_PREFIX)
                if isinstance(payload, dict):
                    job_result = payload

    stream_broke = False

    def broke_off(exc: Exception) -> None:
        # The log stream failed, not the caller: the job goes on, so wait for its status instead.
        nonlocal stream_broke
        stream_broke = True
        log(f"[hf-jobs] log stream of job {job_id} broke off ({_redact(repr(exc), token)}); polling its status")

    try:
        try:
            events = iter(api.fetch_job_logs(job_id=job_id, namespace=namespace, follow=True, token=token))
        except Exception as exc:
            events = None
            broke_off(exc)
        while events is not None:
            try:
                raw = next(events)
            except StopIteration:
                break
            except Exception as exc:
                broke_off(exc)
                break
            seen += 1
            handle(raw)  # a failing log or on_metrics callback interrupts the caller: the job is canceled
        last_stage = None
        while True:
            info = api.inspect_job(job_id=job_id, namespace=namespace, token=token)
            stage_name = _stage_name(info)
            if stage_name != last_stage:
                log(f"[hf-jobs] job {job_id}: {stage_name}")
                last_stage = stage_name
            if stage_name in TERMINAL_STAGES:
                break
            time.sleep(poll_interval)
    except BaseException:
        try:
            api.cancel_job(job_id=job_id, namespace=namespace, token=token)
            log(f"[hf-jobs] canceled job {job_id}")
        except Exception as exc:
            log(f"[hf-jobs] could not cancel job {job_id}: {_redact(repr(exc), token)}")
        raise

    if stream_broke or job_result is None:
        # The stream may have missed lines (broke off, or ended before the last ones): read the whole log.
        try:
            lines = list(api.fetch_job_logs(job_id=job_id, namespace=namespace, follow=False, token=token))
        except Exception as exc:
            lines = []
            log(f"[hf-jobs] could not read the logs of job {job_id}: {_redact(repr(exc), token)}")
        for raw in lines[seen:]:
            handle(raw)

    message = _status_message(info)
    message = _redact(message, token) if isinstance(message, str) else message
    cost = {**budget.as_dict(), **billed(info, budget.usd_per_hour)}
    log(f"[hf-jobs] job {job_id} billed {cost['billed_minutes']} min: ${cost['cost_usd']:.4f}")
    if stage_name != "COMPLETED" or job_result is None or not job_result.get("repo_id") \
            or not job_result.get("revision"):
        why = f"ended {stage_name}: {message or '(no status message)'}"
        if stage_name == "COMPLETED":
            why += f" but printed no usable {JOB_RESULT_PREFIX.strip()} line"
        elif "timeout" in (message or "").lower() or cost["running_s"] >= timeout_s:
            why += (f" — it hit its timeout of {timeout_s} s (set ComputeResource.hf_timeout to give the stage "
                    "longer)")
        raise HFJobError(
            f"Hugging Face job {job_id} {why}\njob: {job_url or '(no url)'}\n"
            f"last {len(tail)} log lines:\n" + "\n".join(tail),
            job_id=job_id, stage=stage_name, status_message=message, log_tail=list(tail), job_url=job_url, cost=cost)

    return {"job_id": job_id, "job_url": job_url, "status": stage_name, "code_version": code_version,
            "input_revision": input_revision, "staging_repo_id": staging_repo_id, "run_key": run_key,
            "hub_repo_id": job_result["repo_id"], "hub_revision": job_result["revision"],
            "remote_out_dir": job_result.get("out_dir"), "result": job_result.get("result"), "flavor": flavor,
            "gpus": gpus, "processes": processes, "cost": cost}


JOB_SUMMARY_KEYS = ("job_id", "job_url", "status", "code_version", "hub_repo_id", "hub_revision", "flavor", "gpus",
                    "processes", "cost")


def fetch_training_result(job: dict, out_dir, *, download: Callable[..., str]) -> dict:
    """Download a finished job's result repo at its revision into `out_dir` and return its
    result.json with paths moved from the job's filesystem to `out_dir` and an `hf_job` summary
    added (both written back to the file). `download` is `huggingface_hub.snapshot_download` (with a token bound)."""
    download(job["hub_repo_id"], revision=job["hub_revision"], local_dir=str(out_dir))
    path = Path(out_dir, "result.json")
    if not path.exists():
        raise HFJobError.in_result(job, f"{job['hub_repo_id']}@{job['hub_revision']} holds no result.json")
    result = rebase_paths(json.loads(path.read_text()), job["remote_out_dir"], out_dir)
    result["hf_job"] = {k: job.get(k) for k in JOB_SUMMARY_KEYS}  # kept on disk: publishing re-reads it
    write_result(out_dir, result)
    return result


def run_play_job(config: dict, checkpoints: dict[str, str], out_dir, *, threads: int, run: Callable[..., dict],
                 download: Callable[..., str]) -> dict:
    """The students (name -> model folder) play one condition (`config`: condition, seeds, sampling) in a
    job started by `run(stage, config, init_dir=...)` (a bound `run_job`), on hard-linked copies of their
    model folders. The trajectory files come back through the job's result repo, are checked against
    their sha256 manifest entries and land in `out_dir`; the records name the original model paths,
    so they equal a local play's. Returns {"files": manifest entries, "hf_job": the job's summary}."""
    with tempfile.TemporaryDirectory(prefix="rhythm-play-") as tmp:
        folders = Path(tmp) / "checkpoints"
        for name, model_dir in checkpoints.items():
            shutil.copytree(model_dir, folders / name, copy_function=link_or_copy)
        # the same torch threads as a local play (greedy decoding is then the same to the bit)
        # the records name each student as the caller's config does (the store's name), else by its folder
        job_config = {**config, "players": {name: name for name in checkpoints},
                      "recorded_as": {**checkpoints, **(config.get("recorded_as") or {})}, "threads": threads}
        job = run("play", job_config, init_dir=str(folders))
        result = fetch_training_result(job, Path(tmp) / "result", download=download)
        for file, entry in result["files"].items():
            source = Path(tmp) / "result" / file
            if sha256_file(source) != entry["sha256"]:
                raise HFJobError.in_result(job, f"{file} does not match its manifest entry")
            shutil.copyfile(source, Path(out_dir) / file)
    return {"files": result["files"], "hf_job": result["hf_job"]}
