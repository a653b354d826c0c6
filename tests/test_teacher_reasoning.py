"""The real teacher: GPT-5.x / o-series parameter rules, budget-exhausted answers, billed usage with
cached and reasoning tokens, structured outputs and cache-friendly prompts — each against a local
OpenAI-compatible server reproducing the service's behaviour, through the real `openai` client."""

from __future__ import annotations

import json

import pytest

from rhythm_core.teacher.budget import CostBudget, usage_totals
from rhythm_core.teacher.openai_client import TeacherRequestRejected, request_messages
from rhythm_core.teacher.run import run_teacher
from rhythm_core.teacher.settings import TeacherSettings, is_reasoning_model
from rhythm_core.teacher.trajectories import read_trajectories, replay_check
from rhythm_env.protocol import ANSWER_RESPONSE_FORMAT, parse_answer
from rhythm_env.sim import RhythmEnv
from rhythm_env.sim.spec import ACTIONS, STEPS_PER_EPISODE
from tests.openai_server import MAX_TOKENS_MESSAGE, serve

COND = "continuous"


def settings_for(server, model="gpt-5.4", **overrides) -> TeacherSettings:
    values = {"backend": "openai", "model": model, "base_url": server.base_url, "api_key": "sk-test",
              "concurrency": 4, "request_timeout_s": 5.0, "max_retries": 2, "backoff_base_s": 0.01,
              "backoff_cap_s": 0.05}
    values.update(overrides)
    return TeacherSettings(**values)


def azure_settings(server, model, **overrides) -> TeacherSettings:
    values = {"backend": "azure", "model": model, "azure_endpoint": f"http://127.0.0.1:{server.port}",
              "api_key": "sk-test", "concurrency": 4, "request_timeout_s": 5.0, "max_retries": 2,
              "backoff_base_s": 0.01, "backoff_cap_s": 0.05}
    values.update(overrides)
    return TeacherSettings(**values)


def records_of(path, seeds):
    records = read_trajectories(path, allow_truncated_tail=False).records
    assert sorted(r["seed"] for r in records) == sorted(seeds)
    replay_check(records, path)
    return records


# ------------------------------------------------------------------------------ parameter rules
def test_model_name_rule():
    for name in ("gpt-5.4", "gpt-5", "gpt-5-mini", "o1", "o3-mini", "o4-mini", "openai/o3", "prod-gpt-5.4-teacher"):
        assert is_reasoning_model(name), name
    for name in ("gpt-4o", "gpt-4.1-mini", "Qwen/Qwen2.5-72B-Instruct", "fake-teacher", "teacher", "pro1", "gpt-50x"):
        assert not is_reasoning_model(name), name


def test_a_gpt5_model_works_with_default_settings_and_no_rejected_request(tmp_path):
    with serve(params="reasoning", reasoning_tokens=120) as server:
        result = run_teacher(settings_for(server), COND, [1000, 1001], tmp_path / "t.jsonl")
        requests = server.requests
    assert (result.written, result.failed_seeds, result.invalid_steps) == (2, [], 0)
    assert all(r.response_status == 200 for r in requests) and len(requests) == 2 * STEPS_PER_EPISODE
    for r in requests:
        assert r.body["max_completion_tokens"] == 4000 and "max_tokens" not in r.body and "temperature" not in r.body
        assert "reasoning_effort" not in r.body  # unset by default
    records = records_of(tmp_path / "t.jsonl", [1000, 1001])
    assert records[0]["request"] == {"token_param": "max_completion_tokens", "temperature": None,
                                     "reasoning_effort": None, "max_tokens": 4000}
    assert result.reasoning_tokens == 2 * STEPS_PER_EPISODE * 120
    assert records[0]["usage"]["reasoning_tokens"] == STEPS_PER_EPISODE * 120
    assert records[0]["steps"][0]["usage"]["reasoning_tokens"] == 120


