"""RhythmEnv as an OpenEnv environment (envs/rhythm_env/text/openenv_server.py, `rhythm serve-env`): a week played
through the pydantic models grades as TextWeek and RhythmEnv + the grader grade it; a bad action, belief,
seed or a step before reset is refused naming it and the week (and the server) goes on; the slow tests
serve it from the real CLI and play concurrent weeks and a load of calls through RhythmEnvClient."""

from __future__ import annotations

import asyncio
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import gymnasium
import numpy as np
import pytest
from pydantic import ValidationError

from rhythm_env.graders import grade_env_week
from rhythm_env.sim import ENV_ID
from rhythm_env.sim.spec import ACTIONS, STEPS_PER_EPISODE
from rhythm_env.text.openenv_server import (
    OPENENV_TASK,
    RhythmAction,
    RhythmEnvClient,
    RhythmEnvironment,
    RhythmRequestError,
    RhythmServerError,
    create_rhythm_app,
)
from rhythm_env.text.week import TextWeek

SEED = 1234


def plan(seed: int) -> list[dict]:
    """A week's slots as the wire carries them: an action name (mixed case) and a belief, per seed."""
    return [{"action": ACTIONS[(seed * 3 + t * 7) % len(ACTIONS)].title(),
             "social": round((seed + t) % 11 / 10, 2), "morning": round(t / 27, 2), "work": round(1 - t / 27, 2)}
            for t in range(STEPS_PER_EPISODE)]


def text_week_grade(seed: int, grader: str = "v3") -> float:
    week = TextWeek(grader=grader)
    week.start("continuous", seed)
    for slot in plan(seed):
        week.act(slot["action"], slot["social"], slot["morning"], slot["work"])
    return week.grade()


def rhythm_env_grade(seed: int, grader: str = "v3") -> float:
    """The same actions and beliefs through the Gymnasium env, graded by the public grade_env_week."""
    env = gymnasium.make(ENV_ID)
    env.reset(seed=seed)
    for slot in plan(seed):
        env.step(ACTIONS.index(slot["action"].upper()))
    beliefs = np.array([[s["social"], s["morning"], s["work"]] for s in plan(seed)])
    return grade_env_week(env, beliefs, grader).final_score


def test_a_week_through_the_models_grades_as_text_week_and_rhythm_env():
    env = RhythmEnvironment()
    first = env.reset(seed=SEED, episode_id="week-1")
    assert (first.step, first.done, first.reward, first.seed, first.condition) == (0, False, 0.0, SEED, "continuous")
    assert first.text.startswith("Start of the week") and set(first.meters) == {
        "vitality", "cognition", "progress", "serenity", "connection"}
    rewards = []
    for slot in plan(SEED):
        obs = env.step(RhythmAction.model_validate(slot))  # what the server does with a step's JSON
        rewards.append(obs.reward)
    assert obs.done and obs.step == STEPS_PER_EPISODE and rewards[:-1] == [0.0] * (STEPS_PER_EPISODE - 1)
    assert rewards[-1] == text_week_grade(SEED) == rhythm_env_grade(SEED)
    state = env.state
    assert (state.episode_id, state.step_count, state.seed, state.purpose, state.grader) == (
        "week-1", STEPS_PER_EPISODE, SEED, "training", "v3")
    v2 = RhythmEnvironment(grader="v2")
    v2.reset(seed=SEED)
    for slot in plan(SEED):
        obs = v2.step(RhythmAction.model_validate(slot))
    assert obs.reward == rhythm_env_grade(SEED, "v2") != rewards[-1]


@pytest.mark.parametrize("slot, field, message", [
    ({"action": "FLY"}, "action", "Input should be 'DEEP_WORK'"),
    ({"social": 1.5}, "social", "less than or equal to 1"),
    ({"morning": -0.1}, "morning", "greater than or equal to 0"),
    ({"work": float("nan")}, "work", "must be a number in [0, 1], got NaN"),
    ({"work": True}, "work", "valid number"),
    ({"social": "0.5"}, "social", "valid number"),
    ({"beleif": 0.5}, "beleif", "Extra inputs are not permitted"),
])
def test_a_bad_action_or_belief_is_refused_naming_its_field(slot, field, message):
    with pytest.raises(ValidationError) as caught:
        RhythmAction.model_validate({**plan(SEED)[0], **slot})
    (error,) = caught.value.errors()
    assert error["loc"] == (field,) and message in error["msg"]


