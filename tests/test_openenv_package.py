"""The OpenEnv environment package envs/rhythm_env (the package rhythm_env): OpenEnv's layout passes
`openenv validate`, it serves the same env as `rhythm serve-env` (one copy of the models), a running server
passes `openenv validate --url`, its wheel holds rhythm_env alone and AutoEnv plays a week from it, and (slow)
it installs in a fresh virtualenv without torch or Dagster, imports from any folder (the repository's root
included), installs nothing under rhythm_core and serves a week that grades as TextWeek grades it."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rhythm_env.sim.spec import ACTIONS, STEPS_PER_EPISODE
from rhythm_env.text import openenv_server
from rhythm_env.text.week import TextWeek

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "envs" / "rhythm_env"

SEED = 2345


def validate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "openenv.cli", "validate", *args], capture_output=True, text=True,
                          timeout=300)


def test_openenv_validate_passes_on_the_package_folder():
    static = validate(str(PACKAGE), "--level", "static", "--skip-build")
    assert static.returncode == 0 and "PASS  static.manifest" in static.stdout and "Verdict: PASS" in static.stdout
    # Every level: the runtime checks are declared (validation.execution) and need the Docker image, which
    # --skip-build skips here; nothing fails.
    full = validate(str(PACKAGE), "--skip-build")
    assert full.returncode == 0 and "FAIL" not in full.stdout, full.stdout
    assert "missing validation.execution" not in full.stdout and "--skip-build" in full.stdout
    for name in ("openenv.yaml", "pyproject.toml", "README.md", "models.py", "client.py", "server/app.py",
                 "server/Dockerfile", ".dockerignore", "validation/runtime.json"):
        assert (PACKAGE / name).is_file(), name
    assert (PACKAGE / "README.md").read_text().startswith("---\ntitle: RhythmEnv")  # the Space front matter
    assert "base_path" not in (PACKAGE / "README.md").read_text().split("---")[1]  # no web interface claimed


def runtime_plan():
    """The week `openenv validate` plays on the built image: openenv.yaml's execution declaration, read by
    OpenEnv's own parser."""
    from openenv.validation.parsers.openenv_yaml import OpenEnvYamlParser
    from openenv.validation.runtime.contracts import load_runtime_plan

    manifest = OpenEnvYamlParser().parse(PACKAGE)
    execution = manifest.execution
    assert (execution.dockerfile, execution.context, execution.kind) == ("server/Dockerfile", ".", "openenv_ws")
    return load_runtime_plan(PACKAGE, execution)


def play_the_runtime_plan(url: str) -> tuple[int, float]:
    """OpenEnv's runtime collector on `url` with the declared plan: (steps played, the last reward); the
    reward is the grade TextWeek gives the same week."""
    from openenv.validation.runtime.collector import collect_runtime_evidence

    runtime = runtime_plan()
    evidence = collect_runtime_evidence(url, runtime, episode_timeout_s=60)
    assert evidence.failure_reason is None, evidence.failure_reason
    steps = [json.loads(e.response_json)["data"] for e in evidence.exchanges if e.operation == "step"]
    state = json.loads(evidence.exchanges[-1].response_json)["data"]
    assert (state["condition"], state["seed"], state["episode_id"]) == (
        runtime.reset.options["condition"], runtime.reset.seed, runtime.reset.episode_id)
    week = TextWeek()
    week.start(runtime.reset.options["condition"], runtime.reset.seed)
    for action in runtime.actions:
        week.act(action["action"], action["social"], action["morning"], action["work"])
    assert steps[-1]["done"] and steps[-1]["reward"] == week.grade()
    return len(steps), steps[-1]["reward"]


def test_the_declared_runtime_probe_plays_a_whole_week():
    from tests.test_openenv_server import served_in_thread

    with served_in_thread(openenv_server.create_rhythm_app(max_sessions=1)) as url:
        assert play_the_runtime_plan(url)[0] == STEPS_PER_EPISODE


