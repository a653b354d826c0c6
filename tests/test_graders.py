import dataclasses

import numpy as np
import pytest

from rhythm_env.graders import GRADERS, get_grader
from rhythm_env.sim.episode import EpisodeBatch
from rhythm_env.sim.profiles import prior_stats


def take(episodes: EpisodeBatch, index) -> EpisodeBatch:
    """The episodes at `index` (a slice), as a batch of their own."""
    arrays = ("seeds", "factors", "meters", "actions", "beliefs", "invalid")
    return dataclasses.replace(episodes, **{name: getattr(episodes, name)[index] for name in arrays})


def with_beliefs(episodes, belief):
    """A copy of the episodes whose agent states `belief` ((N, 3) or (3,)) at every step."""
    out = take(episodes, slice(None))
    out.beliefs = np.broadcast_to(np.asarray(belief, dtype=float)[..., None, :], out.beliefs.shape).copy()
    return out


def test_registry_and_versions():
    assert get_grader("v2").version == "v2" and get_grader("v3").version == "v3"
    with pytest.raises(ValueError, match="unknown grader 'v9'; allowed: v2, v3"):
        get_grader("v9")


@pytest.mark.parametrize("name", list(GRADERS))
def test_scores_in_unit_interval_and_single_matches_batch(name, rollouts):
    grader = get_grader(name)
    episodes = rollouts("random", count=100)
    scores, parts = grader.grade_batch(episodes)
    assert scores.min() >= 0.0 and scores.max() <= 1.0
    assert set(parts) == set(grader.weights)
    # the final score is the weighted sum of the components (weights summing to 1), rarely clipped
    assert sum(grader.weights.values()) == pytest.approx(1.0)
    weighted = sum(grader.weights[k] * parts[k] for k in grader.weights)
    assert np.allclose(scores, np.clip(weighted, 0.0, 1.0)) and np.mean((scores > 0) & (scores < 1)) > 0.9
    one = grader.grade(take(episodes, slice(3, 4)))
    assert one.final_score == pytest.approx(scores[3])
    assert one.components == pytest.approx({k: v[3] for k, v in parts.items()})
    with pytest.raises(ValueError, match="one episode"):
        grader.grade(episodes)


def test_v3_perfect_belief_scores_one_and_prior_mean_scores_zero(rollouts):
    grader = get_grader("v3")
    episodes = rollouts("heuristic", count=2000)
    perfect = grader.grade_batch(with_beliefs(episodes, episodes.true_belief))[1]["belief_skill"]
    assert np.allclose(perfect, 1.0)
    const = grader.grade_batch(with_beliefs(episodes, [0.5, 0.5, 0.5]))[1]["belief_skill"]
    assert abs(const.mean()) <= 0.03
    prior_mean, _ = prior_stats("continuous")
    prior = grader.grade_batch(with_beliefs(episodes, prior_mean))[1]["belief_skill"]
    assert abs(prior.mean()) <= 0.03
    # A belief worse than the prior earns negative skill; no belief earns exactly nothing.
    wrong = grader.grade_batch(with_beliefs(episodes, 1.0 - episodes.true_belief))[1]["belief_skill"]
    assert wrong.mean() < -0.5
    assert np.all(grader.grade_batch(episodes)[1]["belief_skill"] == 0.0)


def test_v2_belief_component(rollouts):
    grader = get_grader("v2")
    episodes = rollouts("heuristic", count=500)
    assert np.all(grader.grade_batch(episodes)[1]["belief_accuracy"] == 0.0)  # no belief stated
    acc = grader.grade_batch(with_beliefs(episodes, [0.5, 0.5, 0.5]))[1]["belief_accuracy"]
    assert 0.78 <= acc.mean() <= 0.82  # constant-belief MAE 0.18-0.22
    assert np.allclose(grader.grade_batch(with_beliefs(episodes, episodes.true_belief))[1]["belief_accuracy"], 1.0)


def test_v3_wellbeing_depends_on_the_persons_preferences(rollouts):
    """Same meters, different person: v3's wellbeing changes, v2's does not."""
    episodes = rollouts("heuristic", count=50)
    social = take(episodes, slice(None))
    social.factors = episodes.factors.copy()
    social.factors[:, 1] = 1.0  # values connection highly
    loner = take(episodes, slice(None))
    loner.factors = episodes.factors.copy()
    loner.factors[:, 1] = 0.0
    v3 = get_grader("v3")
    a = v3.grade_batch(social)[1]["preference_wellbeing"]
    b = v3.grade_batch(loner)[1]["preference_wellbeing"]
    assert not np.allclose(a, b)
    v2 = get_grader("v2")
    assert np.array_equal(v2.grade_batch(social)[1]["wellbeing"], v2.grade_batch(loner)[1]["wellbeing"])


@pytest.mark.parametrize("name", list(GRADERS))
@pytest.mark.parametrize("agent", ["random", "heuristic", "bayes"])
def test_score_to_go_sums_to_the_grade_of_the_acting_components(name, agent, rollouts):
    """The per-step score planners maximise is the grader's own: over a finished week it adds up to
    the weighted non-belief components, for every person (their preferences included)."""
    grader = get_grader(name)
    episodes = rollouts(agent, count=200)
    _, parts = grader.grade_batch(episodes)
    acting = sum(w * parts[k] for k, w in grader.weights.items() if not k.startswith("belief"))
    score = grader.score_to_go(episodes.factors)
    m = episodes.meters
    total = score.start(m[:, 0]) + sum(score.step(m[:, t - 1], m[:, t]) for t in range(1, m.shape[1]))
    assert np.allclose(total, acting, rtol=0, atol=1e-12)
    # rows of `take` are the people they name; a crash costs beyond the level it drops to
    first = score.take(np.arange(5))
    assert np.array_equal(score.take([3, 3]).level, score.level[[3, 3]])
    crashed, above = m[:5, 1].copy(), m[:5, 1].copy()
    crashed[:, 0], above[:, 0] = 0.0999, 0.1
    assert np.allclose(first.state(above) - first.state(crashed), first.level[:, 0] * 1e-4 + first.crash)
