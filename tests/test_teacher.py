"""Teacher rollouts into resumable JSONL files: the Bayesian teacher, and the OpenAI backend driven
by the real `openai` client against a local OpenAI-compatible server with scripted faults."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from rhythm_core.teacher.budget import USAGE_KEYS
from rhythm_core.teacher.openai_client import REASK, _retry_after
from rhythm_core.teacher.run import run_teacher
from rhythm_core.teacher.settings import TeacherSettings
from rhythm_core.teacher.trajectories import SCHEMA, TrajectoryError, read_trajectories, replay_check
from rhythm_env.protocol import fallback_action
from rhythm_env.sim import Observation
from rhythm_env.sim.spec import ACTIONS, METERS, STEPS_PER_EPISODE
from tests.openai_server import FakeOpenAIServer, serve

REPO = Path(__file__).resolve().parents[1]
COND = "continuous"
KEY = "sk-test-key-0123456789"


@pytest.fixture
def server():
    with serve() as s:
        yield s


def bayes() -> TeacherSettings:
    return TeacherSettings(backend="bayes")


def openai_settings(server: FakeOpenAIServer, **overrides) -> TeacherSettings:
    settings = {
        "backend": "openai", "model": "fake-teacher", "base_url": server.base_url, "api_key": KEY,
        "concurrency": 4, "request_timeout_s": 0.5, "max_retries": 3, "backoff_base_s": 0.01, "backoff_cap_s": 0.05,
    }
    settings.update(overrides)
    return TeacherSettings(**settings)


def check_file(path, seeds) -> list[dict]:
    """The file holds exactly these seeds, once each, complete, schema-valid and replayable."""
    data = read_trajectories(path, allow_truncated_tail=False)
    got = [r["seed"] for r in data.records]
    assert sorted(got) == sorted(seeds) and len(got) == len(set(got))
    replay_check(data.records, path)
    return data.records


def step_of(seed: int, step: int, *, first_ask: bool | None = True):
    """A fault predicate: the request for `step` of episode `seed` (a first ask, a re-ask, or either)."""
    def when(r) -> bool:
        ask_ok = first_ask is None or (r.reasks == 0) == first_ask
        return r.episode_seed == seed and r.step == step and ask_ok
    return when


def by_seed(records) -> dict[int, dict]:
    return {r["seed"]: r for r in records}


# --------------------------------------------------------------------------------- bayes backend
def test_bayes_writes_one_line_per_seed_and_resume_only_adds_new_seeds(tmp_path):
    out = tmp_path / "bayes.jsonl"
    result = run_teacher(bayes(), COND, range(1000, 1010), out)
    assert (result.requested, result.written, result.skipped, result.failed_seeds) == (10, 10, 0, [])
    assert result.steps == 10 * STEPS_PER_EPISODE and result.invalid_steps == 0 and result.cost_usd == 0.0
    assert not result.dropped_tail and result.stopped_reason is None
    assert out.read_bytes().count(b"\n") == 10
    records = check_file(out, range(1000, 1010))
    for record in records:
        assert record["schema"] == SCHEMA and record["teacher"]["backend"] == "bayes"
        assert len(record["steps"]) == STEPS_PER_EPISODE and len(record["meters"]) == STEPS_PER_EPISODE + 1
        for t, step in enumerate(record["steps"]):
            assert step["step"] == t and f"(step {t + 1} of {STEPS_PER_EPISODE})" in step["prompt"]
            assert step["parsed"]["valid"] and step["parsed"]["action"] == step["action"] == record["actions"][t]
            assert json.loads(step["raw_answer"])["action"] == step["action"]
            assert set(step["usage"]) == set(USAGE_KEYS)
            assert set(step["meters_after"]) == set(METERS)
    before = out.read_bytes()

    again = run_teacher(bayes(), COND, range(1000, 1015), out)  # a superset: only the 5 new seeds are played
    assert (again.requested, again.written, again.skipped) == (15, 5, 10)
    assert out.read_bytes().startswith(before)  # nothing already written was rewritten
    check_file(out, range(1000, 1015))

    same = run_teacher(bayes(), COND, range(1000, 1015), out)
    assert (same.written, same.skipped) == (0, 15)


@pytest.mark.skipif(sys.platform != "linux", reason="worker processes are forked on Linux only")
def test_bayes_chunks_played_in_worker_processes_write_the_same_file(tmp_path, monkeypatch):
    """Two forked workers play the chunks side by side; the file is byte for byte the one-process
    file (chunks written in seed order), and progress still comes one episode at a time."""
    from rhythm_core.teacher import offline

    pools = []
    forked_pool = offline.forked_pool

    def counted_pool(workers, *args, **kwargs):
        pools.append(workers)
        return forked_pool(workers, *args, **kwargs)

    monkeypatch.setattr(offline, "forked_pool", counted_pool)
    seen = []
    one = run_teacher(bayes(), COND, range(1000, 1013), tmp_path / "one.jsonl", chunk_size=4)
    assert pools == []  # one worker: played here
    two = run_teacher(bayes(), COND, range(1000, 1013), tmp_path / "two.jsonl", chunk_size=4, workers=2,
                      on_episode=lambda record: seen.append(record["seed"]))
    assert pools == [2]
    assert (tmp_path / "one.jsonl").read_bytes() == (tmp_path / "two.jsonl").read_bytes()
    assert (one.written, two.written, seen) == (13, 13, list(range(1000, 1013)))


def test_search_backend_writes_records_that_train_a_student_like_the_bayesian_ones(tmp_path):
    """The search teacher is a backend beside bayes: the same record and answer shape, its own
    identity and play version, its reasoning naming the Monte-Carlo values it chose by."""
    from rhythm_core.agents import SearchAgent
    from rhythm_core.agents.rollout import rollout
    from rhythm_core.data.sft_dataset import build_sft_dataset
    from rhythm_core.teacher.offline import OFFLINE_AGENTS
    from rhythm_core.teacher.settings import OFFLINE_MODELS

    assert set(OFFLINE_AGENTS) == set(OFFLINE_MODELS)  # every offline backend plays an agent and names its version
    seeds = range(1000, 1004)
    search, plain = TeacherSettings(backend="search"), tmp_path / "bayes.jsonl"
    result = run_teacher(search, COND, seeds, tmp_path / "search.jsonl", chunk_size=2)
    run_teacher(bayes(), COND, seeds, plain)
    assert (result.written, result.invalid_steps, result.cost_usd) == (4, 0, 0.0)
    records, reference = check_file(tmp_path / "search.jsonl", seeds), read_trajectories(plain).records
    played = rollout(SearchAgent(), COND, list(seeds))  # the records hold the search agent's own play
    for record, ref, actions in zip(records, reference, played.actions):
        assert record["teacher"] == {"backend": "search", "model": "search-mc-1", "id": "search"}
        assert record["actions"] == [ACTIONS[a] for a in actions]
        assert list(record) == list(ref) and list(record["steps"][0]) == list(ref["steps"][0])
        for step, ref_step in zip(record["steps"], ref["steps"]):
            answer = json.loads(step["raw_answer"])
            assert list(answer) == list(json.loads(ref_step["raw_answer"]))  # reasoning, belief, action
            assert step["parsed"]["valid"] and step["parsed"]["belief"] == record["beliefs"][step["step"]]
            assert "Simulating the rest of the week 16 times" in answer["reasoning"]
    # the work files of different teachers, or of another version of one teacher's play, never mix
    assert len({search.play_key, bayes().play_key, "bayes"}) == 3
    dataset = build_sft_dataset(records, validation_fraction=0.25, prompt_format="table", reasoning="full")
    assert sum(split.num_rows for split in dataset.values()) == 4 * STEPS_PER_EPISODE  # one example per decision
    assert set(dataset["train"]["teacher"]) == {"search"}


def test_bayes_rejects_repeated_or_out_of_range_seeds(tmp_path):
    with pytest.raises(ValueError, match="repeats a seed"):
        run_teacher(bayes(), COND, [1000, 1000], tmp_path / "x.jsonl")
    with pytest.raises(ValueError, match="outside the continuous range"):
        run_teacher(bayes(), COND, [10_000], tmp_path / "x.jsonl")


def test_resume_after_a_crash_drops_the_cut_tail_and_redoes_that_episode(tmp_path):
    out, other = tmp_path / "t.jsonl", tmp_path / "other.jsonl"
    run_teacher(bayes(), COND, range(1000, 1004), out)
    run_teacher(bayes(), COND, [1004], other)
    line = other.read_bytes()
    with open(out, "ab") as fh:  # a crash mid-write: half of seed 1004's line, no newline
        fh.write(line[: len(line) // 2])
    assert read_trajectories(out).truncated_tail
    with pytest.raises(TrajectoryError, match=f"^{out}:5: incomplete last line"):
        read_trajectories(out, allow_truncated_tail=False)

    result = run_teacher(bayes(), COND, range(1000, 1006), out)
    assert result.dropped_tail and (result.written, result.skipped) == (2, 4)
    records = check_file(out, range(1000, 1006))
    assert out.read_bytes().endswith(b"\n")
    assert json.dumps(by_seed(records)[1004]["actions"]) == json.dumps(json.loads(line)["actions"])


def _corrupt(kind: str, line: bytes) -> bytes:
    if kind == "not_json":
        return line[: len(line) // 2] + b"\n"  # half a line, in the middle of the file
    record = json.loads(line)
    if kind == "wrong_schema":
        record["schema"] = "rhythm-trajectory-0"
    elif kind == "unknown_action":
        record["actions"][5] = "DANCE"
    elif kind == "missing_field":
        del record["meters"]
    return json.dumps(record).encode() + b"\n"


@pytest.mark.parametrize(("kind", "message"), [
    ("not_json", "not valid JSON"),
    ("wrong_schema", "schema 'rhythm-trajectory-0'"),
    ("unknown_action", "unknown action 'DANCE'"),
    ("missing_field", "missing field(s): meters"),
])
@pytest.mark.parametrize("cut_tail", [False, True])
def test_a_bad_line_in_the_middle_is_an_error_naming_file_and_line_and_changes_nothing(tmp_path, kind, message,
                                                                                    cut_tail):
    out = tmp_path / "t.jsonl"
    run_teacher(bayes(), COND, range(1000, 1003), out)
    lines = out.read_bytes().splitlines(keepends=True)
    lines[1] = _corrupt(kind, lines[1])
    if cut_tail:
        lines.append(lines[0][:100])
    out.write_bytes(b"".join(lines))
    before = out.read_bytes()
    with pytest.raises(TrajectoryError, match=f"^{out}:2: ") as info:
        run_teacher(bayes(), COND, range(1000, 1006), out)
    assert message in str(info.value)
    assert out.read_bytes() == before  # not truncated, not appended to


# -------------------------------------------------------------------------------- openai backend
def test_openai_backend_writes_full_records_with_the_real_client(tmp_path, server):
    out = tmp_path / "o.jsonl"
    result = run_teacher(openai_settings(server), COND, range(1000, 1004), out)
    assert (result.written, result.failed_seeds, result.retries, result.invalid_steps) == (4, [], 0, 0)
    assert result.requests == server.request_count == 4 * STEPS_PER_EPISODE
    records = check_file(out, range(1000, 1004))
    assert result.prompt_tokens == sum(s["usage"]["prompt_tokens"] for r in records for s in r["steps"]) > 0
    assert result.completion_tokens > 0
    for record in records:
        assert record["teacher"] == {"backend": "openai", "model": "fake-teacher", "id": "openai:fake-teacher"}
        assert record["usage"]["requests"] == STEPS_PER_EPISODE
        for t, step in enumerate(record["steps"]):
            assert step["attempts"] == 1 and not step["invalid"] and step["parsed"]["valid"]
            assert step["usage"]["prompt_tokens"] > 0 and step["usage"]["completion_tokens"] > 0
            assert f"(step {t + 1} of {STEPS_PER_EPISODE})" in step["prompt"]
            if step["observation"]["slot"] == "night":
                assert step["action"] == "SLEEP"
    for request in server.requests:
        assert request.path == "/v1/chat/completions" and request.authorization == f"Bearer {KEY}"
        assert request.body["model"] == "fake-teacher" and request.request_seed == request.episode_seed * 100 + request.step
    assert KEY.encode() not in out.read_bytes()


def test_429_is_retried_after_the_retry_after_delay(tmp_path, server):
    rule = server.fault("rate_limit", when=step_of(1000, 3), times=1, retry_after="0.3")
    result = run_teacher(openai_settings(server, concurrency=1), COND, [1000], tmp_path / "o.jsonl")
    assert rule.fired == 1 and result.written == 1 and result.retries == 1
    assert result.requests == STEPS_PER_EPISODE + 1
    record = read_trajectories(tmp_path / "o.jsonl").records[0]
    assert (record["usage"]["retries"], record["usage"]["requests"]) == (1, STEPS_PER_EPISODE + 1)
    assert record["steps"][3]["usage"]["retries"] == 1
    first, second = server.requests_for(episode_seed=1000, step=3)
    assert (first.response_status, second.response_status) == (429, 200)
    assert second.time - first.time >= 0.3  # the header's delay, not the 0.01 s backoff
    step = check_file(tmp_path / "o.jsonl", [1000])[0]["steps"][3]
    assert step["attempts"] == 1 and not step["invalid"]  # a retry is not a re-ask


@pytest.mark.parametrize("header", ["soon", "Wed, 21 Oct 2015 07:28:00 GMT"])
def test_an_unusable_or_past_retry_after_falls_back_without_crashing(tmp_path, server, header):
    rule = server.fault("rate_limit", when=step_of(1000, 2), times=1, retry_after=header)
    result = run_teacher(openai_settings(server, concurrency=1), COND, [1000], tmp_path / "o.jsonl")
    assert rule.fired == 1 and result.written == 1 and result.retries == 1
    first, second = server.requests_for(episode_seed=1000, step=2)
    assert second.time - first.time < 0.3  # our short backoff (or no wait for a past date)


def test_retry_after_parsing():
    def delay(**headers):
        return _retry_after(SimpleNamespace(response=SimpleNamespace(headers=headers)))  # lower-case names, as httpx looks them up

    assert delay(**{"retry-after": "0.25"}) == 0.25
    assert delay(**{"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert delay(**{"retry-after": "-3"}) == 0.0
    assert delay(**{"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    for bad in ("soon", "inf", "nan", "1e999"):  # must not crash the run nor sleep forever
        assert delay(**{"retry-after": bad}) is None
    assert delay() is None
    assert _retry_after(RuntimeError("no response")) is None


def test_500_is_retried(tmp_path, server):
    rule = server.fault("server_error", when=step_of(1000, 5), times=2)
    lines = []
    result = run_teacher(openai_settings(server), COND, [1000, 1001], tmp_path / "o.jsonl", log=lines.append)
    assert rule.fired == 2 and result.retries == 2 and result.failed_seeds == []
    # The retry line names what the user knows: the episode seed and the step.
    assert any(line.startswith("episode seed 1000, step 5: InternalServerError, retry 1/") for line in lines), lines
    assert [r.response_status for r in server.requests_for(episode_seed=1000, step=5)] == [500, 500, 200]
    check_file(tmp_path / "o.jsonl", [1000, 1001])


def test_a_response_slower_than_the_timeout_is_retried(tmp_path, server):
    rule = server.fault("slow", when=step_of(1001, 2), times=1, delay=3.0)
    start = time.monotonic()
    result = run_teacher(openai_settings(server, request_timeout_s=0.5), COND, [1000, 1001], tmp_path / "o.jsonl")
    assert rule.fired == 1 and result.retries == 1 and result.written == 2
    assert time.monotonic() - start < 2.5  # the client gave up at its timeout, not after the slow reply
    first, second = server.requests_for(episode_seed=1001, step=2)
    assert second.time - first.time >= 0.5 and second.response_status == 200
    check_file(tmp_path / "o.jsonl", [1000, 1001])


@pytest.mark.parametrize("kind", ["non_json", "unknown_action"])
def test_an_unusable_answer_is_re_asked_then_accepted(tmp_path, server, kind):
    rule = server.fault(kind, when=step_of(1000, 4, first_ask=True))
    result = run_teacher(openai_settings(server), COND, [1000], tmp_path / "o.jsonl")
    assert rule.fired == 1 and result.invalid_steps == 0 and result.invalid_rate == 0.0
    step = check_file(tmp_path / "o.jsonl", [1000])[0]["steps"][4]
    assert step["attempts"] == 2 and not step["invalid"] and step["parsed"]["valid"]
    assert step["action"] == json.loads(step["raw_answer"])["action"]
    ask, reask = server.requests_for(episode_seed=1000, step=4)
    assert reask.reasks == 1 and reask.messages[-1]["content"].startswith(REASK.split("{")[0])
    assert reask.messages[:2] == ask.messages and reask.messages[-2]["role"] == "assistant"
    if kind == "non_json":
        assert reask.messages[-2]["content"] == "I think we should rest"
    assert step["usage"]["prompt_tokens"] > 0  # both attempts' tokens are counted


def test_an_answer_invalid_on_every_re_ask_falls_back_to_the_safe_action(tmp_path, server):
    rule = server.fault("non_json", when=step_of(1000, 6, first_ask=None))  # day 2, evening
    settings = openai_settings(server, max_invalid_reasks=2)
    result = run_teacher(settings, COND, [1000], tmp_path / "o.jsonl")
    assert rule.fired == 3  # the ask and two re-asks
    assert result.invalid_steps == 1 and result.invalid_rate == pytest.approx(1 / STEPS_PER_EPISODE) and result.invalid_rate > 0
    record = check_file(tmp_path / "o.jsonl", [1000])[0]
    step = record["steps"][6]
    assert step["invalid"] and record["invalid"][6] and step["attempts"] == 3
    assert not step["parsed"]["valid"] and "no JSON object" in step["parsed"]["error"]
    assert step["raw_answer"] == "I think we should rest"
    seen = Observation(step=6, meters=np.array([step["observation"]["meters"][m] for m in METERS]),
                       last_action=None, last_delta=None, anomaly=None)
    assert step["action"] == fallback_action(seen) in ("NAP", "MEDITATE")
    assert record["beliefs"][6] == record["beliefs"][5]  # an invalid step keeps the last stated belief
    assert sum(record["invalid"]) == 1


def test_a_fenced_json_answer_is_accepted_directly(tmp_path, server):
    rule = server.fault("fenced", when=step_of(1000, 0))
    result = run_teacher(openai_settings(server), COND, [1000], tmp_path / "o.jsonl")
    assert rule.fired == 1 and result.invalid_steps == 0 and result.requests == STEPS_PER_EPISODE
    step = check_file(tmp_path / "o.jsonl", [1000])[0]["steps"][0]
    assert "```json" in step["raw_answer"] and step["attempts"] == 1 and step["parsed"]["valid"]
    assert step["action"] in ACTIONS


def test_retries_exhausted_fail_that_seed_only_and_a_rerun_completes_it(tmp_path, server):
    out = tmp_path / "o.jsonl"
    rule = server.fault("server_error", when=lambda r: r.episode_seed == 1001)
    result = run_teacher(openai_settings(server, max_retries=2), COND, range(1000, 1004), out)
    assert result.failed_seeds == [1001] and result.written == 3 and rule.fired == 3
    check_file(out, [1000, 1002, 1003])

    server.clear_faults()
    again = run_teacher(openai_settings(server), COND, range(1000, 1004), out)
    assert (again.written, again.skipped, again.failed_seeds) == (1, 3, [])
    check_file(out, range(1000, 1004))


def test_the_cost_guard_stops_before_the_limit_and_leaves_complete_episodes(tmp_path, server):
    out = tmp_path / "o.jsonl"
    # ~1,000 prompt tokens a request at $10/M: ~$0.01 a request, ~$0.3 an episode; a worst-case
    # bound for a whole episode (long prompts, max_tokens answers) stays near $1, under the limit.
    priced = {"price_input_per_m": 10.0, "price_output_per_m": 20.0}
    limit, seeds = 1.5, range(1000, 1008)
    result = run_teacher(openai_settings(server, concurrency=2, max_cost_usd=limit, **priced), COND, seeds, out)
    assert result.stopped_reason == "max_cost_usd"
    assert 0 < result.cost_usd <= limit
    assert 1 <= result.written < len(seeds) and result.failed_seeds == []
    assert server.request_count < len(seeds) * STEPS_PER_EPISODE
    records = check_file(out, [r["seed"] for r in read_trajectories(out).records])
    assert len(records) == result.written and all(len(r["steps"]) == STEPS_PER_EPISODE for r in records)
    for record in records:  # each episode's cost is its own tokens at the set prices
        usage = record["usage"]
        assert usage["cost_usd"] == pytest.approx((10.0 * usage["prompt_tokens"] + 20.0 * usage["completion_tokens"]) / 1e6,
                                                  abs=1e-6)
    assert sum(r["usage"]["cost_usd"] for r in records) <= result.cost_usd + 1e-6

    rest = run_teacher(openai_settings(server, **priced), COND, seeds, out)  # no limit: finish the rest
    assert rest.stopped_reason is None and (rest.written, rest.skipped) == (len(seeds) - result.written, result.written)
    check_file(out, seeds)


# ------------------------------------------------------------------------------- the CLI, for real
def _cli(server, out, seeds, key_env, *extra) -> list[str]:
    return [sys.executable, "-m", "rhythm_core.cli", "teacher", "--backend", "openai", "--base-url", server.base_url,
            "--model", "fake-teacher", "--seeds", seeds, "--out", str(out), "--timeout", "5",
            "--api-key-env", key_env, *extra]


def _env(key_env, key) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.endswith("API_KEY")}
    env[key_env] = key
    return env


def _complete_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def test_cli_killed_mid_run_resumes_without_duplicates(tmp_path):
    out = tmp_path / "killed.jsonl"
    with serve(latency=0.03) as server:
        cmd = _cli(server, out, "1000-1011", "RHYTHM_TEST_KEY", "--concurrency", "4")
        log = open(tmp_path / "killed.log", "wb")  # closed below
        proc = subprocess.Popen(cmd, cwd=REPO, env=_env("RHYTHM_TEST_KEY", KEY), stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + 30
            while _complete_lines(out) < 3 and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait()
            log.close()
        done = _complete_lines(out)
        assert proc.returncode == -signal.SIGKILL, (tmp_path / "killed.log").read_text()
        assert 3 <= done < 12  # killed mid-run, with episodes in flight
        kept = len(read_trajectories(out).records)  # a cut tail, if any, is allowed here
        assert kept == done

        rerun = subprocess.run(cmd, cwd=REPO, env=_env("RHYTHM_TEST_KEY", KEY), capture_output=True, text=True,
                               timeout=60)
        assert rerun.returncode == 0, rerun.stderr
        assert f"wrote {12 - kept}, kept {kept} already written, failed 0" in rerun.stdout
    check_file(out, range(1000, 1012))


def test_cli_never_writes_or_prints_the_api_key(tmp_path):
    canary = "sk-canary-" + secrets.token_hex(16)
    out = tmp_path / "canary.jsonl"
    with serve(expected_api_key=canary) as server:
        server.fault("rate_limit", when=step_of(1000, 1), times=1, retry_after="0.05")
        server.fault("non_json", when=step_of(1002, 2, first_ask=None))
        server.fault("server_error", when=lambda r: r.episode_seed == 1003)  # fails: its error is logged
        proc = subprocess.run(_cli(server, out, "1000-1003", "RHYTHM_CANARY_KEY", "--concurrency", "4",
                                   "--max-retries", "1"),
                              cwd=REPO, env=_env("RHYTHM_CANARY_KEY", canary), capture_output=True, timeout=60)
        requests = server.requests
    assert proc.returncode == 1  # one seed failed
    assert b"wrote 3" in proc.stdout and b"failed 1" in proc.stdout
    assert b"RateLimitError" in proc.stderr and b"InternalServerError" in proc.stderr  # logs were written
    assert requests and all(r.authorization == f"Bearer {canary}" for r in requests)
    assert all(r.response_status != 401 for r in requests)
    secret = canary.encode()
    assert secret not in out.read_bytes()
    assert secret not in proc.stdout and secret not in proc.stderr
    assert secret[len("sk-canary-"):] not in proc.stdout + proc.stderr + out.read_bytes()
    check_file(out, [1000, 1001, 1002])
