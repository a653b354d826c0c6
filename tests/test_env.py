import json

import numpy as np
import pytest

from rhythm_env.sim import EnvState, RhythmEnv, VectorRhythmEnv, rng
from rhythm_env.sim.conditions import CONDITIONS, EVAL_SEEDS, TRAINING_SEEDS, check_seed, parse_seeds
from rhythm_env.sim.profiles import sample_factors
from rhythm_env.sim.spec import ACTIONS, FACTORS, METERS, STEPS_PER_EPISODE, true_belief

RANDOM = rng.stream_id("tests:actions")


def random_actions(seeds, step):
    return (rng.uniform(RANDOM, seeds, step) * len(ACTIONS)).astype(np.int64)


def play_vector(condition, seeds, actions_fn=random_actions):
    env = VectorRhythmEnv(condition)
    obs, _ = env.reset(seeds)
    anomalies, rewards = [], []
    for t in range(STEPS_PER_EPISODE):
        obs, reward, terminated, truncated, _ = env.step(actions_fn(np.asarray(seeds), t))
        anomalies.append(obs.anomaly.copy())
        rewards.append(reward)
    assert terminated.all() and not truncated.any()
    return env, np.stack(anomalies, 1), np.stack(rewards, 1)


def test_same_seed_same_trajectory():
    a, anom_a, rew_a = play_vector("continuous", np.arange(50))
    b, anom_b, rew_b = play_vector("continuous", np.arange(50))
    assert np.array_equal(a.meters_history, b.meters_history)
    assert np.array_equal(anom_a, anom_b) and np.array_equal(rew_a, rew_b)
    c, *_ = play_vector("continuous", np.arange(50, 100))
    assert not np.array_equal(a.meters_history, c.meters_history)


def test_episode_does_not_depend_on_batch_companions():
    alone, *_ = play_vector("ood", np.array([10_007]))
    crowd, *_ = play_vector("ood", np.arange(10_000, 13_000))
    assert np.array_equal(alone.meters_history[0], crowd.meters_history[7])


@pytest.mark.parametrize("condition", list(CONDITIONS))
def test_meters_stay_in_unit_interval(condition):
    first = CONDITIONS[condition].first_seed
    env, *_ = play_vector(condition, np.arange(first, first + 300))
    assert env.meters_history.min() >= 0.0 and env.meters_history.max() <= 1.0


@pytest.mark.parametrize("condition", list(CONDITIONS))
def test_scalar_env_equals_vector_env(condition):
    first = CONDITIONS[condition].first_seed
    seeds = np.arange(first, first + 8)
    vec, anomalies, rewards = play_vector(condition, seeds)
    for n, seed in enumerate(seeds):
        env = RhythmEnv(condition)
        obs, info = env.reset(seed=int(seed))
        assert info["seed"] == seed and obs.last_action is None and obs.day == 1 and obs.slot == "morning"
        assert np.array_equal(obs.meters, vec.meters_history[n, 0])
        for t in range(STEPS_PER_EPISODE):
            action = ACTIONS[random_actions(np.array([seed]), t)[0]]  # scalar env takes names
            obs, reward, terminated, truncated, info = env.step(action)
            assert np.array_equal(obs.meters, vec.meters_history[n, t + 1])
            assert np.array_equal(obs.anomaly, anomalies[n, t])
            assert reward == rewards[n, t]
            assert obs.last_action == action
            assert terminated == (t == STEPS_PER_EPISODE - 1) and not truncated
        assert np.array_equal(info["true_belief"], true_belief(vec.factors[n]))


def test_snapshot_restore_round_trip():
    seeds = np.arange(100, 110)
    env = VectorRhythmEnv("continuous")
    env.reset(seeds)
    for t in range(9):
        env.step(random_actions(seeds, t))
    state = env.snapshot()
    for t in range(9, STEPS_PER_EPISODE):
        env.step(random_actions(seeds, t))
    expected = env.meters_history.copy()

    # Restore in place, and in fresh envs from the serialized dict and from the JSON a dataset column holds.
    for target, snap in ((env, state), (VectorRhythmEnv("continuous"), EnvState.from_dict(state.to_dict())),
                         (VectorRhythmEnv("continuous"), EnvState.from_json(state.to_json()))):
        obs = target.restore(snap)
        assert obs.step == 9 and np.array_equal(obs.meters, state.meters)
        for t in range(9, STEPS_PER_EPISODE):
            target.step(random_actions(seeds, t))
        assert np.array_equal(target.meters_history, expected)


def test_env_state_json_reads_back_every_float_exactly_and_refuses_nan():
    env = VectorRhythmEnv("continuous")
    env.reset(np.arange(100, 104))
    for t in range(5):
        env.step(random_actions(np.arange(100, 104), t))
    state = env.snapshot()
    state.meters[0, 0] = 1e-05  # a number the json module writes as 1e-05
    episode = state.episode(0)
    assert EnvState.from_json(episode.to_json()).to_dict() == episode.to_dict()  # every float exactly
    assert json.loads(state.to_json()) == state.to_dict()  # readable by any JSON parser, keys sorted
    assert list(json.loads(state.to_json())) == sorted(state.to_dict())
    state.anomaly[1, 2] = np.nan
    with pytest.raises(ValueError, match="anomaly holds NaN"):
        state.to_json()


def test_scalar_snapshot_restore():
    env = RhythmEnv("discrete3")
    env.reset(seed=20_004)
    env.step("SOCIALIZE")
    snap = env.snapshot()
    after_a = env.step("DEEP_WORK")[0]
    restored = env.restore(snap)
    assert restored.step == 1 and restored.last_action == "SOCIALIZE"
    assert np.array_equal(env.step("DEEP_WORK")[0].meters, after_a.meters)
    with pytest.raises(ValueError, match="condition"):
        VectorRhythmEnv("ood").restore(snap)


