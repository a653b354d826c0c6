"""The text protocol between RhythmEnv and a language-model agent.

The env side renders the episode so far as chat messages (`render_messages`); the model answers
with one JSON object holding its reasoning, its belief about the hidden profile and its action;
`parse_answer` turns any text into a `ParsedAnswer` without ever raising, and `fallback_action`
names the safe action to take when the answer is unusable. `format_answer` writes the canonical
answer, which is what a teacher's answer looks like in training data.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

import numpy as np

from .env.dynamics import NOISE_SD
from .env.spec import ACTIONS, BELIEF_DIMS, METERS, SLOTS, STEPS_PER_EPISODE, action_index

SYSTEM_PROMPT = f"""\
You are a personal rhythm coach. For one week (7 days x 4 slots: morning, afternoon, evening, \
night = {STEPS_PER_EPISODE} steps) you choose one activity per slot for a person whose personality \
is hidden from you. Learn who they are from how they react, and plan their week around it.

Meters, each in [0, 1]; below 0.10 a meter has crashed:
- vitality: physical energy
- cognition: mental sharpness
- progress: work done this week
- serenity: calm, low stress
- connection: feeling close to others
Every slot the meters drift down a little; staying up at night costs vitality and cognition.

Actions:
- DEEP_WORK: focused work; most progress when cognition is high and at the person's peak time; tiring
- SHALLOW_WORK: routine tasks; some progress, less tiring
- LEARN: study; some progress, sharpens cognition at the person's peak time
- EXERCISE: lifts cognition and serenity; extra energy for morning people in the morning
- SOCIALIZE: see friends; restores connection, energizes extroverts, drains introverts
- FAMILY_TIME: gentle connection and calm
- MEDITATE: restores serenity, small lift to cognition
- NAP: short rest; restores some vitality
- SLEEP: at night restores vitality and cognition; in the day mostly a lost slot
- LEISURE: relax; pleasant, unless the person feels guilty about not working

Hidden profile, three belief dimensions in [0, 1] (0.5 is a typical person):
- social: 0 introvert (socializing drains and stresses them) .. 1 extrovert (it energizes them, they need contact)
- morning: 0 night owl .. 1 morning person (energetic and sharpest in the morning, needs less sleep)
- work: 0 drained by work .. 1 workaholic (work restores energy, progress calms, leisure brings guilt)

The history lists each step's delta (actual meter change) and anomaly (delta minus what a typical \
person would have got from the same action in the same state). Anomalies are your evidence about \
the person. Each meter also has random noise of about {NOISE_SD:.2f} per step, so weigh several steps, not one.

Goal: keep vitality, cognition, serenity and connection high with none crashing, make progress, \
and act on what you learn: the person values what their profile says they value. Your belief at \
the last step is scored against the true profile, so always give your current best estimate.