def test_a_bad_seed_or_a_step_out_of_turn_is_refused_and_the_week_goes_on():
    env = RhythmEnvironment()
    slot = RhythmAction.model_validate(plan(SEED)[0])
    with pytest.raises(RhythmRequestError, match="no week started: reset first"):
        env.step(slot)
    for kwargs, message in [({"seed": 5}, "seed 5 is not a training seed"),
                            ({"seed": 9600}, "seed 9600 is a tuning seed"),
                            ({"seed": 10000, "condition": "ood"}, "condition 'ood' is evaluation-only"),
                            ({"seed": 1000, "conditon": "ood"}, "unknown reset argument(s) conditon"),
                            ({"seed": 1000, "condition": "nope"}, "unknown condition 'nope'")]:
        with pytest.raises(RhythmRequestError, match=re.escape(message)):
            env.reset(**kwargs)
    env.reset(seed=SEED)
    env.step(slot)
    with pytest.raises(RhythmRequestError, match="not a training seed"):
        env.reset(seed=5)
    assert (env.state.step_count, env.state.seed) == (1, SEED)  # a refused reset keeps the week
    evaluation = RhythmEnvironment(purpose="evaluation")
    with pytest.raises(RhythmRequestError, match="an evaluation week needs its seed"):
        evaluation.reset()
    with pytest.raises(RhythmRequestError, match="seed 1234 is not an evaluation seed of continuous"):
        evaluation.reset(seed=SEED)
    assert evaluation.reset(seed=7, condition="continuous").seed == 7
    drawn = {RhythmEnvironment().reset().seed for _ in range(5)}  # training weeks drawn outside the tuning seeds
    assert all(1000 <= s <= 9999 and not 9500 <= s <= 9699 for s in drawn)
    with pytest.raises(ValueError, match="unknown purpose 'tuning'"):
        create_rhythm_app(purpose="tuning")
    with pytest.raises(ValueError, match="max_sessions must be an integer >= 1"):
        create_rhythm_app(max_sessions=0)


def test_the_app_answers_bad_requests_over_http_and_websocket_and_keeps_serving():
    from fastapi.testclient import TestClient

    with TestClient(create_rhythm_app(max_sessions=2)) as http:
        assert http.get("/health").json()["status"] == "healthy"
        assert http.get("/schema").json()["action"]["properties"]["action"]["enum"] == list(ACTIONS)
        bad = http.post("/step", json={"action": {**plan(SEED)[0], "social": 1.5}})
        assert bad.status_code == 422 and [e["loc"] for e in bad.json()["detail"]] == [["social"]]
        early = http.post("/step", json={"action": plan(SEED)[0]})  # no HTTP week started yet
        assert early.status_code == 400 and early.json()["detail"].startswith("no week started")
        assert http.post("/reset", json={"seed": 5}).status_code == 400
        assert http.post("/reset", json={"seed": SEED}).json()["observation"]["seed"] == SEED
        assert http.post("/step", json={"action": plan(SEED)[0]}).json()["observation"]["step"] == 1
        with http.websocket_connect("/ws") as ws:
            ws.send_json({"type": "step", "data": plan(SEED)[0]})
            assert ws.receive_json()["data"]["message"].startswith("no week started")
            ws.send_json({"type": "reset", "data": {"seed": SEED}})
            assert ws.receive_json()["data"]["observation"]["step"] == 0
            ws.send_json({"type": "step", "data": {**plan(SEED)[0], "action": "FLY"}})
            error = ws.receive_json()["data"]
            assert error["code"] == "VALIDATION_ERROR" and error["errors"][0]["loc"] == ["action"]
            ws.send_json({"type": "step", "data": plan(SEED)[0]})
            assert ws.receive_json()["data"]["observation"]["step"] == 1
            ws.send_json({"type": "state"})
            assert ws.receive_json()["data"]["step_count"] == 1


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_http_step_answers_a_non_finite_belief_422_naming_the_field(number):
    from fastapi.testclient import TestClient

    slot = plan(SEED)[0]
    body = (f'{{"action": {{"action": "{slot["action"]}", "social": 0.5, "morning": {number}, "work": 0.5}}}}')
    with TestClient(create_rhythm_app(max_sessions=1), raise_server_exceptions=False) as http:
        answer = http.post("/step", content=body, headers={"content-type": "application/json"})
        assert answer.status_code == 422, answer.text
        (error,) = answer.json()["detail"]
        assert error["loc"] == ["morning"] and error["msg"].startswith("must be a number in [0, 1], got ")
        assert answer.json()["message"] == f"morning: {error['msg']}"
        seed = http.post("/reset", content=f'{{"seed": {number}}}', headers={"content-type": "application/json"})
        assert seed.status_code == 422 and seed.json()["detail"][0]["loc"] == ["body", "seed"]


