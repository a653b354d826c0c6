"""The model's answer: `parse_answer` turns any text into a `ParsedAnswer` without ever raising;
`format_answer` writes the canonical answer, which is what a teacher's answer looks like in training data."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

import numpy as np

from ..sim.spec import ACTIONS, BELIEF_DIMS, action_index
from .numbers import DECIMALS


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


def action_prefix(answer: str) -> str:
    """The part of a valid answer that comes before its action: the text through the last number
    before the "action" key (the reasoning and the stated belief), or "" when the answer is invalid,
    states no belief, or names its action first. `prefix + rest` is the whole answer again, so a
    prompt that ends with the prefix leaves only the action to say (GRPO samples the action alone)."""
    parsed = parse_answer(answer)
    if not parsed.valid or parsed.belief is None:
        return ""
    key = answer.rfind('"action"')
    digits = [m.end() for m in re.finditer(r"\d", answer[: max(key, 0)])]
    return answer[: digits[-1]] if digits else ""


def format_answer(action: str, belief, reasoning: str) -> str:
    """The canonical answer: compact JSON, reasoning first (the model explains before it commits),
    beliefs clipped to [0, 1] and rounded to the grid (`DECIMALS`, 2 decimals). Raises ValueError on an unknown action or a
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
        answer["belief"] = {d: round(min(max(v, 0.0), 1.0), DECIMALS) + 0.0 for d, v in zip(BELIEF_DIMS, numbers)}
    answer["action"] = ACTIONS[action_index(action)]
    return json.dumps(answer, separators=(",", ":"), ensure_ascii=False)