Answer with exactly one JSON object and nothing else:
{{"reasoning": "<one or two sentences>", "belief": {{"social": 0.3, "morning": 0.7, "work": 0.5}}, \
"action": "DEEP_WORK"}}
"action" must be one of: {", ".join(ACTIONS)}."""

COMPACT_SYSTEM_PROMPT = (
    "RhythmEnv coach. Infer the person's hidden profile from the anomalies and act on it. Answer with one "
    'JSON object: {"reasoning": ..., "belief": {"social": ..., "morning": ..., "work": ...}, "action": ...}.'
)
PROMPT_VARIANTS = {"full": SYSTEM_PROMPT, "compact": COMPACT_SYSTEM_PROMPT}

_METER_HEADER = " ".join(m[:4] for m in METERS)  # "vita cogn prog sere conn"


def _signed(values) -> str:
    # Rounding first and adding 0.0 turns -0.001 into "+0.00" rather than "-0.00".
    return " ".join(f"{round(float(v), 2) + 0.0:+.2f}" for v in values)


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


def render_user_prompt(history) -> str:
    """The user message for the decision at history[-1]: the week so far as a table, then the state now.

    `history` is the list of observations from the reset observation up to the current one. Row i
    shows the action taken in the slot of history[i - 1] and its effect, read from history[i].
    """
    _check_history(history, None)
    start = history[0]
    lines = [f"Start of the week, meters ({_METER_HEADER}): {_plain(start.meters)}"]
    if len(history) > 1:
        lines.append(f"History (delta and anomaly per meter: {_METER_HEADER}):")
        lines.append("day slot      action       | delta                         | anomaly")
        lines.extend(_history_row(before, after) for before, after in zip(history, history[1:]))
    else:
        lines.append("No steps taken yet.")
    lines.append(_now_line(history[-1]))
    lines.append('Reply with one JSON object: {"reasoning": ..., "belief": {"social": ..., "morning": ..., '
                 '"work": ...}, "action": ...}')
    return "\n".join(lines)


PROMPT_FORMATS = ("table", "chat", "chat_labeled")
CHAT_FORMATS = ("chat", "chat_labeled")  # one growing conversation per episode
# What an SFT answer's reasoning carries (data/sft_dataset.py): the evidence read-out's increment and
# running belief, nothing, or the teacher's own reasoning.
REASONING = ("evidence", "none", "full")
# The recipe (benchmarks/README.md): the week as one conversation with every number after its meter's
# name, each answer carrying the evidence read-out's increment and running belief.
DEFAULT_PROMPT_FORMAT = "chat_labeled"
DEFAULT_REASONING = "evidence"


@dataclass(frozen=True)
class DatasetFormat:
    """How a dataset renders a week (`prompt_format`) and what its answers' rationale carries
    (`reasoning`). The dataset's build info and every checkpoint record it; whatever renders prompts
    or reads the data (SFT, GRPO, the policy, the probe) reads it from there instead of guessing."""

    prompt_format: str = DEFAULT_PROMPT_FORMAT
    reasoning: str = DEFAULT_REASONING

    def __post_init__(self):
        for field_name, value, allowed in (("prompt_format", self.prompt_format, PROMPT_FORMATS),
                                           ("reasoning", self.reasoning, REASONING)):
            if value not in allowed:
                raise ValueError(f"unknown {field_name} {value!r}; allowed: {', '.join(allowed)}")

    @classmethod
    def from_info(cls, info: dict) -> DatasetFormat:
        """The format a dataset's build info or a checkpoint's record names. Artifacts written before
        the format was recorded were rendered as a table with the teacher's full reasoning."""
        return cls(info.get("prompt_format") or "table", info.get("reasoning") or "full")

    @property
    def chat(self) -> bool:
        """One growing conversation per episode (a row is a week), not one row per decision."""
        return self.prompt_format in CHAT_FORMATS

    def as_dict(self) -> dict:
        return {"prompt_format": self.prompt_format, "reasoning": self.reasoning}


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
    each number lets it find "the connection anomaly" by content (measured in benchmarks/README.md).
    """
    _check_history(history, None)
    now = history[-1]
    state = f"Now day {now.day} {now.slot}, {_labeled(f'{float(v):.2f}' for v in now.meters)}"
    if len(history) == 1:
        return "Start of the week. Each turn: the last action and its anomaly per meter, then the state now.\n" + state
    anomaly = (f"{round(float(v), 2) + 0.0:+.2f}" for v in now.anomaly)
    return f"{now.last_action} anomaly {_labeled(anomaly)}\n{state}"


def render_conversation(history, answers: list[str], *, variant: str = "full", prompt_format: str = "chat") -> list[dict]:
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
    render_turn = render_labeled_turn if prompt_format == "chat_labeled" else render_chat_turn
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


def system_prompt(variant: str = "full") -> str:
    """The system message: "full" explains the task (LLM teachers, pretrained students); "compact"
    is a short fixed marker for students trained from scratch, which cannot use the explanation
    and would otherwise spend most of their compute re-reading it."""
    if variant not in PROMPT_VARIANTS:
        raise ValueError(f"unknown prompt variant {variant!r}; allowed: {', '.join(PROMPT_VARIANTS)}")
    return PROMPT_VARIANTS[variant]


def render_messages(history, actions_taken: list[str] | None = None, *, variant: str = "full") -> list[dict]:
    """Chat messages for the decision at history[-1] (a pure function of the history).

    actions_taken is optional: the observations already record each step's action. When given, it
    must match them (names, case-insensitive), otherwise ValueError.
    """
    _check_history(history, actions_taken)
    return [
        {"role": "system", "content": system_prompt(variant)},
        {"role": "user", "content": render_user_prompt(history)},
    ]


@dataclass(frozen=True)
class ParsedAnswer:
    """A model answer after parsing. When `valid` is False, `error` says why and action/belief are None."""

    valid: bool
    action: str | None
    belief: dict[str, float] | None
    reasoning: str
    error: str | None

    def belief_array(self) -> np.ndarray | None:
        if self.belief is None:
            return None
        return np.array([self.belief[d] for d in BELIEF_DIMS], dtype=np.float64)


def _invalid(error: str, reasoning: str = "") -> ParsedAnswer:
    return ParsedAnswer(valid=False, action=None, belief=None, reasoning=reasoning, error=error)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_FENCE = re.compile(r"```[ \t]*(?:json)?[ \t]*\n?(.*?)```", re.DOTALL | re.IGNORECASE)
_DECODER = json.JSONDecoder()
_JSON_TYPES = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean",
               type(None): "null"}
# Each attempt may scan to the end of the text; bounding the attempts keeps a degenerate,
# brace-heavy output linear in its length. Real answers have few braces before the object.
_MAX_SCAN_STARTS = 64


def _loads(text: str):
    """json.loads that reports failure as None instead of raising (deep nesting included)."""
    try:
        return True, json.loads(text)
    except (ValueError, RecursionError):
        return False, None


def _extract_object(text: str) -> tuple[dict | None, str | None]:
    """The answer's JSON object, or (None, reason). Tries the whole text, then fenced blocks, then
    the first '{' from which a complete JSON object decodes (braces inside strings are handled by
    the JSON decoder itself)."""
    candidates = [text.strip()] + [m.group(1).strip() for m in _FENCE.finditer(text)]
    for candidate in candidates:
        ok, value = _loads(candidate)
        if ok:
            if isinstance(value, dict):
                return value, None
            return None, f"the answer's JSON is {_JSON_TYPES.get(type(value), 'a value')}, expected an object"
    pos = text.find("{")
    for _ in range(_MAX_SCAN_STARTS):
        if pos < 0:
            break
        try:
            value, _end = _DECODER.raw_decode(text, pos)
            return value, None  # decoding from "{" can only yield a dict
        except (ValueError, RecursionError):
            pos = text.find("{", pos + 1)
    return None, "no JSON object found in the answer"


def _normalize_action(value) -> tuple[str | None, str | None]:
    if not isinstance(value, str):
        return None, f"action must be a string, got {_short(value)}; allowed actions: {', '.join(ACTIONS)}"
    key = re.sub(r"[\s\-]+", "_", value.strip()).upper()
    if key in ACTIONS:
        return key, None
    return None, f"unknown action {_short(value)}; allowed actions: {', '.join(ACTIONS)}"


def _number(value) -> float | None:
    # bool is an int subclass, but true/false is not a probability-like estimate.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _normalize_belief(value) -> tuple[dict[str, float] | None, str | None]:
    if isinstance(value, list):
        if len(value) != len(BELIEF_DIMS):
            return None, f"belief list must have {len(BELIEF_DIMS)} numbers ({', '.join(BELIEF_DIMS)})"
        raw = dict(zip(BELIEF_DIMS, value))
    elif isinstance(value, dict):
        raw = {str(k).strip().lower(): v for k, v in value.items()}
    else:
        return None, f"belief must be an object with keys {', '.join(BELIEF_DIMS)}, got {_short(value)}"
    belief = {}
    for dim in BELIEF_DIMS:
        if dim not in raw:
            return None, f"belief is missing {dim!r}; expected keys {', '.join(BELIEF_DIMS)}"
        number = _number(raw[dim])
        if number is None:
            return None, f"belief {dim!r} must be a finite number, got {_short(raw[dim])}"
        belief[dim] = min(max(number, 0.0), 1.0) + 0.0  # clipped: an overconfident estimate is still usable
    return belief, None


def parse_answer(text) -> ParsedAnswer:
    """Parse a model's answer; never raises. The action is required, the belief optional (absent or
    null gives belief None), the reasoning defaults to "". Extra keys are ignored."""
    try:
        return _parse(text)
    except Exception as exc:  # a parser bug must cost one step, not the whole evaluation run
        return _invalid(f"internal parser error: {type(exc).__name__}: {exc}")


def _parse(text) -> ParsedAnswer:
    if not isinstance(text, str):
        return _invalid(f"answer must be a str, got {type(text).__name__}")
    obj, error = _extract_object(text)
    if obj is None:
        return _invalid(error)
    reasoning = obj.get("reasoning")
    reasoning = "" if reasoning is None else reasoning if isinstance(reasoning, str) else str(reasoning)
    if "action" not in obj:
        return _invalid(f"the answer has no \"action\"; allowed actions: {', '.join(ACTIONS)}", reasoning)
    action, error = _normalize_action(obj["action"])
    if action is None:
        return _invalid(error, reasoning)
    belief = None
    if obj.get("belief") is not None:
        belief, error = _normalize_belief(obj["belief"])
        if belief is None:
            return _invalid(error, reasoning)
    return ParsedAnswer(valid=True, action=action, belief=belief, reasoning=reasoning, error=None)


def format_answer(action: str, belief, reasoning: str) -> str:
    """The canonical answer: compact JSON, reasoning first (the model explains before it commits),
    beliefs clipped to [0, 1] and rounded to 2 decimals. Raises ValueError on an unknown action or a
    malformed belief, since teacher data must be clean."""
    answer = {"reasoning": str(reasoning)}
    if belief is not None:
        if isinstance(belief, dict):
            missing = [d for d in BELIEF_DIMS if d not in belief]
            if missing:
                raise ValueError(f"belief is missing {', '.join(missing)}")
            values = [belief[d] for d in BELIEF_DIMS]
        else:
            values = list(np.asarray(belief, dtype=np.float64).ravel())
        if len(values) != len(BELIEF_DIMS):
            raise ValueError(f"belief must have {len(BELIEF_DIMS)} values ({', '.join(BELIEF_DIMS)}), got {len(values)}")
        numbers = [float(v) for v in values]
        if not all(math.isfinite(v) for v in numbers):
            raise ValueError(f"belief values must be finite, got {numbers}")
        answer["belief"] = {d: round(min(max(v, 0.0), 1.0), 2) + 0.0 for d, v in zip(BELIEF_DIMS, numbers)}
    answer["action"] = ACTIONS[action_index(action)]
    return json.dumps(answer, separators=(",", ":"), ensure_ascii=False)


def fallback_actions(steps, vitality) -> np.ndarray:
    """`fallback_action` for a batch: action indices from each episode's step and vitality."""
    steps, vitality = np.asarray(steps), np.asarray(vitality, dtype=np.float64)
    night = steps % len(SLOTS) == SLOTS.index("night")
    tired = vitality < 0.25
    return np.where(night, ACTIONS.index("SLEEP"), np.where(tired, ACTIONS.index("NAP"), ACTIONS.index("MEDITATE")))