def test_neutral_profile_anomalies_average_zero():
    seeds = np.arange(0, 2000)
    neutral = np.full(len(FACTORS), 0.5)
    env = VectorRhythmEnv("continuous")
    env.reset(seeds, options={"factors": neutral})
    anomalies = []
    for t in range(STEPS_PER_EPISODE):
        obs, *_ = env.step(random_actions(seeds, t))
        anomalies.append(obs.anomaly.copy())
    mean = np.stack(anomalies).mean(axis=(0, 1))
    assert np.all(np.abs(mean) < 0.004), mean
    # ... while a real profile's anomalies carry signal: the introvert is drained by SOCIALIZE.
    intro = VectorRhythmEnv("discrete3")
    intro.reset(np.arange(20_001, 20_301, 3))  # seed % 3 == 0: introvert
    obs, *_ = intro.step(np.full(100, ACTIONS.index("SOCIALIZE")))
    assert obs.anomaly[:, METERS.index("vitality")].mean() < -0.05


def test_condition_seed_ranges_do_not_overlap():
    ranges = sorted((c.first_seed, c.last_seed) for c in CONDITIONS.values())
    for (_, hi), (lo, _) in zip(ranges, ranges[1:]):
        assert hi < lo
    train = set(TRAINING_SEEDS["continuous"])
    for name, seeds in EVAL_SEEDS.items():
        assert not train & set(seeds), name
        assert all(CONDITIONS[name].contains(s) for s in (seeds.start, seeds.stop - 1))


def test_conditions_draw_different_profiles():
    cont = sample_factors("continuous", np.arange(0, 5000))
    ood = sample_factors("ood", np.arange(10_000, 15_000))
    # OOD is more extreme (more mass near 0 and 1) and less correlated.
    assert (np.abs(ood - 0.5) > 0.4).mean() > 2 * (np.abs(cont - 0.5) > 0.4).mean()
    assert np.corrcoef(ood[:, 0], ood[:, 1])[0, 1] < np.corrcoef(cont[:, 0], cont[:, 1])[0, 1] - 0.2
    assert len({tuple(row) for row in sample_factors("discrete3", np.arange(20_000, 20_030))}) == 3


def test_bad_seed_and_bad_action_errors_name_the_value():
    env = RhythmEnv("continuous")
    with pytest.raises(ValueError, match=r"seed 12000 is outside the continuous range 0-9999"):
        env.reset(seed=12_000)
    with pytest.raises(ValueError, match="ood 10000-19999"):
        check_seed("continuous", -1)
    env.reset(seed=1)
    with pytest.raises(ValueError, match=r"unknown action 'DANCE'; allowed actions: DEEP_WORK, .*LEISURE"):
        env.step("DANCE")
    with pytest.raises(ValueError, match="unknown action index 10"):
        env.step(10)
    with pytest.raises(ValueError, match="unknown condition 'mars'"):
        RhythmEnv("mars")
    assert env.step("deep_work")[0].last_action == "DEEP_WORK"


def test_stepping_past_the_end_is_an_error():
    env = RhythmEnv("continuous")
    env.reset(seed=5)
    for _ in range(STEPS_PER_EPISODE):
        env.step("SLEEP")
    with pytest.raises(RuntimeError, match="over"):
        env.step("SLEEP")


def test_parse_seeds():
    assert parse_seeds("0-3") == [0, 1, 2, 3]
    assert parse_seeds("7, 1,2-3") == [1, 2, 3, 7]
    for bad in ("3-1", "a-b", "", "1-"):
        with pytest.raises(ValueError):
            parse_seeds(bad)


def test_observation_dict_hides_the_profile():
    env = RhythmEnv("continuous")
    obs, _ = env.reset(seed=2)
    obs, *_ = env.step("EXERCISE")
    data = obs.to_dict()
    assert set(data) == {"step", "day", "slot", "meters", "last_action", "last_delta", "anomaly"}
    assert data["slot"] == "afternoon" and data["last_action"] == "EXERCISE"
    assert set(data["meters"]) == set(METERS)


def test_cpu_kernels_are_pinned_to_avx2_unless_the_user_says_otherwise(monkeypatch):
    """Artifacts are the same on every x86-64 CPU: rhythm pins torch's kernels to AVX2 where the CPU
    has it; RHYTHM_CPU_KERNELS=native and a user's own ATEN_CPU_CAPABILITY are kept."""
    import platform

    import torch

    from rhythm_core import kernels

    x86_avx2 = platform.machine().lower() in ("x86_64", "amd64") and "avx2" in kernels._cpu_flags()
    if x86_avx2:
        assert torch.backends.cpu.get_cpu_capability() == "AVX2"  # this process imported rhythm_core
    env = {}
    decided = kernels.pin_cpu_kernels(env)
    assert (env == {"ATEN_CPU_CAPABILITY": "avx2"}) == x86_avx2 and decided
    env = {"RHYTHM_CPU_KERNELS": "native"}
    assert kernels.pin_cpu_kernels(env).startswith("native") and "ATEN_CPU_CAPABILITY" not in env
    env = {"ATEN_CPU_CAPABILITY": "avx512"}
    assert "set by the user" in kernels.pin_cpu_kernels(env) and env == {"ATEN_CPU_CAPABILITY": "avx512"}
    with pytest.raises(ValueError, match="RHYTHM_CPU_KERNELS='fast': expected avx2 or native"):
        kernels.pin_cpu_kernels({"RHYTHM_CPU_KERNELS": "fast"})