@pytest.mark.parametrize("backend", ["openai", "azure"])
def test_an_unrecognised_reasoning_deployment_is_learned_from_the_400s_once_per_run(tmp_path, backend):
    """A deployment name the rule misses gets max_tokens and temperature 0.0 first; the endpoint's 400s
    (the real bodies) teach the run the right shape once, even with 4 episodes in flight."""
    with serve(params="reasoning") as server:
        make = settings_for if backend == "openai" else azure_settings
        logs = []
        result = run_teacher(make(server, model="teacher-prod"), COND, range(1000, 1004), tmp_path / "t.jsonl",
                             log=logs.append)
        requests = server.requests
    rejected = [r for r in requests if r.response_status == 400]
    assert len(rejected) == 2  # max_tokens, then temperature: each learned once, not per request in flight
    assert "max_tokens" in rejected[0].body and rejected[1].body["temperature"] == 0.0
    assert result.written == 4 and result.requests == len(requests) == 4 * STEPS_PER_EPISODE + 2
    ok = [r for r in requests if r.response_status == 200]
    assert all("max_completion_tokens" in r.body and "temperature" not in r.body for r in ok)
    if backend == "azure":
        assert all(r.path.startswith("/openai/deployments/teacher-prod/chat/completions?api-version=") for r in requests)
    assert result.request_shape["learned"] == ["max_tokens", "temperature"]
    assert any("sending max_completion_tokens instead of max_tokens" in m for m in logs)
    records_of(tmp_path / "t.jsonl", range(1000, 1004))


def test_a_max_tokens_only_server_works_with_a_reasoning_model_name(tmp_path):
    with serve(params="max_tokens_only") as server:
        result = run_teacher(settings_for(server, model="o3-mini"), COND, [1000], tmp_path / "t.jsonl")
        requests = server.requests
    assert [r.response_status for r in requests[:2]] == [400, 200]
    assert "max_completion_tokens" in requests[0].body
    assert all(r.body["max_tokens"] == 4000 for r in requests[1:])
    assert result.written == 1 and result.request_shape["token_param"] == "max_tokens"


def test_a_chat_model_keeps_todays_request(tmp_path):
    with serve(params="max_tokens_only") as server:
        run_teacher(settings_for(server, model="gpt-4o", structured_output="off"), COND, [1000], tmp_path / "t.jsonl")
        requests = server.requests
    assert all(r.response_status == 200 for r in requests)
    assert all(r.body["max_tokens"] == 400 and r.body["temperature"] == 0.0 and r.body["seed"] >= 100_000
               for r in requests)


@pytest.mark.parametrize(("overrides", "message"), [
    ({"temperature": 0.3}, "Unsupported value: 'temperature' does not support 0.3 with this model"),
    ({"reasoning_effort": "none"}, "Unsupported value: 'reasoning_effort' does not support 'none'"),
])
def test_an_explicit_value_the_endpoint_rejects_fails_fast_with_the_servers_message(tmp_path, overrides, message):
    with serve(params="reasoning") as server:
        with pytest.raises(TeacherRequestRejected) as info:
            run_teacher(settings_for(server, **overrides), COND, range(1000, 1004), tmp_path / "t.jsonl")
        count = server.request_count
    assert message in str(info.value) and "HTTP 400" in str(info.value) and "'gpt-5.4'" in str(info.value)
    assert count == 1  # no retry, no second episode: the first request failed the run
    assert not (tmp_path / "t.jsonl").exists()  # nothing written, no empty file left


def test_a_supported_reasoning_effort_is_sent(tmp_path):
    with serve(params="reasoning") as server:
        result = run_teacher(settings_for(server, reasoning_effort="low"), COND, [1000], tmp_path / "t.jsonl")
        assert all(r.body["reasoning_effort"] == "low" for r in server.requests)
    assert result.written == 1
    assert records_of(tmp_path / "t.jsonl", [1000])[0]["request"]["reasoning_effort"] == "low"


def test_settings_refuse_unknown_values():
    with pytest.raises(ValueError, match="reasoning_effort 'max' is not one of none, minimal, low, medium, high"):
        TeacherSettings(backend="openai", model="gpt-5.4", reasoning_effort="max")
    with pytest.raises(ValueError, match="structured_output 'yes' is not one of auto, on, off"):
        TeacherSettings(backend="openai", model="gpt-5.4", structured_output="yes")
    with pytest.raises(ValueError, match="price_cached_input_per_m must be a finite number >= 0"):
        TeacherSettings(price_cached_input_per_m=-1.0)


