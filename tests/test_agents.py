import numpy as np
import pytest

from rhythm_core.agents import AGENTS, BayesAgent, get_agent
from rhythm_core.agents.rollout import rollout
from rhythm_core.env import RhythmEnv, VectorRhythmEnv
from rhythm_core.env.spec import ACTIONS, BELIEF_DIMS, FACTORS, STEPS_PER_EPISODE


def test_registry():
    assert set(AGENTS) == {"random", "heuristic", "heuristic_const_belief", "fallback", "bayes", "oracle"}
    with pytest.raises(ValueError, match="unknown agent 'gpt'"):
        get_agent("gpt")


@pytest.mark.parametrize("name", list(AGENTS))
def test_episode_is_a_function_of_its_seed(name):
    """An agent's episode is the same alone or batched with others, and on a re-run."""
    crowd = rollout(get_agent(name), "continuous", np.arange(1000, 1016))
    alone = rollout(get_agent(name), "continuous", [1005])
    assert np.array_equal(alone.actions[0], crowd.actions[5])
    assert np.array_equal(alone.meters[0], crowd.meters[5])
    assert np.array_equal(alone.beliefs[0], crowd.beliefs[5], equal_nan=True)


def test_beliefs_stated_only_by_belief_agents(rollouts):
    for name, cls in AGENTS.items():
        episodes = rollouts(name, count=20)
        assert episodes.has_belief.all() == cls.emits_belief
        if cls.emits_belief:
            assert np.nanmin(episodes.beliefs) >= 0.0 and np.nanmax(episodes.beliefs) <= 1.0


def test_random_agent_uses_every_action(rollouts):
    counts = np.bincount(rollouts("random", count=200).actions.ravel(), minlength=10)
    assert counts.min() > 0.08 * counts.sum()


def test_heuristic_sleeps_at_night(rollouts):
    actions = rollouts("heuristic", count=50).actions
    assert np.all(actions[:, 3::4] == 8)  # SLEEP


def test_oracle_states_the_true_belief(rollouts):
    episodes = rollouts("oracle", count=50)
    assert np.allclose(episodes.final_belief, episodes.true_belief)


def test_bayes_belief_sharpens_over_the_week(rollouts):
    episodes = rollouts("bayes", count=300)
    err = np.abs(episodes.beliefs - episodes.true_belief[:, None, :]).mean(axis=(0, 2))
    assert err[-1] < err[0] - 0.05  # learns from evidence
    assert err[-1] < 0.12


def test_bayes_reasoning_comes_from_its_inference():
    env = VectorRhythmEnv("discrete3")
    obs, _ = env.reset([20_001])  # introvert
    agent = BayesAgent(explain=True)
    agent.reset(env)
    texts = []
    for _ in range(STEPS_PER_EPISODE):
        decision = agent.act(obs)
        texts.append(decision.reasoning[0])
        obs, *_ = env.step(decision.actions)
    assert all(isinstance(t, str) and t for t in texts)
    # The text quotes the belief it states, to two decimals.
    last_belief = decision.beliefs[0]
    for dim, value in zip(BELIEF_DIMS, last_belief):
        assert f"{dim} {value:.2f}" in texts[-1]
    assert any("relative to a typical person" in t for t in texts[1:])
    assert any(f.replace("_", " ") in " ".join(texts) for f in FACTORS)


def test_scalar_env_with_batch_of_one_agent():
    """Agents drive the scalar env through its one-episode vector view."""
    env = RhythmEnv("continuous")
    env.reset(seed=42)
    agent = get_agent("heuristic")
    agent.reset(env.vector)
    total = 0.0
    obs = env.vector._observation()
    actions = []
    for _ in range(STEPS_PER_EPISODE):
        actions.append(int(agent.act(obs).actions[0]))
        _, reward, terminated, _, info = env.step(actions[-1])
        obs = env.vector._observation()
        total += reward
    assert terminated and "true_belief" in info and np.isfinite(total)
    # the same decisions as the heuristic playing seed 42 through the vector env
    assert actions == rollout(get_agent("heuristic"), "continuous", [42]).actions[0].tolist()


def test_fallback_agent_plays_what_an_always_invalid_answer_gets(rollouts):
    """Every step is an invalid answer replaced by protocol.fallback_action; no belief is stated."""
    from rhythm_core.protocol import fallback_action

    batch = rollouts("fallback", count=50)
    assert batch.invalid.all() and not batch.has_belief.any()
    env = RhythmEnv("continuous")
    obs, _ = env.reset(seed=7)
    played = rollout(get_agent("fallback"), "continuous", [7])
    for t in range(STEPS_PER_EPISODE):
        expected = fallback_action(obs)
        assert played.actions[0, t] == ACTIONS.index(expected)
        obs, *_ = env.step(expected)