def test_the_package_serves_rhythm_cores_env_and_passes_validate_url(monkeypatch):
    import uvicorn

    monkeypatch.syspath_prepend(str(PACKAGE.parent))
    from rhythm_env import RhythmAction, RhythmEnvClient
    from rhythm_env.server import app as app_module

    assert RhythmAction is openenv_server.RhythmAction and RhythmEnvClient is openenv_server.RhythmEnvClient
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app_module.app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started and thread.is_alive():
            thread.join(0.02)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        checked = validate("--url", url)
        assert checked.returncode == 0, checked.stdout
        assert play(RhythmEnvClient, RhythmAction, url) == expected_grade()
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def plan() -> list[tuple[str, float, float, float]]:
    return [(ACTIONS[(t * 3) % len(ACTIONS)], 0.4, t / 27, 0.6) for t in range(STEPS_PER_EPISODE)]


def play(client_cls, action_cls, url: str) -> float:
    with client_cls(base_url=url).sync() as env:
        result = env.reset(condition="continuous", seed=SEED)
        assert result.observation.task.startswith("You are a personal rhythm coach")
        for action, social, morning, work in plan():
            result = env.step(action_cls(action=action, social=social, morning=morning, work=work))
        assert result.done
        return result.reward


def expected_grade() -> float:
    week = TextWeek()
    week.start("continuous", SEED)
    for slot in plan():
        week.act(*slot)
    return week.grade()


def dockerfile_steps() -> dict:
    """server/Dockerfile's instructions, which the slow test carries out without Docker; any other
    instruction fails here, so the test keeps following the Dockerfile as it changes."""
    import shlex

    steps = {"run": []}
    for line in (PACKAGE / "server" / "Dockerfile").read_text().replace("\\\n", " ").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        word, _, rest = line.strip().partition(" ")
        if word == "COPY":
            source, target = rest.split()
            assert source == "." and "copy" not in steps, line
            steps["copy"] = target
        elif word == "RUN":
            steps["run"].append(shlex.split(rest))
        elif word == "CMD":
            steps["cmd"] = json.loads(rest)
        elif word == "WORKDIR":
            steps["workdir"] = rest.strip()
        else:
            assert word in ("FROM", "EXPOSE", "HEALTHCHECK"), line
    return steps


# In the slim install: where the client was imported from, and the top-level folders the package installed.
INSTALLED = """
import importlib.metadata, json
import rhythm_env.client
tops = sorted({path.parts[0] for path in importlib.metadata.files("openenv-rhythm-env")})
print(json.dumps({"client": rhythm_env.client.__file__, "tops": tops}))
"""


@pytest.mark.slow
def test_the_folder_alone_built_by_the_dockerfiles_steps_serves_a_week_without_torch_or_dagster(tmp_path):
    """No Docker engine here: the Dockerfile's steps in a fresh virtualenv (no system site-packages) over a
    copy of envs/rhythm_env alone, the build context (pip under the project's lock, through PIP_CONSTRAINT);
    its CMD on a free port; `openenv validate --url`, the declared runtime week and a client's week."""
    steps = dockerfile_steps()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    image = tmp_path / "image"
    app = image / steps["copy"].lstrip("/")
    shutil.copytree(PACKAGE, app, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",
           "PIP_CONSTRAINT": str(ROOT / "requirements.lock")}
    for command in steps["run"]:
        command = [str(image / a.lstrip("/")) if a.startswith(steps["copy"]) else a for a in command]
        subprocess.run(command, check=True, timeout=1200, env=env, cwd=app)
    missing = subprocess.run([str(venv / "bin" / "python"), "-c", "import importlib.util as u; print([m for m in "
                              "('torch', 'dagster', 'mlflow', 'transformers') if u.find_spec(m)])"],
                             capture_output=True, text=True, env=env)
    assert missing.stdout.strip() == "[]"
    # The package alone imports from any folder: the repository's root (whose rhythm_core/ it does not use)
    # and elsewhere; it installed rhythm_env and nothing under rhythm_core.
    for folder in (ROOT, tmp_path):
        found = subprocess.run([str(venv / "bin" / "python"), "-c", INSTALLED], capture_output=True, text=True,
                               env=env, cwd=folder, timeout=300)
        assert found.returncode == 0, found.stderr[-3000:]
        installed = json.loads(found.stdout)
        assert installed["client"].startswith(str(venv)) and installed["client"].endswith("rhythm_env/client.py")
        assert "rhythm_env" in installed["tops"] and "rhythm_core" not in installed["tops"], installed["tops"]
        assert not (Path(installed["client"]).parents[1] / "rhythm_core").exists()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cmd = steps["cmd"]
    cmd[cmd.index("--port") + 1], cmd[cmd.index("--host") + 1] = str(port), "127.0.0.1"
    server = subprocess.Popen(cmd, cwd=image / steps["workdir"].lstrip("/"), env=env)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while validate("--url", url).returncode != 0:
            assert server.poll() is None and time.monotonic() < deadline, "the installed server never came up"
            time.sleep(1)
        assert play_the_runtime_plan(url)[0] == STEPS_PER_EPISODE
        assert play(openenv_server.RhythmEnvClient, openenv_server.RhythmAction, url) == expected_grade()
    finally:
        server.terminate()
        server.wait(30)
    # The TRL example on this slim install plus trl (torch comes with it, at the lock's CPU build).
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "trl"], check=True, timeout=1200, env=env)
    helped = subprocess.run([str(venv / "bin" / "python"), str(ROOT / "examples" / "grpo_rhythm_env.py"), "--help"],
                            capture_output=True, text=True, timeout=300, cwd=tmp_path,
                            env={**env, "TRL_EXPERIMENTAL_SILENCE": "1", "HF_HUB_OFFLINE": "1"})
    assert helped.returncode == 0 and "--offline" in helped.stdout and "--use_peft" in helped.stdout, helped.stderr