# --------------------------------------------------------------------- finish_reason "length"
def test_an_answer_cut_empty_by_the_budget_is_counted_and_re_asked_with_a_larger_budget(tmp_path):
    # The model thinks 1,500 tokens per answer; a 1,000-token budget is spent on reasoning alone.
    with serve(params="reasoning", reasoning_tokens=1500) as server:
        result = run_teacher(settings_for(server, max_tokens=1000), COND, [1000], tmp_path / "t.jsonl")
        requests = server.requests
    assert result.invalid_steps == 0 and result.length_reasks == STEPS_PER_EPISODE
    budgets = [r.body["max_completion_tokens"] for r in requests]
    assert budgets[:2] == [1000, 2000] and set(budgets) == {1000, 2000}
    step = records_of(tmp_path / "t.jsonl", [1000])[0]["steps"][0]
    assert step["usage"]["length_reasks"] == 1 and step["usage"]["requests"] == 2 and step["attempts"] == 1
    assert step["usage"]["reasoning_tokens"] == 1000 + 1500  # the billed reasoning of both responses
    assert parse_answer(step["raw_answer"]).valid


def test_an_answer_still_empty_at_the_largest_budget_is_an_invalid_counted_step_not_a_silent_fallback(tmp_path):
    with serve(params="reasoning") as server:
        server.fault("length_empty", when=lambda r: r.step == 2)
        result = run_teacher(settings_for(server, max_length_reasks=1, max_invalid_reasks=1), COND, [1000],
                             tmp_path / "t.jsonl")
        budgets = [r.body["max_completion_tokens"] for r in server.requests_for(step=2)]
    assert budgets == [4000, 8000, 4000, 8000]  # ask + length re-ask, then the invalid re-ask + its length re-ask
    assert result.invalid_steps == 1 and result.length_reasks == 2
    step = records_of(tmp_path / "t.jsonl", [1000])[0]["steps"][2]
    assert step["invalid"] and step["raw_answer"] == "" and step["usage"]["length_reasks"] == 2


# ------------------------------------------------------------------------------ billed usage
def test_cached_and_reasoning_tokens_are_recorded_and_priced_as_billed(tmp_path):
    prices = {"price_input_per_m": 2.5, "price_cached_input_per_m": 0.25, "price_output_per_m": 15.0}
    with serve(params="reasoning", reasoning_tokens=50, prefix_cache=True) as server:
        result = run_teacher(settings_for(server, concurrency=1, **prices), COND, [1000, 1001], tmp_path / "t.jsonl")
    records = records_of(tmp_path / "t.jsonl", [1000, 1001])
    assert 0 < result.cached_prompt_tokens < result.prompt_tokens and 0.2 < result.cache_hit_fraction < 0.9
    for record in records:
        usage = record["usage"]
        for key in ("prompt_tokens", "cached_prompt_tokens", "completion_tokens", "reasoning_tokens"):
            assert usage[key] == sum(s["usage"][key] for s in record["steps"])
        assert usage["reasoning_tokens"] == 50 * STEPS_PER_EPISODE
        expected = ((usage["prompt_tokens"] - usage["cached_prompt_tokens"]) * 2.5 + usage["cached_prompt_tokens"] * 0.25
                    + usage["completion_tokens"] * 15.0) / 1e6
        assert usage["cost_usd"] == pytest.approx(expected, abs=1e-6)
        cached = [s["usage"]["cached_prompt_tokens"] for s in record["steps"]]
        assert cached[0] == 0 or record["seed"] == 1001  # the second episode may reuse the first's prefix
        assert all(c % 128 == 0 and (c == 0 or c >= 1024) for c in cached)
    assert result.cost_usd == pytest.approx(sum(r["usage"]["cost_usd"] for r in records), abs=1e-5)
    totals = usage_totals(records)
    assert totals["cache_hit_fraction"] == pytest.approx(result.cache_hit_fraction, abs=1e-4)