def test_schema_and_state_describe_the_week_and_messages_are_written_for_a_client():
    from fastapi.testclient import TestClient

    with TestClient(create_rhythm_app(purpose="evaluation", grader="v2", max_sessions=1)) as http:
        fields = set(http.get("/schema").json()["state"]["properties"])
        assert {"condition", "seed", "purpose", "grader", "step_count"} <= fields
        assert http.get("/state").json() == {"episode_id": None, "step_count": 0, "condition": None, "seed": None,
                                             "purpose": "evaluation", "grader": "v2"}  # no HTTP week yet
        tuning = http.post("/reset", json={"seed": 9600}).json()["detail"]
        assert tuning == "seed 9600 is not an evaluation seed of continuous (0-999); it is a tuning seed, reserved (9500-9699)"
        # HTTP's week: a reset, two slots, and /state holds its condition, seed and steps
        http.post("/reset", json={"seed": 10_017, "condition": "ood", "episode_id": "curl-week"})
        for slot in plan(10_017)[:2]:
            assert http.post("/step", json={"action": slot}).status_code == 200
        assert http.get("/state").json() == {"episode_id": "curl-week", "step_count": 2, "condition": "ood",
                                             "seed": 10_017, "purpose": "evaluation", "grader": "v2"}
        with http.websocket_connect("/ws") as ws:
            ws.send_json({"type": "reset", "data": {"seed": 7, "condition": "continuous"}})
            ws.receive_json()
            ws.send_json({"type": "state"})
            state = ws.receive_json()["data"]
            assert (state["condition"], state["seed"], state["purpose"], state["grader"]) == ("continuous", 7,
                                                                                              "evaluation", "v2")
    env = RhythmEnvironment()
    for seed, message in [(9600, "seed 9600 is a tuning seed; continuous seeds 9500-9699 are reserved for tuning"),
                          (5, "seed 5 is not a training seed; continuous training seeds are 1000-9999")]:
        with pytest.raises(RhythmRequestError) as refused:
            env.reset(seed=seed)
        assert str(refused.value).startswith(message) and "such" not in str(refused.value)
    with pytest.raises(RhythmRequestError) as refused:
        env.reset(seed=10_001, condition="ood")
    assert "teacher" not in str(refused.value) and "training weeks come from: continuous 1000-9999" in str(refused.value)


def test_the_package_server_refuses_a_bad_setting_in_one_line(monkeypatch):
    from pathlib import Path

    package = Path(__file__).resolve().parents[1] / "envs"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(package.parent), str(package)])}
    for args, message in [(["--max-sessions", "0"], "argument --max-sessions: must be an integer >= 1, got '0'"),
                          (["--port", "99999"], "argument --port: must be in 0..65535, got 99999")]:
        refused = subprocess.run([sys.executable, "-m", "rhythm_env.server.app", *args], env=env, capture_output=True,
                                 text=True, timeout=120)
        assert (refused.returncode, refused.stderr) == (2, f"server: error: {message}\n")