AUTO_PLAY = """
import json, sys
from openenv import AutoAction, AutoEnv
url, plan = sys.argv[1], json.loads(sys.argv[2])
action_cls = AutoAction.from_env("rhythm_env")
env = AutoEnv.from_env("rhythm_env", base_url=url)
with env.sync() as week:
    result = week.reset(condition="continuous", seed=int(sys.argv[3]))
    for action, social, morning, work in plan:
        result = week.step(action_cls(action=action, social=social, morning=morning, work=work))
    state = week.state()
import rhythm_env
print(json.dumps({"client": type(env).__name__, "action": action_cls.__name__, "reward": result.reward,
                  "done": result.done, "seed": state.seed, "module": rhythm_env.__file__}))
"""


def test_the_wheel_carries_openenv_yaml_and_autoenv_plays_a_week_from_it(tmp_path):
    """The package built as a wheel and installed alone (pip --target): OpenEnv's discovery finds it by its
    manifest, AutoAction gives RhythmAction and AutoEnv.from_env("rhythm_env", base_url=...) plays a week."""
    import zipfile

    build = tmp_path / "src"
    shutil.copytree(PACKAGE, build / "envs" / "rhythm_env", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp_path / "dist"), str(build / "envs" / "rhythm_env")], check=True, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("openenv_rhythm_env-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "rhythm_env/openenv.yaml" in names and "rhythm_env/sim/spec.py" in names
    assert {name.split("/")[0] for name in names if ".dist-info/" not in name} == {"rhythm_env"}  # no rhythm_core
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, timeout=300)
    from rhythm_env.text.openenv_server import create_rhythm_app
    from tests.test_openenv_server import served_in_thread

    with served_in_thread(create_rhythm_app(max_sessions=2)) as url:
        env = {**os.environ, "PYTHONPATH": str(site), "XDG_CACHE_HOME": str(tmp_path / "cache")}
        # from the repository's root, where a notebook or `python -c` starts
        played = subprocess.run([sys.executable, "-c", AUTO_PLAY, url, json.dumps(plan()), str(SEED)], env=env,
                                capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert played.returncode == 0, played.stderr
    answer = json.loads(played.stdout.strip().splitlines()[-1])
    assert answer["module"].startswith(str(site))  # the installed wheel's, not this checkout's
    assert (answer["client"], answer["action"], answer["done"], answer["seed"]) == (
        "RhythmEnvClient", "RhythmAction", True, SEED)
    assert answer["reward"] == expected_grade()
