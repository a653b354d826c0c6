"""Rendering the episode so far as chat messages: the week as one table (`render_messages`,
`render_user_prompt`) or as one growing conversation (`render_conversation`, with user turns from
`render_chat_turn` or `render_labeled_turn`); and a tool's answer to a tool-calling agent
(`render_tool_answer`)."""

from __future__ import annotations

from ..sim.spec import ACTIONS, METERS, STEPS_PER_EPISODE, action_index
from .format import CHAT_FORMATS, PROMPT_FORMATS
from .numbers import signed
from .prompts import DEFAULT_PROMPT_VARIANT, system_prompt

_METER_HEADER = " ".join(m[:4] for m in METERS)  # "vita cogn prog sere conn"


def _signed(values) -> str:
    return " ".join(map(signed, values))


def _plain(values) -> str:
    return " ".join(f"{float(v):.2f}" for v in values)


def _check_history(history, actions_taken) -> None:
    if not history:
        raise ValueError("history is empty; it must start with the reset observation")
    steps = [obs.step for obs in history]
    if steps != list(range(len(history))):
        raise ValueError(f"history must hold steps 0..{len(history) - 1} in order, got steps {steps}")
    if history[-1].step >= STEPS_PER_EPISODE:
        raise ValueError(f"the episode is over after {STEPS_PER_EPISODE} steps; there is no decision to render")
    if actions_taken is not None:
        # The observations already carry their actions; a caller's own list is only a cross-check,
        # and a mismatch means its bookkeeping is off, which must not be papered over.
        recorded = [obs.last_action for obs in history[1:]]
        given = [ACTIONS[action_index(a)] for a in actions_taken]
        if given != recorded:
            raise ValueError(f"actions_taken {given} disagree with the history's actions {recorded}")


def render_user_prompt(history, rows: list[str] | None = None) -> str:
    """The user message for the decision at history[-1]: the week so far as a table, then the state now.

    `history` is the list of observations from the reset observation up to the current one. Row i
    shows the action taken in the slot of history[i - 1] and its effect, read from history[i].
    `rows`, kept by a caller that renders every step of one week, holds the rows earlier calls
    rendered and is extended in place, so the week's prompts cost linear time, not quadratic.
    """
    _check_history(history, None)
    start = history[0]
    lines = [f"Start of the week, meters ({_METER_HEADER}): {_plain(start.meters)}"]
    if len(history) > 1:
        rows = [] if rows is None else rows
        rows.extend(_history_row(history[k - 1], history[k]) for k in range(len(rows) + 1, len(history)))
        lines.append(f"History (delta and anomaly per meter: {_METER_HEADER}):")
        lines.append("day slot      action       | delta                         | anomaly")
        lines.extend(rows[: len(history) - 1])
    else:
        lines.append("No steps taken yet.")
    lines.append(_now_line(history[-1]))
    lines.append('Reply with one JSON object: {"reasoning": ..., "belief": {"social": ..., "morning": ..., '
                 '"work": ...}, "action": ...}')
    return "\n".join(lines)


def _history_row(before, after) -> str:
    return (f"{before.day}   {before.slot:<9} {after.last_action:<12} | {_signed(after.last_delta)} "
            f"| {_signed(after.anomaly)}")


def _now_line(now) -> str:
    meters = ", ".join(f"{m} {float(v):.2f}" for m, v in zip(METERS, now.meters))
    return f"Now: day {now.day}, {now.slot} (step {now.step + 1} of {STEPS_PER_EPISODE}). Meters: {meters}."


def _short_now_line(now) -> str:
    # The chat format's state line: the meters in the header's order, as in the first turn.
    return f"Now: day {now.day} {now.slot} (step {now.step + 1} of {STEPS_PER_EPISODE}), meters {_plain(now.meters)}"


def render_chat_turn(history) -> str:
    """The user turn of the chat format for the decision at history[-1]: at the first step the start
    meters, afterwards only the newest history row (the last action's delta and anomaly), then the
    state now. Earlier rows and the model's own earlier answers are already in the conversation."""
    _check_history(history, None)
    now = history[-1]
    if len(history) == 1:
        first = (f"Start of the week, meters ({_METER_HEADER}): {_plain(now.meters)}\n"
                 f"Each turn: day slot action | delta | anomaly ({_METER_HEADER}).")
        return f"{first}\n{_short_now_line(now)}"
    return f"{_history_row(history[-2], now)}\n{_short_now_line(now)}"


