"""RhythmEnv as a Gymnasium env: registration, check_env, same numbers as the project API, vector API."""

import importlib
import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

import rhythm_env.sim
from rhythm_env.sim import ENV_ID, RhythmEnv, VectorRhythmEnv, rng
from rhythm_env.sim.conditions import CONDITIONS
from rhythm_env.sim.spec import ACTIONS, METERS, SLOTS, STEPS_PER_EPISODE, action_index

RANDOM = rng.stream_id("tests:gym-actions")


def random_actions(seeds, step):
    return (rng.uniform(RANDOM, seeds, step) * len(ACTIONS)).astype(np.int64)


def checker_warnings(fn, *args, **kwargs) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn(*args, **kwargs)
    return [str(w.message) for w in caught]


@pytest.mark.parametrize("condition", list(CONDITIONS))
def test_check_env_passes_through_make_and_direct(condition):
    # check_env resets with seeds 123 and 456, evaluation weeks that purpose="training" refuses.
    env = gymnasium.make(ENV_ID, condition=condition, purpose=None)
    assert isinstance(env.unwrapped, RhythmEnv) and env.unwrapped.condition == condition
    assert checker_warnings(check_env, env.unwrapped) == []
    # Through the wrappers make adds, the only warning is the checker's advice to pass env.unwrapped.
    assert [w for w in checker_warnings(check_env, env) if "different from the unwrapped" not in w] == []
    env.close()


def test_check_env_on_a_directly_constructed_env():
    env = RhythmEnv("continuous", render_mode="ansi", obs_type="dict")  # strict seeds: 123 and 456 are in range
    # Without a spec the checker cannot re-make the env to try other render modes; nothing else to say.
    assert [w for w in checker_warnings(check_env, env) if "not having a spec" not in w] == []


def test_spaces_and_metadata():
    env = gymnasium.make(ENV_ID, condition="ood")
    assert env.action_space == spaces.Discrete(10) and len(ACTIONS) == 10
    assert isinstance(env.observation_space, spaces.Dict)
    assert set(env.observation_space.spaces) == {"step", "day", "slot", "meters", "last_action", "last_delta", "anomaly"}
    assert env.observation_space["meters"].shape == (len(METERS),)
    assert env.metadata["render_modes"] == ["ansi"]


def test_make_ood_gives_the_existing_envs_numbers():
    seed = 10_007
    gym_env = gymnasium.make(ENV_ID, condition="ood", purpose="evaluation")
    plain = RhythmEnv("ood")
    obs, info = gym_env.reset(seed=seed)
    ref, ref_info = plain.reset(seed=seed)
    assert info == ref_info == {"seed": seed, "condition": "ood"}
    assert np.array_equal(obs["meters"], ref.meters) and obs["last_action"] == -1 and obs["step"] == 0
    for t in range(STEPS_PER_EPISODE):
        action = int(random_actions(np.array([seed]), t)[0])
        obs, reward, terminated, truncated, info = gym_env.step(action)
        ref, ref_reward, ref_terminated, ref_truncated, ref_info = plain.step(ACTIONS[action])
        assert obs in gym_env.observation_space
        assert obs["step"] == ref.step and obs["day"] == ref.day and SLOTS[obs["slot"]] == ref.slot
        assert ACTIONS[obs["last_action"]] == ref.last_action
        for name in ("meters", "last_delta", "anomaly"):
            assert np.array_equal(obs[name], getattr(ref, name)), (t, name)
        assert reward == ref_reward and (terminated, truncated) == (ref_terminated, ref_truncated)
    assert terminated and np.array_equal(info["true_belief"], ref_info["true_belief"])


def test_without_a_purpose_seeds_outside_the_range_draw_an_episode_seed_through_make_only():
    env = gymnasium.make(ENV_ID, condition="ood", purpose=None)
    _, first = env.reset(seed=123)
    _, again = env.reset(seed=123)
    assert first == again and CONDITIONS["ood"].contains(first["seed"])
    with pytest.raises(ValueError, match="outside the ood range"):
        RhythmEnv("ood").reset(seed=123)
    # No seed: drawn by the Gymnasium RNG; continuous draws training seeds, never evaluation seeds 0-999.
    cont = gymnasium.make(ENV_ID, purpose=None)
    cont.reset(seed=5)
    drawn = [cont.reset()[1]["seed"] for _ in range(200)]
    assert min(drawn) >= 1_000 and max(drawn) <= 9_999 and len(set(drawn)) > 150


