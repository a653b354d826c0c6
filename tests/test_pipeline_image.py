"""deploy/Dockerfile, the pipeline's image (the code location's gRPC server and every run and step pod): its
CMD serves what the Helm values name, its context sends only what it copies, and (slow) its steps carried
out without Docker in a fresh virtualenv give an install that loads the definitions from outside the
repository, passes `dagster definitions validate` and serves the code location over gRPC."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
IGNORE = ROOT / "deploy" / "Dockerfile.dockerignore"  # BuildKit's ignore file for deploy/Dockerfile
PIP_CACHE_MOUNT = "--mount=type=cache,target=/root/.cache/pip"
# The build args the slow test passes: torch from this machine's wheels and index, as `make install` gets it
# (no PyTorch index: the default would download its CPU wheel again).
TEST_BUILD_ARGS = {"TORCH_INDEX_URL": ""}


def dockerfile_steps() -> list[tuple[str, object]]:
    """deploy/Dockerfile's instructions in order, as (instruction, arguments); any instruction or form the slow
    test does not carry out fails here, so the test keeps following the Dockerfile as it changes."""
    steps = []
    text = DOCKERFILE.read_text()
    assert text.startswith("# syntax=docker/dockerfile:1\n")  # BuildKit: the cache mount and the ignore file
    for line in text.replace("\\\n", " ").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        word, _, rest = line.strip().partition(" ")
        rest = rest.strip()
        if word == "FROM":
            assert rest == "python:3.11-slim", line
        elif word == "ARG":
            name, _, default = rest.partition("=")
            steps.append(("ARG", (name, default)))
        elif word == "ENV":
            pairs = dict(item.split("=", 1) for item in shlex.split(rest))
            steps.append(("ENV", pairs))
        elif word == "WORKDIR":
            assert rest.startswith("/opt/"), line
            steps.append(("WORKDIR", rest))
        elif word == "COPY":
            *sources, target = rest.split()
            assert all(not s.startswith(("/", "--")) and ".." not in s for s in sources), line
            steps.append(("COPY", (sources, target)))
        elif word == "RUN":
            assert rest.startswith(PIP_CACHE_MOUNT + " ") and "/opt/" not in rest, line
            steps.append(("RUN", rest[len(PIP_CACHE_MOUNT):].strip()))
        elif word == "CMD":
            steps.append(("CMD", json.loads(rest)))
        else:
            assert word == "EXPOSE", line
    return steps


def ignore_rules() -> list[tuple[bool, str]]:
    """deploy/Dockerfile.dockerignore as (excluded, pattern) in order; the last rule that matches a path or
    one of its folders decides (Docker's rule)."""
    rules = []
    for line in IGNORE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            rules.append((not line.startswith("!"), line.lstrip("!").rstrip("/")))
    return rules


def sent(path: str, rules: list[tuple[bool, str]]) -> bool:
    """Whether the build context holds `path` (relative to the repository root, with /)."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    excluded = False
    for exclude, pattern in rules:
        patterns = {pattern, pattern[3:]} if pattern.startswith("**/") else {pattern}
        if any(fnmatch.fnmatchcase(prefix, p) and (p != "*" or "/" not in prefix)
               for prefix in prefixes for p in patterns):
            excluded = exclude
    return not excluded


def copy_into(image: Path, workdir: str, sources: list[str], target: str, rules) -> None:
    """COPY sources target, from the build context (the repository root, filtered by the ignore file)."""
    dest = image / (target if target.startswith("/") else f"{workdir}/{target}").lstrip("/")
    for source in sources:
        assert sent(source, rules), f"{source} is copied but not in the build context"
        src = ROOT / source
        if src.is_file():
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / src.name)
            continue
        for folder, dirs, files in os.walk(src):
            rel = Path(folder).relative_to(ROOT).as_posix()
            dirs[:] = [d for d in dirs if sent(f"{rel}/{d}", rules)]
            for name in files:
                if sent(f"{rel}/{name}", rules):
                    out = dest / Path(folder).relative_to(src) / name
                    out.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(Path(folder) / name, out)


def test_the_image_serves_what_the_helm_values_name_and_sends_only_what_it_copies():
    steps = dockerfile_steps()
    cmd = next(args for word, args in steps if word == "CMD")
    values = yaml.safe_load((ROOT / "deploy" / "k8s" / "values.yaml").read_text())
    deployment = values["dagster-user-deployments"]["deployments"][0]
    assert cmd == ["dagster", "api", "grpc", "-h", "0.0.0.0", "-p", str(deployment["port"]),
                   *deployment["dagsterApiGrpcArgs"]]
    env = {k: v for word, pairs in steps if word == "ENV" for k, v in pairs.items()}
    assert env["DAGSTER_HOME"] == values["global"]["dagsterHome"]
    rules = ignore_rules()
    copied = [s for word, args in steps if word == "COPY" for s in args[0]]
    assert all(sent(s, rules) for s in copied)
    assert {"envs/rhythm_env", "rhythm_core", "rhythm_pipeline", "pyproject.toml", "requirements.lock"} <= set(copied)
    for left_out in (".venv/bin/python", "dagster_home/storage/runs.db", "benchmarks/results/demo.json",
                     "tests/test_deploy.py", "docs/scaling.md", ".git/HEAD", "rhythm_core/__pycache__/x.pyc",
                     "envs/rhythm_env/openenv_rhythm_env.egg-info/PKG-INFO", "deploy/Dockerfile"):
        assert not sent(left_out, rules), left_out
    assert sent("rhythm_core/store/__init__.py", rules) and sent("envs/rhythm_env/openenv.yaml", rules)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# Run in the image's install from a folder that is neither the repository nor the image's sources.
LOADED = """
import json, rhythm_core, rhythm_pipeline, torch
from rhythm_pipeline.definitions import defs
graph = defs.resolve_asset_graph()
print(json.dumps({"pipeline": rhythm_pipeline.__file__, "core": rhythm_core.__file__, "torch": torch.__version__,
                  "assets": len(list(graph.get_all_asset_keys())), "jobs": len(list(defs.resolve_all_job_defs()))}))
"""


@pytest.mark.slow
def test_the_install_built_by_the_dockerfiles_steps_loads_validates_and_serves_the_code_location(tmp_path):
    """No Docker engine here: the Dockerfile's steps in a fresh virtualenv (no system site-packages) over a copy
    of what its COPY lines take from the build context; the lock pins everything (PIP_CONSTRAINT, as the image's
    own `-c`); then, from another folder, the definitions load, `dagster definitions validate` passes and the
    CMD's gRPC server answers `dagster api grpc-health-check`."""
    venv, image, elsewhere = tmp_path / "venv", tmp_path / "image", tmp_path / "elsewhere"
    elsewhere.mkdir()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "DAGSTER_HOME")},
           "PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "PIP_CONSTRAINT": str(ROOT / "requirements.lock"),
           # not the image's: bytecode is compiled on first import instead of for every installed file
           "PIP_NO_COMPILE": "1", "PIP_QUIET": "1"}
    workdir, rules, cmd = "/", ignore_rules(), None
    for word, args in dockerfile_steps():
        if word == "ARG":
            name, default = args
            env[name] = TEST_BUILD_ARGS.get(name, default)
        elif word == "ENV":
            env.update({k: str(image) + v if v.startswith("/") else v for k, v in args.items()})
        elif word == "WORKDIR":
            workdir = args
            (image / workdir.lstrip("/")).mkdir(parents=True, exist_ok=True)
        elif word == "COPY":
            copy_into(image, workdir, *args, rules)
        elif word == "RUN":  # as Docker runs it: /bin/sh -c, in the WORKDIR; the cache mount is pip's own cache
            subprocess.run(["/bin/sh", "-c", args], check=True, timeout=1800, env=env, cwd=image / workdir.lstrip("/"))
        elif word == "CMD":
            cmd = args

    python = str(venv / "bin" / "python")
    freeze = subprocess.run([python, "-m", "pip", "freeze", "--exclude-editable"], capture_output=True, text=True,
                            check=True, env=env).stdout.splitlines()
    lock = {line.split("==")[0].lower(): line for line in (ROOT / "requirements.lock").read_text().splitlines()
            if "==" in line and not line.startswith("#")}
    off_lock = [line for line in freeze if "==" in line and lock.get(line.split("==")[0].lower(), line) != line]
    assert not off_lock, f"installed beside the lock's versions: {off_lock}"
    installed = {re.split(r"[=@ ]", line)[0].lower() for line in freeze}
    assert {"dagster-k8s", "dagster-postgres", "s3fs", "openenv-rhythm-env", "torch"} <= installed

    found = subprocess.run([python, "-c", LOADED], capture_output=True, text=True, env=env, cwd=elsewhere,
                           timeout=600)
    assert found.returncode == 0, found.stderr[-3000:]
    loaded = json.loads(found.stdout.strip().splitlines()[-1])
    assert loaded["pipeline"].startswith(str(image)) and loaded["core"].startswith(str(image)), loaded
    assert loaded["torch"] == "2.13.0+cpu" and loaded["assets"] >= 8 and loaded["jobs"] >= 8, loaded

    dagster = str(venv / "bin" / "dagster")
    validated = subprocess.run([dagster, "definitions", "validate", "-m", "rhythm_pipeline.definitions"],
                               capture_output=True, text=True, env=env, cwd=elsewhere, timeout=600)
    assert validated.returncode == 0, (validated.stdout + validated.stderr)[-3000:]

    port = free_port()
    assert cmd[:3] == ["dagster", "api", "grpc"]
    served = [dagster, *cmd[1:]]
    served[served.index("-p") + 1], served[served.index("-h") + 1] = str(port), "127.0.0.1"
    server = subprocess.Popen(served, cwd=elsewhere, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    try:
        deadline = time.monotonic() + 300
        while True:
            health = subprocess.run([dagster, "api", "grpc-health-check", "-p", str(port)], capture_output=True,
                                    text=True, env=env, cwd=elsewhere, timeout=60)
            if health.returncode == 0:
                break
            assert server.poll() is None, f"the code server exited: {server.stdout.read()[-3000:]}"
            assert time.monotonic() < deadline, "the code server never answered its health check"
            time.sleep(2)
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(30)