def fallback_action(observation) -> str:
    """The action taken when an answer is invalid.

    SLEEP at night: staying up costs vitality and cognition, and sleep is the big nightly restore.
    NAP when vitality is low (< 0.25), to pull it away from the crash threshold. Otherwise MEDITATE:
    its own effects are small and non-negative on every meter for every profile, so it never pushes
    a meter towards a crash beyond the passive drift, and it makes no progress: an invalid answer is
    safe but earns nothing.
    """
    vitality = float(observation.meters[METERS.index("vitality")])
    return ACTIONS[int(fallback_actions(observation.step, vitality))]


# The answer as a strict JSON schema, for endpoints with structured outputs (OpenAI, Azure, vLLM):
# the reasoning first (the model explains before it commits), the three belief numbers in [0, 1],
# the action from the ten names. An answer that follows it is exactly what `parse_answer` accepts.
ANSWER_JSON_SCHEMA = {
    "type": "object",
    "properties": {
        "reasoning": {"type": "string"},
        "belief": {
            "type": "object",
            "properties": {d: {"type": "number", "minimum": 0, "maximum": 1} for d in BELIEF_DIMS},
            "required": list(BELIEF_DIMS),
            "additionalProperties": False,
        },
        "action": {"type": "string", "enum": list(ACTIONS)},
    },
    "required": ["reasoning", "belief", "action"],
    "additionalProperties": False,
}
ANSWER_RESPONSE_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "rhythm_answer", "strict": True, "schema": ANSWER_JSON_SCHEMA},
}