def test_cached_input_defaults_to_the_uncached_rate():
    budget = CostBudget(TeacherSettings(backend="openai", model="m", price_input_per_m=2.0, price_output_per_m=8.0))
    assert budget.cost(1000, 10, cached_prompt_tokens=600) == pytest.approx((1000 * 2.0 + 10 * 8.0) / 1e6)
    cheap = CostBudget(TeacherSettings(backend="openai", model="m", price_input_per_m=2.0,
                                       price_cached_input_per_m=0.5, price_output_per_m=8.0))
    assert cheap.cost(1000, 10, cached_prompt_tokens=600) == pytest.approx((400 * 2.0 + 600 * 0.5 + 10 * 8.0) / 1e6)


def test_a_server_without_usage_details_and_an_old_file_read_as_zero_cached_tokens(tmp_path):
    with serve(usage_details=False) as server:
        result = run_teacher(settings_for(server, model="fake-teacher"), COND, [1000], tmp_path / "t.jsonl")
    assert result.cached_prompt_tokens == 0 and result.reasoning_tokens == 0 and result.prompt_tokens > 0
    record = records_of(tmp_path / "t.jsonl", [1000])[0]
    for usage in [record["usage"], *(s["usage"] for s in record["steps"])]:  # a file from before these keys
        for key in ("cached_prompt_tokens", "reasoning_tokens", "length_reasks"):
            usage.pop(key)
    for key in ("request", "protocol"):
        record.pop(key)
    old = tmp_path / "old.jsonl"
    old.write_text(json.dumps(record) + "\n")
    (again,) = read_trajectories(old, allow_truncated_tail=False).records
    assert usage_totals([again])["cached_prompt_tokens"] == 0 and usage_totals([again])["cache_hit_fraction"] == 0.0


def test_the_cost_guard_prices_cached_tokens_at_their_rate(tmp_path):
    """With cached input 10x cheaper the same limit buys more episodes than at the uncached rate."""
    def episodes(cached_price):
        with serve(prefix_cache=True) as server:
            settings = settings_for(server, model="fake-teacher", concurrency=1, max_cost_usd=0.5,
                                    price_input_per_m=2.5, price_cached_input_per_m=cached_price,
                                    price_output_per_m=0.0, max_tokens=100)
            result = run_teacher(settings, COND, range(1000, 1020), tmp_path / f"t{cached_price}.jsonl")
        assert result.stopped_reason == "max_cost_usd" and result.cost_usd <= 0.5
        return result.written

    assert episodes(0.25) > episodes(2.5) >= 1


# ------------------------------------------------------------------------------ structured outputs
def test_structured_output_sends_the_strict_schema_and_is_recorded(tmp_path):
    with serve(structured="supported", free_text_invalid_rate=0.3) as server:
        result = run_teacher(settings_for(server, model="fake-teacher"), COND, [1000, 1001], tmp_path / "t.jsonl")
        requests = server.requests
    fmt = requests[0].body["response_format"]
    assert fmt == json.loads(json.dumps(ANSWER_RESPONSE_FORMAT)) and fmt["json_schema"]["strict"] is True
    schema = fmt["json_schema"]["schema"]
    assert schema["properties"]["action"]["enum"] == list(ACTIONS)
    assert schema["properties"]["belief"]["properties"]["work"] == {"type": "number", "minimum": 0, "maximum": 1}
    assert result.invalid_steps == 0 and len(requests) == 2 * STEPS_PER_EPISODE  # no re-ask needed
    assert all(r["protocol"]["structured_output"] for r in records_of(tmp_path / "t.jsonl", [1000, 1001]))


def test_free_text_from_the_same_noisy_model_needs_re_asks(tmp_path):
    with serve(structured="supported", free_text_invalid_rate=0.3) as server:
        result = run_teacher(settings_for(server, model="fake-teacher", structured_output="off"), COND, [1000, 1001],
                             tmp_path / "t.jsonl")
        requests = server.requests
    assert all("response_format" not in r.body for r in requests)
    reasks = sum(r.reasks > 0 for r in requests)
    assert reasks > 5 and result.requests == 2 * STEPS_PER_EPISODE + reasks
    assert not any(r["protocol"]["structured_output"] for r in records_of(tmp_path / "t.jsonl", [1000, 1001]))