@contextmanager
def served_in_thread(app):
    """`app` on a real uvicorn server on a free 127.0.0.1 port, in a thread of this process."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started and thread.is_alive():
            thread.join(0.02)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def test_the_client_plays_a_week_over_a_real_server_and_names_a_refused_field():
    with served_in_thread(create_rhythm_app(max_sessions=2)) as url, RhythmEnvClient(base_url=url).sync() as env:
        with pytest.raises(RhythmServerError, match="no week started"):
            env.step(RhythmAction.model_validate(plan(SEED)[0]))
        result = env.reset(condition="continuous", seed=SEED)
        assert (result.observation.step, result.reward, result.done) == (0, 0.0, False)
        bad = RhythmAction.model_construct(**{**plan(SEED)[0], "social": 1.5, "metadata": {}})  # unvalidated
        with pytest.raises(RhythmServerError, match=r"social: Input should be less than or equal to 1 \(got 1.5\)"):
            env.step(bad)
        for slot in plan(SEED):
            result = env.step(RhythmAction.model_validate(slot))
        assert result.done and result.reward == text_week_grade(SEED)
        assert env.state().step_count == STEPS_PER_EPISODE


def test_the_task_reaches_the_client_and_a_client_past_the_limit_hears_why():
    import httpx

    with served_in_thread(create_rhythm_app(max_sessions=1)) as url:
        assert httpx.get(f"{url}/metadata").json()["readme_content"] == OPENENV_TASK
        with RhythmEnvClient(base_url=url).sync() as env:
            first = env.reset(seed=SEED)
            assert first.observation.task == OPENENV_TASK and "RhythmAction" in OPENENV_TASK
            assert env.step(RhythmAction.model_validate(plan(SEED)[0])).observation.task == ""
            with pytest.raises(RhythmServerError, match="work: must be a number in \\[0, 1\\], got NaN \\[VALIDATION_ERROR\\]$"):
                env.step(RhythmAction.model_construct(**{**plan(SEED)[1], "work": float("nan"), "metadata": {}}))
            with pytest.raises(RhythmServerError, match="unknown reset argument\\(s\\) sead; allowed: seed"):
                env.reset(sead=1500)
            for _ in range(5):  # the session past --max-sessions: every time an answer naming the limit
                with RhythmEnvClient(base_url=url).sync() as extra:
                    with pytest.raises(RhythmServerError, match="(?i)capacity|max-sessions"):
                        extra.reset(seed=SEED)
            assert env.step(RhythmAction.model_validate(plan(SEED)[1])).observation.step == 2


def test_serve_env_refuses_a_port_in_use_a_bad_setting_and_a_missing_extra_in_one_line(capsys, monkeypatch):
    from rhythm_core.cli import main

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        assert main(["serve-env", "--port", str(port)]) == 2
    assert capsys.readouterr().err == (f"rhythm serve-env: error: --port {port}: 127.0.0.1:{port} is already in use; "
                                       "pick another port (--port 0 takes a free one)\n")
    assert main(["serve-env", "--max-sessions", "0"]) == 2
    assert capsys.readouterr().err == "rhythm serve-env: error: --max-sessions must be >= 1, got 0\n"
    for name in [n for n in sys.modules if n == "openenv" or n.startswith("openenv.")]:
        monkeypatch.setitem(sys.modules, name, None)  # as if openenv-core were not installed
    monkeypatch.delitem(sys.modules, "rhythm_env.text.openenv_server")
    assert main(["serve-env"]) == 2
    assert capsys.readouterr().err == ("rhythm serve-env: error: no module named 'openenv'; install the openenv "
                                       "extra: pip install 'rhythm[openenv]'\n")


# ---- the real server, from the CLI --------------------------------------------------------------------
@contextmanager
def serve_env(tmp_path, *args, stop=signal.SIGTERM):
    """`rhythm serve-env --port 0 ARGS` in a subprocess: yields (url, process); stopped with `stop` at the
    end, which must end it cleanly (exit 0, nothing on stderr but its last line)."""
    log = open(tmp_path / "serve-env.stderr", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "rhythm_core.cli", "serve-env", "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=log, text=True,
                            env={k: v for k, v in os.environ.items() if k != "RHYTHM_DEBUG"})
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        line = proc.stdout.readline() if ready else ""
        match = re.search(r"http://127\.0\.0\.1:\d+", line)
        assert match, f"no URL from serve-env: {line!r}; stderr: {log.seek(0) or log.read()}"
        yield match.group(0), proc
        proc.send_signal(stop)
        assert proc.wait(timeout=30) == 0
        log.seek(0)
        assert log.read() == "rhythm serve-env: stopped\n"
    finally:
        if proc.poll() is None:  # a failed test: the server still goes
            proc.kill()
            proc.wait()
        log.close()


def play_week(url: str, seed: int) -> float:
    with RhythmEnvClient(base_url=url).sync() as env:
        env.reset(condition="continuous", seed=seed)
        for t, slot in enumerate(plan(seed)):
            result = env.step(RhythmAction.model_validate(slot))
            assert result.observation.step == t + 1
        return result.reward


async def load(url: str, sessions: int, calls: int) -> list[tuple[int, int]]:
    """`calls` reset/step calls over `sessions` concurrent sessions (a reset first, then steps); returns each
    session's (calls answered, step count the server reports)."""
    async def session(k: int, n: int) -> tuple[int, int]:
        async with RhythmEnvClient(base_url=url) as env:
            await env.reset(seed=2000 + k)
            answered = 1
            for slot in plan(2000 + k)[: n - 1]:
                result = await env.step(RhythmAction.model_validate(slot))
                answered += 1
                assert result.observation.step == answered - 1
            return answered, (await env.state()).step_count

    shares = [calls // sessions + (k < calls % sessions) for k in range(sessions)]
    return await asyncio.gather(*(session(k, n) for k, n in enumerate(shares)))


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")  # the unvalidated actions sent on purpose
def test_serve_env_plays_concurrent_weeks_refuses_bad_requests_and_loses_nothing_under_load(tmp_path):
    import httpx

    seeds = list(range(3000, 3008))
    with serve_env(tmp_path, "--max-sessions", "16") as (url, proc):
        with ThreadPoolExecutor(len(seeds)) as pool:  # 8 weeks at once, one session each
            grades = list(pool.map(lambda s: play_week(url, s), seeds))
        assert grades == [text_week_grade(s) for s in seeds]

        # bad requests: each answered with its reason, the session and the server go on
        with RhythmEnvClient(base_url=url).sync() as env:
            with pytest.raises(RhythmServerError, match="no week started: reset first"):
                env.step(RhythmAction.model_validate(plan(SEED)[0]))
            with pytest.raises(RhythmServerError, match="seed 5 is not a training seed"):
                env.reset(seed=5)
            env.reset(seed=SEED)
            for field, value, message in [("action", "FLY", "Input should be 'DEEP_WORK'"),
                                          ("social", 1.5, "Input should be less than or equal to 1"),
                                          ("work", "high", "Input should be a valid number")]:
                bad = RhythmAction.model_construct(**{**plan(SEED)[0], field: value, "metadata": {}})
                with pytest.raises(RhythmServerError, match=f"{field}: {re.escape(message)}"):
                    env.step(bad)
            assert env.step(RhythmAction.model_validate(plan(SEED)[0])).observation.step == 1
        http = httpx.post(f"{url}/step", json={"action": {**plan(SEED)[0], "social": 1.5}}, timeout=30)
        assert http.status_code == 422 and http.json()["detail"][0]["loc"] == ["social"]
        http = httpx.post(f"{url}/step", json={"action": plan(SEED)[0]}, timeout=30)
        assert http.status_code == 400 and http.json()["detail"].startswith("no week started")

        # a port in use: the second server says so in one line
        taken = subprocess.run([sys.executable, "-m", "rhythm_core.cli", "serve-env", "--port", url.rsplit(":", 1)[1]],
                               capture_output=True, text=True, timeout=120)
        assert taken.returncode == 2 and taken.stderr.count("\n") == 1 and "is already in use" in taken.stderr

        # load: 200 calls over 16 concurrent sessions, every one answered, every week's step count right
        answered = asyncio.run(load(url, sessions=16, calls=200))
        assert sum(n for n, _ in answered) == 200 and all(steps == n - 1 for n, steps in answered)
        assert play_week(url, 3000) == grades[0]  # still serving, the same answers
    assert proc.poll() == 0


@pytest.mark.slow
def test_serve_env_stops_cleanly_on_ctrl_c(tmp_path):
    with serve_env(tmp_path, "--purpose", "evaluation", "--grader", "v2", stop=signal.SIGINT) as (url, proc):
        with RhythmEnvClient(base_url=url).sync() as env:
            env.reset(seed=7)
            state = env.state()
            assert (state.purpose, state.grader, state.seed) == ("evaluation", "v2", 7)
    assert proc.poll() == 0
