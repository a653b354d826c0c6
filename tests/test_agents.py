import numpy as np
import pytest

from rhythm_core.agents import AGENTS, Agent, BayesAgent, Decision, SearchAgent, get_agent, heuristic_actions
from rhythm_core.agents.montecarlo import monte_carlo_values, noise_paths
from rhythm_core.agents.rollout import play_lockstep, rollout
from rhythm_env.graders import get_grader
from rhythm_env.sim import RhythmEnv, VectorRhythmEnv
from rhythm_env.sim.spec import ACTIONS, BELIEF_DIMS, FACTORS, STEPS_PER_EPISODE


def test_registry():
    assert set(AGENTS) == {"random", "heuristic", "heuristic_const_belief", "fallback", "bayes", "bayes_v3", "search",
                           "oracle"}
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
    from rhythm_env.protocol import fallback_action

    batch = rollouts("fallback", count=50)
    assert batch.invalid.all() and not batch.has_belief.any()
    env = RhythmEnv("continuous")
    obs, _ = env.reset(seed=7)
    played = rollout(get_agent("fallback"), "continuous", [7])
    for t in range(STEPS_PER_EPISODE):
        expected = fallback_action(obs)
        assert played.actions[0, t] == ACTIONS.index(expected)
        obs, *_ = env.step(expected)


def paired_gain(better, worse, condition, seeds, grader="v3"):
    """Mean and standard error of the per-week score difference of two agents on the same seeds."""
    g = get_grader(grader)
    d = g.grade_batch(rollout(better, condition, seeds))[0] - g.grade_batch(rollout(worse, condition, seeds))[0]
    return d.mean(), d.std(ddof=1) / np.sqrt(len(d))


def test_the_bayesian_teacher_planning_for_the_grade_it_is_judged_by_plays_better():
    """bayes_v3 scores the planner's paths with v3's own score-to-go and beats bayes (its own utility,
    the teacher the recipe distils) under v3."""
    gain, se = paired_gain(get_agent("bayes_v3"), BayesAgent(), "continuous", np.arange(1000, 1400))
    assert gain > 3 * se, (gain, se)


def test_the_oracle_asked_to_plan_for_v3_is_a_higher_v3_ceiling():
    gain, se = paired_gain(get_agent("oracle", grader="v3"), get_agent("oracle"), "continuous", np.arange(1000, 1200))
    assert gain > 3 * se, (gain, se)


def test_search_plays_deterministically_from_a_private_noise_stream():
    seeds = np.arange(1000, 1012)
    env = VectorRhythmEnv("continuous")
    env.reset(seeds)
    rng_state = env.np_random.bit_generator.state
    first = [step.decision.actions for step in play_lockstep(SearchAgent(), env, seeds)]
    assert env.np_random.bit_generator.state == rng_state  # the env's own randomness is never drawn
    again = rollout(SearchAgent(), "continuous", seeds).actions
    assert np.array_equal(np.stack(first, axis=1), again)
    other = rollout(SearchAgent(noise_seed=1), "continuous", seeds).actions
    assert not np.array_equal(again, other)  # another noise stream, other simulated luck
    assert not np.array_equal(noise_paths(seeds, 3, noise_seed=0), noise_paths(seeds, 3, noise_seed=1))
    assert noise_paths(seeds, 3).shape == (12, 16, STEPS_PER_EPISODE - 3, 5)


def test_search_beats_the_bayesian_teacher():
    """Deterministic play on fixed training seeds: the Monte-Carlo values win by over two standard errors."""
    gain, se = paired_gain(SearchAgent(), BayesAgent(), "continuous", np.arange(1000, 1256))
    assert gain > 2 * se, (gain, se)


def test_monte_carlo_values_along_the_envs_own_noise_are_the_grade_of_the_week_played():
    """Given the true profile and the env's own noise, the rollout of action a then the heuristic is the
    week the env plays, and its value is what the grader gives that week (belief aside)."""
    from rhythm_env.sim.rhythm_env import _noise_table

    seeds = np.arange(1000, 1008)
    env = VectorRhythmEnv("continuous")
    obs, _ = env.reset(seeds)
    grader = get_grader("v3")
    score = grader.score_to_go(env.factors)
    noise = _noise_table(seeds)[:, None]  # (N, 1 path, 28, 5)
    values = monte_carlo_values(env.profile_tensor, obs.meters, 0, env.factors, score, noise)
    for a in (0, 4, 7):
        week = rollout(_FirstThenHeuristic(a), "continuous", seeds)
        _, parts = grader.grade_batch(week)
        acting = sum(w * parts[k] for k, w in grader.weights.items() if not k.startswith("belief"))
        assert np.allclose(values[:, a] + score.start(week.meters[:, 0]), acting, rtol=0, atol=1e-12)


class _FirstThenHeuristic(Agent):
    """Takes one fixed action at step 0, then the heuristic."""

    def __init__(self, first):
        self.first = first

    def act(self, obs):
        return Decision(heuristic_actions(obs.meters, obs.slot) if obs.step else np.full(len(obs), self.first))


def test_search_explains_what_it_inferred_and_the_values_it_chose_by():
    env = VectorRhythmEnv("discrete3")
    obs, _ = env.reset([20_001])
    agent = SearchAgent(explain=True)
    agent.reset(env)
    for _ in range(6):
        decision = agent.act(obs)
        obs, *_ = env.step(decision.actions)
    text, action = decision.reasoning[0], ACTIONS[decision.actions[0]]
    for dim, value in zip(BELIEF_DIMS, decision.beliefs[0]):
        assert f"{dim} {value:.2f}" in text
    assert "relative to a typical person" in text and "Simulating the rest of the week 16 times" in text
    assert f"{action} " in text.split("score still to earn is")[1]  # the chosen action's value is quoted
