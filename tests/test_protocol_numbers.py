"""The protocol's numbers (rhythm_core.protocol.numbers): the grid's addition, the one place its rule
lives."""

from rhythm_core.protocol import add_increment


def test_the_chains_addition_clips_to_zero_one_and_rounds_to_the_grid_as_python_rounds():
    assert add_increment([0.46, 0.99, 0.05], [0.07, 0.02, -0.08]).tolist() == [0.53, 1.0, 0.0]
    assert float(add_increment(0.46, 0.07)) == 0.53 and float(add_increment(0.0, -0.0)) == 0.0
    assert str(float(add_increment(0.05, -0.05))) == "0.0"  # never -0.0
    # off the grid it rounds as round() does, not as numpy's scaled rounding (0.17 where numpy says 0.18)
    assert float(add_increment(0.125, 0.05)) == round(0.175, 2) == 0.17

