# /// script
# requires-python = ">=3.11"
# dependencies = [
#     "huggingface_hub>=0.34",
# ]
# ///
"""One rhythm stage on Hugging Face Jobs (training, or the students' evaluation play): the uv script
(PEP 723) that `hf_jobs` submits.

`hf_jobs.render_job_script` ships this file's source with the run's values written in as DEFAULTS
(the job's arguments carry the same values). In the job it downloads runs/<run_key>/ from the
staging dataset repo at a pinned revision, checks and installs the shipped wheels (the environment
package's and rhythm's, in one install: the environment's is on no index), runs
`python -m rhythm_core.training.entry` (sft, grpo; under torchrun, one process per GPU, on a
multi-GPU flavor) or `python -m rhythm_core.evaluation.entry` (play), uploads its output directory to the result model repo and
prints `RHYTHM_JOB_RESULT {json}` last. HF_TOKEN comes from the job's secrets and is never printed.

It runs before the wheels are installed, with only huggingface_hub: it imports nothing from rhythm_core.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

JOB_RESULT_PREFIX = "RHYTHM_JOB_RESULT "
ENTRY_MODULES = {"sft": "rhythm_core.training.entry", "grpo": "rhythm_core.training.entry",
                 "play": "rhythm_core.evaluation.entry"}

# The run's values, written in at submission (hf_jobs.render_job_script); the job's arguments carry the
# same values. Run as a module, every option comes from the command line.
DEFAULTS: dict = {}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Run one rhythm stage from staged inputs.")
    parser.add_argument("--stage", default=DEFAULTS.get("stage"), choices=list(ENTRY_MODULES))
    parser.add_argument("--run-key", default=DEFAULTS.get("run_key"))
    parser.add_argument("--staging-repo", default=DEFAULTS.get("staging_repo"))
    parser.add_argument("--input-revision", default=DEFAULTS.get("input_revision"))
    parser.add_argument("--wheels", type=lambda text: text.split(","), default=DEFAULTS.get("wheels"),
                        help="the staged wheels, comma-separated, in the order code_version_of hashes them")
    parser.add_argument("--code-version", default=DEFAULTS.get("code_version"))
    parser.add_argument("--result-repo", default=DEFAULTS.get("result_repo"))
    parser.add_argument("--init", action=argparse.BooleanOptionalAction, default=DEFAULTS.get("init"))
    parser.add_argument("--provenance", action=argparse.BooleanOptionalAction, default=DEFAULTS.get("provenance"))
    parser.add_argument("--processes", type=int, default=DEFAULTS.get("processes", 1),
                        help="processes that run the entry point, one per GPU (more than 1: under torchrun)")
    parser.add_argument("--workdir", default=None, help="default: a new temporary directory")
    return parser.parse_args(argv)


def sha256_file(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def code_version_of(wheels) -> str:
    """The code version of the wheels a job installs: sha256 over each wheel's file name and sha256, in order."""
    digest = hashlib.sha256()
    for wheel in wheels:
        digest.update(f"{Path(wheel).name} {sha256_file(wheel)}\n".encode())
    return digest.hexdigest()


def install_wheels(wheels: list[Path]) -> None:
    """Install the wheels (and their dependencies) into this interpreter, in one call: rhythm's dependency
    on the environment package is then met by its wheel here."""
    if shutil.which("uv"):
        cmd = ["uv", "pip", "install", "--python", sys.executable, *map(str, wheels)]
    else:
        cmd = [sys.executable, "-m", "pip", "install", *map(str, wheels)]
    print("+ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def stream(cmd: list[str]) -> int:
    """Run `cmd`, echoing its output line by line into the job log; returns its exit code."""
    print("+ " + " ".join(cmd), flush=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                          env=env) as proc:
        for line in proc.stdout:
            print(line.rstrip("\n"), flush=True)
        return proc.wait()


def entry_command(entry: str, processes: int) -> list[str]:
    """`python -m entry` on one process; on more, under torchrun on this node through the installed
    wheel's launcher (rhythm_core.compute.launch.launch_command: no restarts, a failed rank in one line).
    Written out here: this script cannot import rhythm_core, it only runs it once the wheels are in."""
    if processes <= 1:
        return [sys.executable, "-m", entry]
    return [sys.executable, "-m", "rhythm_core.compute.launch", f"--processes={processes}", "-m", entry]


def main(argv=None) -> int:
    args = parse_args(argv)
    token = os.environ.get("HF_TOKEN")
    if not token:
        print("HF_TOKEN is not set: the job needs it as a secret", file=sys.stderr, flush=True)
        return 2
    from huggingface_hub import HfApi, snapshot_download

    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="rhythm-job-"))
    prefix = f"runs/{args.run_key}"
    print(f"inputs: {args.staging_repo}@{args.input_revision}/{prefix}", flush=True)
    local = snapshot_download(args.staging_repo, repo_type="dataset", revision=args.input_revision,
                              allow_patterns=[f"{prefix}/*"], local_dir=str(work / "staging"), token=token)
    inputs = Path(local) / prefix
    wheels = [inputs / name for name in args.wheels]
    version = code_version_of(wheels)
    if version != args.code_version:
        print(f"the wheels {', '.join(args.wheels)} have code version {version}, expected {args.code_version}",
              file=sys.stderr, flush=True)
        return 3
    install_wheels(wheels)

    out = work / "out"
    entry = ENTRY_MODULES[args.stage]
    cmd = [*entry_command(entry, args.processes), "--config", str(inputs / "config.json"), "--out", str(out)]
    if args.stage == "play":  # the students' model folders are the staged init/
        cmd += ["--checkpoints", str(inputs / "init")]
    else:
        cmd += ["--stage", args.stage, "--dataset", str(inputs / "dataset")]
        if args.init:
            cmd += ["--init", str(inputs / "init")]
        if args.provenance:
            cmd += ["--provenance", str(inputs / "provenance.json")]
    code = stream(cmd)
    if code != 0:
        print(f"{entry} exited with code {code}", file=sys.stderr, flush=True)
        return code
    result = json.loads((out / "result.json").read_text())

    api = HfApi(token=token)
    api.create_repo(args.result_repo, repo_type="model", private=True, exist_ok=True)
    source = {"run_key": args.run_key, "code_version": args.code_version,
              "inputs": f"{args.staging_repo}@{args.input_revision}"}
    commit = api.upload_folder(repo_id=args.result_repo, folder_path=str(out), repo_type="model",
                               commit_message=f"rhythm {args.stage} run {args.run_key}",
                               commit_description=json.dumps(source, sort_keys=True),
                               delete_patterns="*")
    record = {"repo_id": args.result_repo, "revision": commit.oid, "out_dir": str(out), **source, "result": result}
    print(JOB_RESULT_PREFIX + json.dumps(record, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
