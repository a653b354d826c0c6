"""The protocol's numbers as text (rhythm_env.protocol.numbers): the grid's addition, the signed
renderer and the readers of an answer's numbers, each the one place its rule lives."""

import numpy as np

from rhythm_env.protocol import (
    BELIEF_NUMBER,
    add_increment,
    belief_due,
    format_answer,
    last_stated_belief,
    signed,
    stated_increments,
)

ANSWER = '{"reasoning":"social +0.07 morning -0.02 work +0.00","belief":{"social":0.53,"morning":1.0,"work":0},' \
         '"action":"SLEEP"}'


def test_the_chains_addition_clips_to_zero_one_and_rounds_to_the_grid_as_python_rounds():
    assert add_increment([0.46, 0.99, 0.05], [0.07, 0.02, -0.08]).tolist() == [0.53, 1.0, 0.0]
    assert float(add_increment(0.46, 0.07)) == 0.53 and float(add_increment(0.0, -0.0)) == 0.0
    assert str(float(add_increment(0.05, -0.05))) == "0.0"  # never -0.0
    # off the grid it rounds as round() does, not as numpy's scaled rounding (0.17 where numpy says 0.18)
    assert float(add_increment(0.125, 0.05)) == round(0.175, 2) == 0.17


def test_a_signed_number_is_written_on_the_grid_and_zero_is_never_negative():
    assert [signed(v) for v in (0.05, -0.1, -0.004, 0.0, -0.0, 0.125, np.float64(-0.333))] == [
        "+0.05", "-0.10", "+0.00", "+0.00", "+0.00", "+0.12", "-0.33"]


def test_the_answers_numbers_are_read_where_they_stand():
    assert stated_increments(ANSWER) == {"social": 0.07, "morning": -0.02, "work": 0.0}
    assert stated_increments('{"reasoning":"tired","belief":{"social":0.5}') == {}
    assert last_stated_belief("x" + ANSWER + ANSWER.replace("0.53", "0.4")) == {"social": 0.4, "morning": 1.0, "work": 0.0}
    assert last_stated_belief("x" + ANSWER + ANSWER.replace("0.53", "0.4"), end=1 + len(ANSWER))["social"] == 0.53
    assert last_stated_belief('{"reasoning":"","action":"NAP"}') is None
    assert belief_due(ANSWER[: ANSWER.index("0.53")]) == "social" and belief_due(ANSWER) is None
    written = format_answer("NAP", [0.123, 0.5, 1.0], "")
    assert [(m.group(1), float(m.group(2))) for m in BELIEF_NUMBER.finditer(written)] == [
        ("social", 0.12), ("morning", 0.5), ("work", 1.0)]