def test_auto_falls_back_to_free_text_for_the_run_when_the_endpoint_refuses_response_format(tmp_path):
    with serve(structured="refused") as server:
        result = run_teacher(settings_for(server, model="fake-teacher"), COND, range(1000, 1003), tmp_path / "t.jsonl")
        requests = server.requests
    assert [r.response_status for r in requests].count(400) == 1 and "response_format" in requests[0].body
    assert all("response_format" not in r.body for r in requests[1:])
    assert result.written == 3 and result.request_shape["structured_output"] is False
    assert not any(r["protocol"]["structured_output"] for r in records_of(tmp_path / "t.jsonl", range(1000, 1003)))


def test_structured_output_on_fails_fast_when_refused(tmp_path):
    with serve(structured="refused") as server:
        with pytest.raises(TeacherRequestRejected, match="json_schema is enabled only for api versions.*"
                                                         "set structured_output to auto or off"):
            run_teacher(settings_for(server, model="fake-teacher", structured_output="on"), COND, [1000],
                        tmp_path / "t.jsonl")
        assert server.request_count == 1


# ------------------------------------------------------------------------------ prompts that cache
def test_each_request_extends_the_previous_steps_prompt_up_to_the_new_row():
    env = RhythmEnv(COND)
    obs, _ = env.reset(seed=1000)
    history, answers, previous = [obs], [], None
    for t in range(STEPS_PER_EPISODE):
        messages = request_messages(history, answers)
        text = "\n".join(m["content"] for m in messages)
        if previous is not None:
            shared = next((i for i, (a, b) in enumerate(zip(previous, text)) if a != b), min(len(previous), len(text)))
            # everything but the previous request's last two lines ("Now: ..." and the reply instruction)
            # and, at step 1, its "No steps taken yet." line
            tail = sum(len(line) + 1 for line in previous.splitlines()[-(3 if t == 1 else 2):])
            assert shared >= len(previous) - tail - 200  # 200: the new row's header at step 1
        previous = text
        obs, *_ = env.step("MEDITATE")
        history.append(obs)
        answers.append("{}")
    with pytest.raises(ValueError, match="unknown prompt format 'xml'; allowed: table, chat"):
        request_messages(history[:2], answers[:1], "xml")


def test_a_chat_format_teacher_sends_one_growing_conversation_with_its_own_answers(tmp_path):
    with serve() as server:
        result = run_teacher(settings_for(server, model="fake-teacher", concurrency=1, prompt_format="chat"), COND,
                             [1000], tmp_path / "t.jsonl")
        requests = [r.messages for r in server.requests]
    assert (result.written, result.invalid_steps) == (1, 0) and len(requests) == STEPS_PER_EPISODE
    record = records_of(tmp_path / "t.jsonl", [1000])[0]
    assert record["protocol"]["prompt_format"] == "chat"
    for t, messages in enumerate(requests):
        assert [m["role"] for m in messages] == ["system"] + ["user", "assistant"] * t + ["user"]
        if t:  # the previous request, then the teacher's raw answer to it, then the new turn
            assert messages[: len(requests[t - 1])] == requests[t - 1]
            assert messages[-2]["content"] == record["steps"][t - 1]["raw_answer"]


def test_request_message_errors_name_the_parameter():
    server_body = {"message": MAX_TOKENS_MESSAGE, "param": "max_tokens", "code": "unsupported_parameter"}
    from rhythm_core.teacher.openai_client import _error_fields

    class Exc(Exception):
        body, param, code = server_body, None, None  # a server that leaves param null

    assert _error_fields(Exc())[0] == "max_tokens"
    Exc.body = {"message": "Unrecognized request argument supplied: max_completion_tokens"}
    assert _error_fields(Exc())[0] == "max_completion_tokens"


def test_a_rejected_key_fails_fast_and_the_message_never_holds_the_key(tmp_path):
    key = "sk-canary-0123456789abcdef"
    with serve(expected_api_key="sk-other") as server:
        with pytest.raises(TeacherRequestRejected, match="HTTP 401") as info:
            run_teacher(settings_for(server, model="fake-teacher", api_key=key), COND, range(1000, 1003),
                        tmp_path / "t.jsonl")
        assert server.request_count == 1
    assert "Incorrect API key provided" in str(info.value) and "0123456789" not in str(info.value)