def test_render_ansi_shows_day_slot_and_meters():
    env = gymnasium.make(ENV_ID, condition="ood", render_mode="ansi", purpose="evaluation")
    obs, _ = env.reset(seed=10_001)
    text = env.render()
    assert isinstance(text, str) and "ood seed 10001" in text and "day 1, morning" in text
    for name, value in zip(METERS, obs["meters"]):
        assert f"{name:<10} {value:.3f}" in text
    obs, *_ = env.step(action_index("DEEP_WORK"))
    text = env.render()
    assert "day 1, afternoon" in text and "last action DEEP_WORK" in text
    assert all(f"{name:<10} {value:.3f}" in text for name, value in zip(METERS, obs["meters"]))
    for _ in range(STEPS_PER_EPISODE - 1):
        env.step(0)
    assert "week is over" in env.render()
    quiet = RhythmEnv("continuous")
    quiet.reset(seed=1)
    with pytest.warns(UserWarning, match="without a render_mode"):
        assert quiet.render() is None


def test_discrete_actions_round_trip_with_names():
    space = gymnasium.make(ENV_ID).action_space
    for i, name in enumerate(ACTIONS):
        assert space.contains(i) and action_index(name) == i and ACTIONS[i] == name
        by_index, by_name = RhythmEnv("continuous", obs_type="dict"), RhythmEnv("continuous", obs_type="dict")
        by_index.reset(seed=1_234)
        by_name.reset(seed=1_234)
        a = by_index.step(i)
        b = by_name.step(name.lower())
        assert a[0]["last_action"] == b[0]["last_action"] == i
        assert np.array_equal(a[0]["meters"], b[0]["meters"]) and a[1] == b[1]
        obj = RhythmEnv("continuous")
        obj.reset(seed=1_234)
        assert obj.step(np.int64(i))[0].last_action == name
    assert not space.contains(len(ACTIONS))
    env = RhythmEnv("continuous")
    env.reset(seed=1)
    with pytest.raises(ValueError, match="unknown action index 10"):
        env.step(len(ACTIONS))


def test_snapshot_restore_through_make():
    env = gymnasium.make(ENV_ID, condition="discrete3", purpose="evaluation")
    env.reset(seed=20_004)
    env.step(action_index("SOCIALIZE"))
    snap = env.unwrapped.snapshot()
    after, *_ = env.step(0)
    restored = env.unwrapped.restore(snap)
    assert restored["step"] == 1 and restored["last_action"] == action_index("SOCIALIZE")
    again, *_ = env.step(0)
    assert np.array_equal(again["meters"], after["meters"])


