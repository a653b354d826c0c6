"""The LLM text protocol: rendering is deterministic and compact, parsing is tolerant and never raises."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rhythm_env.protocol import (
    SYSTEM_PROMPT,
    ParsedAnswer,
    fallback_action,
    format_answer,
    parse_answer,
    render_messages,
    render_user_prompt,
)
from rhythm_env.sim import Observation, RhythmEnv
from rhythm_env.sim.spec import ACTIONS, BELIEF_DIMS, METERS, SLOTS, STEPS_PER_EPISODE

VALID = '{"reasoning": "tired", "belief": {"social": 0.3, "morning": 0.7, "work": 0.5}, "action": "NAP"}'
BELIEF = {"social": 0.3, "morning": 0.7, "work": 0.5}

beliefs = st.none() | st.fixed_dictionaries({d: st.floats(0.0, 1.0) for d in BELIEF_DIMS})


def episode_history(seed: int = 3, steps: int = STEPS_PER_EPISODE - 1) -> list[Observation]:
    """Observations from reset up to the decision after `steps` steps (27 steps: the last decision)."""
    env = RhythmEnv("continuous")
    obs, _ = env.reset(seed=seed)
    history = [obs]
    for t in range(steps):
        obs, _reward, _terminated, _truncated, _info = env.step(ACTIONS[(3 * t) % len(ACTIONS)])
        history.append(obs)
    return history


@pytest.fixture(scope="module")
def full_history() -> list[Observation]:
    return episode_history()


# ---- format / parse round trip ---------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(action=st.sampled_from(ACTIONS), belief=beliefs, reasoning=st.text())
def test_format_parse_round_trip(action, belief, reasoning):
    text = format_answer(action, belief, reasoning)
    parsed = parse_answer(text)
    assert parsed.valid and parsed.error is None
    assert parsed.action == action
    assert parsed.reasoning == reasoning
    if belief is None:
        assert parsed.belief is None and parsed.belief_array() is None
    else:
        assert parsed.belief == json.loads(text)["belief"]
        np.testing.assert_allclose(parsed.belief_array(), [belief[d] for d in BELIEF_DIMS], atol=0.005 + 1e-12)


def test_format_answer_is_canonical():
    text = format_answer("deep_work", np.array([0.333, 1.2, -0.1]), "why")
    assert text == '{"reasoning":"why","belief":{"social":0.33,"morning":1.0,"work":0.0},"action":"DEEP_WORK"}'
    assert format_answer("SLEEP", None, "") == '{"reasoning":"","action":"SLEEP"}'


@pytest.mark.parametrize(
    "action, belief",
    [("FLY", None), ("SLEEP", {"social": 0.5}), ("SLEEP", [0.1, 0.2]), ("SLEEP", [0.1, float("nan"), 0.2])],
)
def test_format_answer_rejects_bad_input(action, belief):
    with pytest.raises(ValueError):
        format_answer(action, belief, "")


# ---- tolerant parsing ---------------------------------------------------------------------------


def test_parses_plain_answer():
    parsed = parse_answer(VALID)
    assert parsed == ParsedAnswer(valid=True, action="NAP", belief=BELIEF, reasoning="tired", error=None)
    np.testing.assert_array_equal(parsed.belief_array(), [0.3, 0.7, 0.5])


@pytest.mark.parametrize(
    "text",
    [
        f"```json\n{VALID}\n```",
        f"```\n{VALID}\n```",
        f"Here is my answer:\n```JSON\n{VALID}\n```\nGood luck!",
        f"I think a nap is best. {VALID} That is all.",
        f"Thinking about {{options}} first...\n{VALID}\nDone.",
        f"```json\n{VALID}",  # an unterminated fence, as in a truncated generation
    ],
)
def test_extracts_answer_from_surrounding_text(text):
    parsed = parse_answer(text)
    assert parsed.valid, parsed.error
    assert (parsed.action, parsed.belief, parsed.reasoning) == ("NAP", BELIEF, "tired")


def test_braces_inside_strings():
    reasoning = 'a {nested} } brace {"action": "SLEEP"} and a fence ``` inside'
    answer = json.dumps({"reasoning": reasoning, "action": "LEARN"})
    for text in (answer, f"Prose {{ first. {answer} and }} after."):
        parsed = parse_answer(text)
        assert parsed.valid and parsed.action == "LEARN" and parsed.reasoning == reasoning


@pytest.mark.parametrize("written", ["deep_work", "  Deep_Work ", "deep work", "Deep-Work", "DEEP  WORK", "\tdeep-work\n"])
def test_action_names_are_forgiving(written):
    assert parse_answer(json.dumps({"action": written})).action == "DEEP_WORK"


@pytest.mark.parametrize("action", ["FLY", "DEEPWORK", "", "sleep!", 3, None, ["SLEEP"]])
def test_unknown_action_is_invalid_and_lists_the_allowed_set(action):
    parsed = parse_answer(json.dumps({"action": action, "belief": BELIEF}))
    assert not parsed.valid and parsed.action is None and parsed.belief is None
    assert all(name in parsed.error for name in ACTIONS)


def test_missing_action_is_invalid():
    parsed = parse_answer(json.dumps({"reasoning": "hm", "belief": BELIEF}))
    assert not parsed.valid and "action" in parsed.error
    assert parsed.reasoning == "hm"  # kept for logs even though the answer is unusable


@pytest.mark.parametrize(
    "belief",
    [
        "0.5",
        0.5,
        True,
        {"social": 0.3, "morning": 0.7},
        {"social": 0.3, "morning": "0.7", "work": 0.5},
        {"social": 0.3, "morning": None, "work": 0.5},
        {"social": 0.3, "morning": True, "work": 0.5},
        {"social": 0.3, "morning": [0.7], "work": 0.5},
        [0.1, 0.2],
        [0.1, 0.2, 0.3, 0.4],
        [0.1, "x", 0.3],
    ],
)
def test_malformed_belief_is_invalid(belief):
    parsed = parse_answer(json.dumps({"action": "SLEEP", "belief": belief}))
    assert not parsed.valid and parsed.action is None and "belief" in parsed.error


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_belief_is_invalid(token):
    text = f'{{"action": "SLEEP", "belief": {{"social": {token}, "morning": 0.5, "work": 0.5}}}}'
    parsed = parse_answer(text)
    assert not parsed.valid and "social" in parsed.error


def test_out_of_range_belief_is_clipped():
    parsed = parse_answer(json.dumps({"action": "SLEEP", "belief": {"social": -0.4, "morning": 1.7, "work": 1}}))
    assert parsed.valid
    assert parsed.belief == {"social": 0.0, "morning": 1.0, "work": 1.0}
    assert all(type(v) is float for v in parsed.belief.values())


def test_belief_as_list_and_loose_keys():
    assert parse_answer('{"action": "SLEEP", "belief": [0.3, 0.7, 0.5]}').belief == BELIEF
    loose = '{"action": "SLEEP", "belief": {"Social": 0.3, " MORNING ": 0.7, "work": 0.5, "mood": 9}}'
    assert parse_answer(loose).belief == BELIEF


@pytest.mark.parametrize("text", ['{"action": "SLEEP"}', '{"action": "SLEEP", "belief": null}'])
def test_missing_belief_is_valid_without_belief(text):
    parsed = parse_answer(text)
    assert parsed.valid and parsed.action == "SLEEP" and parsed.belief is None and parsed.belief_array() is None
    assert parsed.reasoning == ""


def test_extra_keys_ignored_and_reasoning_coerced():
    parsed = parse_answer('{"action": "NAP", "confidence": 0.9, "reasoning": 42}')
    assert parsed.valid and parsed.action == "NAP" and parsed.reasoning == "42"


@pytest.mark.parametrize(
    "answer, reason",
    [
        (None, "str"),
        (b'{"action": "SLEEP"}', "str"),
        (42, "str"),
        ("", "no JSON object"),
        ("I would sleep.", "no JSON object"),
        ('["SLEEP"]', "array"),
        ('[{"action": "SLEEP"}]', "array"),
        ('"SLEEP"', "string"),
        ("null", "null"),
        ('```json\n[1, 2]\n```', "array"),
        ('{"action": "SLEEP"', "no JSON object"),
        ("{" * 50 + "[" * 100_000, "no JSON object"),
    ],
)
def test_invalid_inputs_give_reasons(answer, reason):
    parsed = parse_answer(answer)
    assert not parsed.valid and parsed.action is None and reason in parsed.error


# ---- parse_answer never raises ------------------------------------------------------------------


def _check_never_raises(value):
    parsed = parse_answer(value)
    assert isinstance(parsed, ParsedAnswer)
    assert parsed.valid == (parsed.error is None)
    assert isinstance(parsed.reasoning, str)
    if parsed.valid:
        assert parsed.action in ACTIONS
        if parsed.belief is not None:
            values = parsed.belief_array()
            assert values.shape == (3,) and np.all((values >= 0) & (values <= 1))
    else:
        assert parsed.action is None and parsed.belief is None


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_never_raises_on_text(text):
    _check_never_raises(text)


@settings(max_examples=200, deadline=None)
@given(st.binary())
def test_never_raises_on_binary(data):
    _check_never_raises(data)
    _check_never_raises(data.decode("utf-8", errors="replace"))


json_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20)
    | st.sampled_from(ACTIONS)
)
json_keys = st.sampled_from(["action", "belief", "reasoning", *BELIEF_DIMS]) | st.text(max_size=10)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(json_keys, children, max_size=5),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(json_values, st.booleans())
def test_never_raises_on_arbitrary_json(value, wrap_in_prose):
    text = json.dumps(value)
    _check_never_raises(f"Answer: {text} -- end" if wrap_in_prose else text)


@settings(max_examples=300, deadline=None)
@given(
    action=st.sampled_from(ACTIONS),
    belief=beliefs,
    reasoning=st.text(max_size=40),
    data=st.data(),
)
def test_never_raises_on_mutated_answers(action, belief, reasoning, data):
    text = format_answer(action, belief, reasoning)
    i = data.draw(st.integers(0, len(text)), label="index")
    j = data.draw(st.integers(i, len(text)), label="end")
    junk = data.draw(st.text(max_size=5), label="junk")
    for mutated in (text[:i], text[i:], text[:i] + text[j:], text[:i] + junk + text[i:], text[:j] + text[i:]):
        _check_never_raises(mutated)
    # A truncated answer is never mistaken for a different valid one.
    truncated = parse_answer(text[:i])
    assert not truncated.valid or (truncated.action == action and i == len(text))


# ---- rendering ----------------------------------------------------------------------------------


def test_render_messages_shape_and_determinism(full_history):
    messages = render_messages(full_history)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"] == SYSTEM_PROMPT
    assert messages[1]["content"] == render_user_prompt(full_history)
    again = render_messages(episode_history())  # an independent replay of the same episode
    assert again == messages


def test_render_mentions_the_current_state(full_history):
    for cut in (1, 2, 10, len(full_history)):
        history = full_history[:cut]
        now = history[-1]
        user = render_messages(history)[1]["content"]
        assert f"day {now.day}, {now.slot}" in user
        assert f"step {now.step + 1} of {STEPS_PER_EPISODE}" in user
        rows = [line for line in user.splitlines() if line[:1].isdigit()]
        assert len(rows) == cut - 1
        for row, before, after in zip(rows, history, history[1:]):
            assert row.split()[:3] == [str(before.day), before.slot, after.last_action]
    assert "No steps taken yet." in render_user_prompt(full_history[:1])


def test_rendering_a_week_step_by_step_with_kept_rows_gives_the_same_prompts(full_history):
    rows: list[str] = []  # what the Bayesian teacher keeps per episode, so a week renders in linear time
    for cut in range(1, len(full_history) + 1):
        assert render_user_prompt(full_history[:cut], rows) == render_user_prompt(full_history[:cut])
    assert len(rows) == len(full_history) - 1
    assert "-0.00" not in render_user_prompt(full_history)  # a value that rounds to zero reads +0.00


def test_render_is_compact_for_a_full_week(full_history):
    assert len(full_history) == STEPS_PER_EPISODE  # the last decision: day 7, night
    assert (full_history[-1].day, full_history[-1].slot) == (7, "night")
    total = sum(len(m["content"]) for m in render_messages(full_history))
    assert total < 6000, total


def test_system_prompt_covers_the_protocol():
    for name in (*ACTIONS, *METERS, *BELIEF_DIMS, *SLOTS, '"reasoning"', '"belief"', '"action"'):
        assert name in SYSTEM_PROMPT
    example = SYSTEM_PROMPT[SYSTEM_PROMPT.index('{"reasoning"'):].splitlines()[0]
    assert parse_answer(example).valid


def test_actions_taken_is_a_cross_check(full_history):
    history = full_history[:6]
    taken = [obs.last_action for obs in history[1:]]
    assert render_messages(history, taken) == render_messages(history)
    assert render_messages(history, [a.lower() for a in taken]) == render_messages(history)
    with pytest.raises(ValueError, match="disagree"):
        render_messages(history, taken[:-1])
    with pytest.raises(ValueError, match="disagree"):
        render_messages(history, ["SLEEP"] * len(taken))


def test_render_rejects_bad_histories(full_history):
    with pytest.raises(ValueError, match="empty"):
        render_messages([])
    with pytest.raises(ValueError, match="steps"):
        render_messages(full_history[1:5])
    env = RhythmEnv("continuous")
    obs, _ = env.reset(seed=3)
    final = Observation(STEPS_PER_EPISODE, obs.meters, "SLEEP", obs.meters * 0, obs.meters * 0)
    with pytest.raises(ValueError, match="over"):
        render_messages([*full_history, final])


# ---- fallback -----------------------------------------------------------------------------------


def _observation(step: int, vitality: float) -> Observation:
    meters = np.array([vitality, 0.5, 0.5, 0.5, 0.5])
    return Observation(step=step, meters=meters, last_action=None, last_delta=None, anomaly=None)


@pytest.mark.parametrize(
    "step, vitality, expected",
    [(3, 0.9, "SLEEP"), (7, 0.05, "SLEEP"), (0, 0.2, "NAP"), (5, 0.249, "NAP"), (1, 0.25, "MEDITATE"), (2, 0.8, "MEDITATE")],
)
def test_fallback_action(step, vitality, expected):
    assert fallback_action(_observation(step, vitality)) == expected
    assert expected in ACTIONS


def test_fallback_on_a_real_observation(full_history):
    for obs in full_history:
        action = fallback_action(obs)
        assert action in ACTIONS
        assert (action == "SLEEP") == (obs.slot == "night")


def test_fallback_actions_vectorized_matches_the_scalar_rule():
    from rhythm_env.protocol import fallback_actions

    steps = np.array([3, 7, 0, 5, 1, 2])
    vitality = np.array([0.9, 0.05, 0.2, 0.249, 0.25, 0.8])
    expected = [fallback_action(_observation(int(s), float(v))) for s, v in zip(steps, vitality)]
    assert [ACTIONS[i] for i in fallback_actions(steps, vitality)] == expected


def test_chat_conversation_grows_by_one_row_and_one_answer_per_step(full_history):
    from rhythm_env.protocol import render_chat_turn, render_conversation

    answers = [f"answer {t}" for t in range(len(full_history))]
    for cut in (1, 2, 5, len(full_history)):
        history = full_history[:cut]
        messages = render_conversation(history, answers[: cut - 1], variant="compact")
        assert [m["role"] for m in messages] == ["system"] + ["user", "assistant"] * (cut - 1) + ["user"]
        assert [m["content"] for m in messages if m["role"] == "assistant"] == answers[: cut - 1]
        user = messages[-1]["content"]
        assert user == render_chat_turn(history)
        now = history[-1]
        assert f"day {now.day} {now.slot} (step {now.step + 1} of {STEPS_PER_EPISODE})" in user
        if cut > 1:  # only the newest row: the previous slot's action and its anomaly, not the whole week
            rows = [line for line in user.splitlines() if line[:1].isdigit()]
            assert len(rows) == 1 and rows[0].split()[:3] == [str(history[-2].day), history[-2].slot,
                                                              now.last_action]
        # the conversation only grows: step t's prompt is a prefix of step t+1's
        if cut < len(full_history):
            longer = render_conversation(full_history[: cut + 1], answers[:cut], variant="compact")
            assert longer[: len(messages)] == messages
    assert render_conversation(full_history[:3], [], prompt_format="table") == render_messages(full_history[:3])
    with pytest.raises(ValueError, match="needs 2 earlier answers"):
        render_conversation(full_history[:3], ["only one"])
    with pytest.raises(ValueError, match="unknown prompt format"):
        render_conversation(full_history[:3], answers[:2], prompt_format="xml")


def test_labeled_chat_turn_names_the_meter_before_every_number(full_history):
    from rhythm_env.protocol import render_conversation, render_labeled_turn
    from rhythm_env.sim.spec import METERS

    first = render_labeled_turn(full_history[:1])
    assert first.splitlines()[-1] == "Now day 1 morning, " + " ".join(
        f"{m[:4]} {v:.2f}" for m, v in zip(METERS, full_history[0].meters))
    for cut in (2, 9, len(full_history)):
        now = full_history[cut - 1]
        row, state = render_labeled_turn(full_history[:cut]).splitlines()
        words = row.split()
        assert words[:2] == [now.last_action, "anomaly"]
        # every number follows its meter's name, and they are the newest anomaly, signed to 2 decimals
        assert words[2::2] == [m[:4] for m in METERS]
        assert [float(w) for w in words[3::2]] == pytest.approx(list(now.anomaly), abs=0.0051)
        assert all(w[0] in "+-" for w in words[3::2])
        assert state.startswith(f"Now day {now.day} {now.slot}, ")
        assert [float(w) for w in state.split(", ", 1)[1].split()[1::2]] == pytest.approx(list(now.meters), abs=0.0051)
    answers = [f"answer {t}" for t in range(5)]
    messages = render_conversation(full_history[:6], answers, variant="compact", prompt_format="chat_labeled")
    assert [m["content"] for m in messages if m["role"] == "user"] == [
        render_labeled_turn(full_history[: t + 1]) for t in range(6)]
    assert [m["content"] for m in messages if m["role"] == "assistant"] == answers


def test_format_answer_rounds_beliefs_to_two_decimals():
    assert json.loads(format_answer("NAP", [0.349, 0.66, 1.2], ""))["belief"] == {"social": 0.35, "morning": 0.66,
                                                                                  "work": 1.0}
