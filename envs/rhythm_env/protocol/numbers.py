"""The numbers of the text protocol as text: the 2-decimal grid prompts show and answers write on
(`DECIMALS`), a signed number as they write it (`signed`), the evidence chain's addition
(`add_increment`), and the answer's numbers read back from text (`BELIEF_NUMBER`,
`INCREMENT_NUMBER`, `stated_increments`, `last_stated_belief`, `belief_due`).

`parse_answer` reads a whole answer's values through its JSON; the readers here find the numbers
where they stand in a text that is not one answer: a conversation, or an answer still being written (greedy decoding writes the
belief as the previous answer's plus the increment just written: `training/number_decoding.py`).
They read the canonical answer's layout (`format_answer`: the reasoning first, then the belief's
dimensions in their order) and the evidence reasoning's ("social +0.01 morning +0.00 work -0.05":
`data/answers.py`).
"""

from __future__ import annotations

import re

import numpy as np

from ..sim.spec import BELIEF_DIMS

# The grid every belief, increment and shown anomaly is written on: 2 decimals.
DECIMALS = 2

# How a canonical answer starts (format_answer writes the reasoning first).
ANSWER_START = '{"reasoning":'

_DIM = "(" + "|".join(BELIEF_DIMS) + ")"
_BELIEF_VALUE = r"(\d(?:\.\d+)?)"  # as an answer writes a belief in [0, 1]: "0.84", "1.0", "0"
# A stated belief number: group 1 its dimension, group 2 the number ('"social":0.84').
BELIEF_NUMBER = re.compile(f'"{_DIM}":\\s*{_BELIEF_VALUE}')
# An evidence increment in the reasoning: group 1 its dimension, group 2 the signed number ("social +0.01").
INCREMENT_NUMBER = re.compile(f'(?<=[" ]){_DIM} ([+-]\\d+\\.\\d+)')
# A whole stated belief, its dimensions in order: groups 1-3 the numbers.
_STATED_BELIEF = re.compile(r'"belief":\s*\{' + r",\s*".join(f'"{d}":\\s*{_BELIEF_VALUE}' for d in BELIEF_DIMS)
                            + r"\}")
_BELIEF_DUE = re.compile(f'"{_DIM}":\\s*$')

# The numbers as tokens. A number with its leading space is one piece of text the tiny tokenizer never
# splits or merges with its neighbours (`NUMBER_CHUNK`; `NUMBER_START` begins one), so every number is
# a token of its own; a token is a decimal number when it matches `DECIMAL_TOKEN` (its embedding
# starts with value features, `training/tiny.py`), and the two kinds an answer writes on the grid are
# an increment (" +0.20", after a space in the reasoning) and a belief ("0.84"), which greedy decoding
# writes as the median of their values (`training/number_decoding.py`).
NUMBER_START = r"\s?[+-]?\d"
NUMBER_CHUNK = r"\s?[+-]?\d+(?:\.\d+)?"
DECIMAL_TOKEN = re.compile(r"^\s?[+-]?\d*\.\d+$")
INCREMENT_TOKEN = re.compile(f"^ [+-]0\\.\\d{{{DECIMALS}}}$")
BELIEF_TOKEN = re.compile(f"^(0\\.\\d{{1,{DECIMALS}}}|1\\.0)$")


def signed(value) -> str:
    """A number as prompts and answers write a change: signed, on the grid ("+0.05", "-0.10"); one
    that rounds to zero reads "+0.00", never "-0.00"."""
    text = f"{float(value):+.{DECIMALS}f}"
    return "+" + text[1:] if float(text) == 0.0 else text


def add_increment(belief, increment) -> np.ndarray:
    """The evidence chain's addition: the previous belief plus the increment, clipped to [0, 1], on the
    grid (rounded as Python's `round` rounds), elementwise. Every belief of an evidence answer is its
    previous one plus its stated increment (`teacher.evidence.walk_chain`), and greedy decoding writes
    a student's belief the same way (`training.number_decoding.belief_sum`)."""
    total = np.clip(np.asarray(belief, dtype=np.float64) + np.asarray(increment, dtype=np.float64), 0.0, 1.0)
    return np.array([round(float(v), DECIMALS) for v in total.ravel()]).reshape(total.shape) + 0.0


def stated_increments(answer: str) -> dict[str, float]:
    """The evidence increments an answer (or its start) states before its "belief" key, by dimension
    ({"social": 0.01, ...}; the last one where a dimension's is stated twice, none where the
    reasoning carries none)."""
    return {dim: float(value) for dim, value in INCREMENT_NUMBER.findall(answer.split('"belief"', 1)[0])}


def last_stated_belief(text: str, end: int | None = None) -> dict[str, float] | None:
    """The last whole belief stated in text[:end] ('"belief":{"social":..,"morning":..,"work":..}'), by
    dimension, or None where there is none."""
    found = list(_STATED_BELIEF.finditer(text, 0, len(text) if end is None else end))
    if not found:
        return None
    return {dim: float(found[-1].group(k + 1)) for k, dim in enumerate(BELIEF_DIMS)}


def belief_due(text: str) -> str | None:
    """The dimension whose belief number `text` ends just before ('..."belief":{"social":' gives
    "social"), or None."""
    key = _BELIEF_DUE.search(text)
    return None if key is None else key.group(1)