def _labeled(values) -> str:
    return " ".join(f"{m[:4]} {v}" for m, v in zip(METERS, values))


def render_labeled_turn(history) -> str:
    """The user turn of the "chat_labeled" format: every number follows the name of its meter.

    At the first step the state now; afterwards the last action and its anomaly per meter, then the
    state now. The delta is left out: it is the difference of two states the conversation shows.
    Why: in "chat" a number's meter is only its position in a row of ten, and a small model trained
    from scratch never learns to pick the fourth number after the second "|"; a name right before
    each number lets it find "the connection anomaly" by content (benchmarks/README.md, D5).
    """
    _check_history(history, None)
    now = history[-1]
    state = f"Now day {now.day} {now.slot}, {_labeled(f'{float(v):.2f}' for v in now.meters)}"
    if len(history) == 1:
        return "Start of the week. Each turn: the last action and its anomaly per meter, then the state now.\n" + state
    return f"{now.last_action} anomaly {_labeled(map(signed, now.anomaly))}\n{state}"


def render_tool_answer(history) -> str:
    """What a tool-calling agent reads after each call (text/tool_env.py): `render_labeled_turn`, and
    after the week's last step its anomaly and that the week is over."""
    now = history[-1]
    if now.step < STEPS_PER_EPISODE:
        return render_labeled_turn(history)
    return (f"{now.last_action} anomaly {_labeled(map(signed, now.anomaly))}\n"
            f"The week is over, meters {_labeled(f'{float(v):.2f}' for v in now.meters)}. Make no more calls.")


def chat_turn_renderer(prompt_format: str):
    """The user-turn renderer of a chat format (`render_labeled_turn` or `render_chat_turn`): what a
    caller that keeps a conversation turn by turn appends, instead of rendering it all again."""
    if prompt_format not in CHAT_FORMATS:
        raise ValueError(f"{prompt_format!r} is not a chat format; chat formats: {', '.join(CHAT_FORMATS)}")
    return render_labeled_turn if prompt_format == "chat_labeled" else render_chat_turn


def render_conversation(history, answers: list[str], *, variant: str = DEFAULT_PROMPT_VARIANT,
                        prompt_format: str = "chat") -> list[dict]:
    """Chat messages for the decision at history[-1].

    "table": system + one user message holding the whole week so far (`render_user_prompt`); the
    earlier answers are not shown. "chat": the episode as one growing conversation, a user turn per
    step (`render_chat_turn`) and, after each but the last, the assistant's answer at that step
    (`answers[t]`, so len(answers) == len(history) - 1): the model reads its own earlier beliefs.
    "chat_labeled": the same conversation with user turns from `render_labeled_turn`."""
    if prompt_format == "table":
        return render_messages(history, variant=variant)
    if prompt_format not in CHAT_FORMATS:
        raise ValueError(f"unknown prompt format {prompt_format!r}; allowed: {', '.join(PROMPT_FORMATS)}")
    render_turn = chat_turn_renderer(prompt_format)
    _check_history(history, None)
    if len(answers) != len(history) - 1:
        raise ValueError(f"a chat conversation at step {len(history) - 1} needs {len(history) - 1} earlier answers, "
                         f"got {len(answers)}")
    messages = [{"role": "system", "content": system_prompt(variant)}]
    for t in range(len(history)):
        messages.append({"role": "user", "content": render_turn(history[: t + 1])})
        if t < len(answers):
            messages.append({"role": "assistant", "content": answers[t]})
    return messages


def render_messages(history, actions_taken: list[str] | None = None, *,
                    variant: str = DEFAULT_PROMPT_VARIANT) -> list[dict]:
    """Chat messages for the decision at history[-1] (a pure function of the history).

    actions_taken is optional: the observations already record each step's action. When given, it
    must match them (names, case-insensitive), otherwise ValueError.
    """
    _check_history(history, actions_taken)
    return [
        {"role": "system", "content": system_prompt(variant)},
        {"role": "user", "content": render_user_prompt(history)},
    ]