def test_vector_api_matches_todays_vector_env():
    n, first = 16, 10_000
    vec = gymnasium.make_vec(ENV_ID, num_envs=n, vectorization_mode="vector_entry_point", condition="ood",
                             purpose="evaluation")
    assert isinstance(vec, VectorEnv) and isinstance(vec.unwrapped, VectorRhythmEnv)
    assert vec.num_envs == n and vec.metadata["autoreset_mode"] is AutoresetMode.DISABLED
    assert vec.single_action_space == spaces.Discrete(10) and vec.action_space == spaces.MultiDiscrete([10] * n)
    assert vec.single_observation_space == gymnasium.make(ENV_ID).observation_space
    assert vec.observation_space == batch_space(vec.single_observation_space, n)
    sync = gymnasium.make_vec(ENV_ID, num_envs=n, vectorization_mode="sync", condition="ood", purpose="evaluation")
    today = VectorRhythmEnv("ood")  # the project API: a sequence of seeds, BatchObservation back

    obs, info = vec.reset(seed=first)  # Gymnasium: seeds first, first + 1, ...
    sync_obs, _ = sync.reset(seed=first)
    ref, _ = today.reset(range(first, first + n))
    assert np.array_equal(info["seeds"], np.arange(first, first + n))
    assert obs in vec.observation_space and np.array_equal(obs["meters"], ref.meters)
    for t in range(STEPS_PER_EPISODE):
        actions = random_actions(np.arange(first, first + n), t)
        obs, reward, terminated, truncated, _ = vec.step(actions)
        sync_obs, sync_reward, sync_terminated, _, _ = sync.step(actions)
        ref, ref_reward, ref_terminated, ref_truncated, _ = today.step(actions)
        assert obs in vec.observation_space
        assert np.array_equal(obs["meters"], ref.meters) and np.array_equal(obs["anomaly"], ref.anomaly)
        assert np.array_equal(obs["last_action"], actions) and (obs["step"] == t + 1).all()
        assert np.array_equal(reward, ref_reward) and np.array_equal(terminated, ref_terminated)
        assert not truncated.any() and not ref_truncated.any()
        for name in obs:  # Gymnasium's own SyncVectorEnv of RhythmEnvs batches to the same numbers
            assert np.array_equal(sync_obs[name], obs[name]), (t, name)
        assert np.array_equal(sync_reward, reward) and np.array_equal(sync_terminated, terminated)
    assert terminated.all()
    assert np.array_equal(vec.unwrapped.meters_history, today.meters_history)
    with pytest.raises(RuntimeError, match="over"):
        vec.step(np.zeros(n, dtype=np.int64))
    with pytest.raises(ValueError, match="lockstep"):
        vec.reset(options={"reset_mask": np.arange(n) % 2 == 0})
    with pytest.raises(ValueError, match="an evaluation week needs its seed"):
        vec.reset(options={"reset_mask": np.ones(n, dtype=bool)})
    obs, info = vec.reset(seed=first, options={"reset_mask": np.ones(n, dtype=bool)})
    assert obs["step"].sum() == 0 and np.array_equal(info["seeds"], np.arange(first, first + n))
    vec.close()
    sync.close()


def test_vector_next_step_autoreset():
    vec = VectorRhythmEnv("continuous", num_envs=3, obs_type="dict", autoreset_mode=AutoresetMode.NEXT_STEP)
    assert vec.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
    assert VectorRhythmEnv.metadata["autoreset_mode"] is AutoresetMode.DISABLED  # per instance
    vec.reset(seed=5_000)
    for _ in range(STEPS_PER_EPISODE):
        _, _, terminated, _, _ = vec.step(np.zeros(3, dtype=np.int64))
    assert terminated.all()
    obs, reward, terminated, truncated, info = vec.step(np.zeros(3, dtype=np.int64))
    assert (obs["step"] == 0).all() and (obs["last_action"] == -1).all()
    assert not reward.any() and not terminated.any() and not truncated.any()
    assert all(1_000 <= s <= 9_999 for s in info["seeds"])  # drawn from training seeds
    with pytest.raises(ValueError, match="SAME_STEP"):
        VectorRhythmEnv("continuous", autoreset_mode=AutoresetMode.SAME_STEP)


def test_vector_seeds_reset_like_today():
    vec = VectorRhythmEnv("continuous")
    assert vec.num_envs is None
    with pytest.raises(ValueError, match="num_envs"):
        vec.reset()
    obs, info = vec.reset(range(100, 105))
    assert vec.num_envs == 5 and vec.action_space == spaces.MultiDiscrete([10] * 5) and len(obs) == 5
    obs, _ = vec.reset(np.array([7, 8]))  # num_envs follows the seeds, the batched spaces too
    assert vec.num_envs == 2 and vec.action_space == spaces.MultiDiscrete([10] * 2)
    with pytest.raises(ValueError, match="outside the continuous range"):
        vec.reset([12_000])
    lenient = VectorRhythmEnv("ood", obs_type="dict", strict_seeds=False)
    _, info = lenient.reset([123, 10_005])
    scalar = gymnasium.make(ENV_ID, condition="ood", purpose=None)
    assert info["seeds"][1] == 10_005 and info["seeds"][0] == scalar.reset(seed=123)[1]["seed"]


def test_registration_is_idempotent():
    spec = gymnasium.spec(ENV_ID)
    assert checker_warnings(importlib.reload, rhythm_env.sim.gym) == []
    assert checker_warnings(importlib.reload, rhythm_env.sim) == []
    assert gymnasium.spec(ENV_ID) == spec and spec.kwargs["obs_type"] == "dict"
