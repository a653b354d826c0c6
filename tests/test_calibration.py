"""The benchmark's calibration (DESIGN section 4), on 200 in-distribution seeds.

These are properties users rely on when they compare a student against the baselines: if a change
to the dynamics or graders moves them out of range, the published comparisons no longer hold.
"""

import numpy as np
import pytest

from rhythm_env.graders import get_grader


def non_belief(grader, episodes):
    _, parts = grader.grade_batch(episodes)
    return sum(w * parts[k] for k, w in grader.weights.items() if not k.startswith("belief")).mean()


@pytest.fixture(scope="module")
def v2():
    return get_grader("v2")


def test_v2_random_and_heuristic_ranges(rollouts, v2):
    assert 0.36 <= v2.grade_batch(rollouts("random"))[0].mean() <= 0.44
    assert 0.42 <= v2.grade_batch(rollouts("heuristic"))[0].mean() <= 0.50


def test_constant_belief_mae(rollouts):
    assert 0.18 <= rollouts("heuristic_const_belief").belief_mae().mean() <= 0.22


def test_oracle_beats_heuristic_on_non_belief_components(rollouts, v2):
    assert non_belief(v2, rollouts("oracle")) >= non_belief(v2, rollouts("heuristic")) + 0.08


def test_bayes_teacher_beats_heuristic_and_infers(rollouts, v2):
    bayes = rollouts("bayes")
    assert v2.grade_batch(bayes)[0].mean() >= v2.grade_batch(rollouts("heuristic"))[0].mean() + 0.12
    assert bayes.belief_mae().mean() <= 0.12


def test_v3_constant_belief_earns_nothing(rollouts):
    skill = get_grader("v3").grade_batch(rollouts("heuristic_const_belief"))[1]["belief_skill"]
    assert abs(skill.mean()) <= 0.03


@pytest.mark.parametrize("condition,first", [("ood", 10_000), ("discrete3", 20_000)])
def test_ordering_holds_in_every_condition(rollouts, condition, first):
    v3 = get_grader("v3")
    scores = {a: v3.grade_batch(rollouts(a, condition, first))[0].mean() for a in ("random", "heuristic", "bayes", "oracle")}
    assert scores["random"] < scores["heuristic"] < scores["bayes"] < scores["oracle"], scores
    assert np.isfinite(list(scores.values())).all()
