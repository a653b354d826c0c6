"""RhythmEnv: one simulated week of a person's life, as a Gymnasium env and a Gymnasium vector env.

`VectorRhythmEnv` (a `gymnasium.vector.VectorEnv`) steps N episodes in lockstep (one numpy kernel per
step); `RhythmEnv` (a `gymnasium.Env`) is the single-episode view on the same kernel, so both give
bitwise identical results for the same (condition, seed). Everything random is drawn at reset from
counter-based streams keyed by the seed, so an episode is a pure function of (condition, seed, actions).

Two observation forms, picked by `obs_type`: "object" (the default when constructed directly) returns
today's `Observation` / `BatchObservation` with action names and None before the first step; "dict"
(the default through `gymnasium.make("rhythm/RhythmEnv-v0")`, see `rhythm_env.sim.gym`) returns a
dict of numbers that lies in `observation_space`: the same fields, with the last action as an index
(-1 before the first step) and zero deltas before the first step, as `BatchObservation` stores them.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from . import rng
from .conditions import check_seed, get_condition
from .dynamics import INITIAL_JITTER, INITIAL_METERS, NOISE_SD, expected_delta, neutral_delta, profile_tensor
from .observation import BatchObservation, EnvState, Observation, render_ansi
from .profiles import sample_factors
from .seed_rules import check_purpose, draw_training_seeds, week_seed, week_seeds
from .spec import ACTIONS, CRASH_THRESHOLD, DAYS, FACTORS, METERS, SLOTS, STEPS_PER_EPISODE, action_index, true_belief

_NOISE_STREAM = rng.stream_id("noise")
_INIT_STREAM = rng.stream_id("initial-meters")
_N_METERS = len(METERS)
OBS_TYPES = ("object", "dict")


def _action_space() -> spaces.Discrete:
    """Discrete(10), index i is spec.ACTIONS[i]."""
    return spaces.Discrete(len(ACTIONS))


def _observation_space() -> spaces.Dict:
    """One episode's observation with obs_type="dict": `Observation.to_dict()`'s fields as numbers."""
    return spaces.Dict({
        "step": spaces.Discrete(STEPS_PER_EPISODE + 1),  # steps already taken, 0..28
        "day": spaces.Discrete(DAYS, start=1),  # 1..7
        "slot": spaces.Discrete(len(SLOTS)),  # index into spec.SLOTS
        "meters": spaces.Box(0.0, 1.0, (_N_METERS,), np.float64),  # order of spec.METERS
        "last_action": spaces.Discrete(len(ACTIONS) + 1, start=-1),  # index into spec.ACTIONS, -1 before the first step
        "last_delta": spaces.Box(-1.0, 1.0, (_N_METERS,), np.float64),  # zeros before the first step
        "anomaly": spaces.Box(-1.0, 1.0, (_N_METERS,), np.float64),  # zeros before the first step
    })


def _check_obs_type(obs_type: str) -> str:
    if obs_type not in OBS_TYPES:
        raise ValueError(f"unknown obs_type {obs_type!r}; allowed: {', '.join(OBS_TYPES)}")
    return obs_type


def _check_options(options: dict | None, allowed: tuple[str, ...]) -> dict:
    """`options`, or ValueError naming a key reset does not read (a misspelt key would be ignored)."""
    unknown = sorted(set(options or {}) - set(allowed))
    if unknown:
        raise ValueError(f"unknown reset option(s) {', '.join(map(str, unknown))}; allowed: {', '.join(allowed)}")
    return options or {}


def _action(action, *, by_name: bool) -> int:
    """The action's index: an integer (a bool, a float or an array of them is refused), or where
    `by_name` (the project's own API) an action name of spec.ACTIONS."""
    if by_name and isinstance(action, str):
        return action_index(action)
    if isinstance(action, np.ndarray) and action.shape == () and action.dtype.kind in "iu":
        return int(action)
    if isinstance(action, bool) or not isinstance(action, (int, np.integer)):
        raise ValueError(f"action must be an integer index 0-{len(ACTIONS) - 1} (action_space Discrete("
                         f"{len(ACTIONS)})), got {action!r}")
    return int(action)


def _as_int_seed(seed) -> int:
    if isinstance(seed, bool) or int(seed) != seed:
        raise ValueError(f"seed {seed!r} is not an integer")
    return int(seed)


def _noise_table(seeds: np.ndarray) -> np.ndarray:
    counters = np.arange(STEPS_PER_EPISODE * _N_METERS).reshape(STEPS_PER_EPISODE, _N_METERS)
    return NOISE_SD * rng.normal(_NOISE_STREAM, seeds[:, None, None], counters[None])


def _initial_meters(seeds: np.ndarray) -> np.ndarray:
    u = rng.uniform(_INIT_STREAM, seeds[:, None], np.arange(_N_METERS)[None])
    return INITIAL_METERS + INITIAL_JITTER * (2.0 * u - 1.0)


def step_reward(meters: np.ndarray, progress_gain: np.ndarray) -> np.ndarray:
    """Dense shaped reward for RL: mean wellbeing meter + progress made - 0.25 per crashed meter.

    Scores are the graders' business (rhythm_env.graders); this is only a per-step learning signal.
    """
    wellbeing = 0.25 * (meters[:, 0] + meters[:, 1] + meters[:, 3] + meters[:, 4])
    crashes = np.count_nonzero(meters < CRASH_THRESHOLD, axis=1)
    return wellbeing + 2.0 * progress_gain - 0.25 * crashes




class VectorRhythmEnv(VectorEnv):
    """N RhythmEnv episodes stepped together in numpy, as a `gymnasium.vector.VectorEnv`.

    All episodes share the step counter, so they all end together after 28 steps. Construct with
    `num_envs=N` for Gymnasium's fixed-size API (`reset(seed=int)` seeds episodes seed, seed+1, ...,
    `reset()` draws N seeds from the env's Gymnasium RNG), or leave it out and pass the episode seeds:
    `reset(seeds)` with a sequence starts one episode per seed, and N follows the seeds (the batched
    spaces too). Autoreset (metadata["autoreset_mode"]): DISABLED by default, as before (stepping past
    the end is an error; reset, or reset(options={"reset_mask": all-true})); NEXT_STEP on request: the
    step after the end starts N new episodes with seeds drawn from the Gymnasium RNG, ignoring the
    actions, with zero rewards and no terminations.
    """

    metadata = {"autoreset_mode": AutoresetMode.DISABLED, "render_modes": []}

    def __init__(self, condition: str = "continuous", num_envs: int | None = None, *, obs_type: str = "object",
                 strict_seeds: bool = True, autoreset_mode: str | AutoresetMode = AutoresetMode.DISABLED,
                 purpose: str | None = None):
        get_condition(condition)
        self.condition = condition
        # A purpose ("training", "evaluation") applies the front ends' seeds rules (seed_rules) to every reset.
        self.purpose = None if purpose is None else check_purpose(purpose)
        self.obs_type = _check_obs_type(obs_type)
        # strict_seeds=False: a seed outside the condition's range seeds a Gymnasium RNG that draws the
        # episode seed (as RhythmEnv does); True: such a seed is an error naming the range.
        self.strict_seeds = bool(strict_seeds)
        mode = AutoresetMode(autoreset_mode)
        if mode is AutoresetMode.SAME_STEP:
            raise ValueError("VectorRhythmEnv supports autoreset_mode DISABLED or NEXT_STEP, not SAME_STEP")
        self.metadata = {**type(self).metadata, "autoreset_mode": mode}
        if num_envs is not None and int(num_envs) < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self._num_envs = None if num_envs is None else int(num_envs)
        self._seeds = None
        self.single_action_space = _action_space()
        self.single_observation_space = _observation_space()
        self._batched_spaces: dict[str, tuple[int, spaces.Space]] = {}

    # ---- Gymnasium spaces --------------------------------------------------------------------
    @property
    def num_envs(self) -> int | None:
        """Episodes per batch: the constructor's num_envs or the last reset's seeds (None before both)."""
        return self._num_envs

    def _batched(self, kind: str, single: spaces.Space) -> spaces.Space:
        n = self._num_envs
        if n is None:
            raise RuntimeError("the batched spaces need num_envs: VectorRhythmEnv(condition, num_envs=N) or reset(seeds)")
        cached = self._batched_spaces.get(kind)
        if cached is None or cached[0] != n:
            cached = self._batched_spaces[kind] = (n, batch_space(single, n))
        return cached[1]

    @property
    def action_space(self) -> spaces.MultiDiscrete:
        return self._batched("action", self.single_action_space)

    @property
    def observation_space(self) -> spaces.Dict:
        return self._batched("observation", self.single_observation_space)

    # ---- lifecycle -------------------------------------------------------------------------
    def reset(self, seed=None, options: dict | None = None) -> tuple[BatchObservation | dict, dict]:
        """Start one episode per seed.

        `seed`: a sequence of episode seeds (one episode each); an int (episodes seed, seed+1, ...,
        num_envs of them, and it seeds the Gymnasium RNG); or None (num_envs seeds drawn from that RNG,
        from the condition's training seeds where it has some). `options={"factors": (N, 9) array}`
        replaces the hidden profiles (counterfactual studies and tests: e.g. the neutral profile, all
        0.5); `options={"reset_mask": ...}` must select every episode (they run in lockstep)."""
        options = _check_options(options, ("factors", "reset_mask"))
        mask = options.get("reset_mask")
        if mask is not None and not np.all(mask):
            raise ValueError("VectorRhythmEnv runs its episodes in lockstep (all end at step "
                             f"{STEPS_PER_EPISODE}); reset_mask must select every episode")
        seeds = self._episode_seeds(seed)
        batch, info = self._start(seeds, options.get("factors"))
        return self._obs(batch), info

    def _episode_seeds(self, seed) -> np.ndarray:
        if self.purpose is not None:
            return self._purpose_seeds(seed)
        if seed is None:
            if self._num_envs is None:
                raise ValueError("reset() without seeds needs num_envs: VectorRhythmEnv(condition, num_envs=N), "
                                 "or pass the episode seeds")
            return draw_training_seeds(self.np_random, self.condition, self._num_envs)
        if np.ndim(seed) == 0:  # Gymnasium: an int seed means seed, seed + 1, ... and seeds the env's RNG
            first = _as_int_seed(seed)
            seeds = first + np.arange(self._num_envs or 1, dtype=np.int64)
        else:
            first = None
            seeds = np.atleast_1d(np.asarray(seed, dtype=np.int64))
        cond = get_condition(self.condition)
        if self.strict_seeds:
            self._check_seeds(seeds)
        else:
            outside = np.flatnonzero((seeds < cond.first_seed) | (seeds > cond.last_seed))
            if len(outside):
                seeds = seeds.copy()
                for i in outside:  # the first draw of a Gymnasium RNG seeded with it, as RhythmEnv.reset does
                    seeds[i] = draw_training_seeds(seeding.np_random(int(seeds[i]))[0], self.condition)
        if first is not None:
            self._np_random, self._np_random_seed = seeding.np_random(first)
        return seeds

    def _purpose_seeds(self, seed) -> np.ndarray:
        """The seeds rules of `purpose`: every given seed names a week it allows; none draws training weeks."""
        if seed is None:
            if self._num_envs is None:
                raise ValueError("reset() without seeds needs num_envs: VectorRhythmEnv(condition, num_envs=N)")
            week_seed(self.condition, None, self.purpose, self.np_random)  # refuses what the purpose cannot draw
            return draw_training_seeds(self.np_random, self.condition, self._num_envs)
        if np.ndim(seed) == 0:
            first = week_seeds(self.condition, [seed], self.purpose)[0]
            seeds = np.array(week_seeds(self.condition, first + np.arange(self._num_envs or 1), self.purpose))
            self._np_random, self._np_random_seed = seeding.np_random(first)
            return seeds
        return np.array(week_seeds(self.condition, np.ravel(seed), self.purpose), dtype=np.int64)

    def _check_seeds(self, seeds: np.ndarray) -> None:
        for s in np.unique(seeds):
            check_seed(self.condition, int(s))

    def _start(self, seeds: np.ndarray, factors=None) -> tuple[BatchObservation, dict]:
        self._seeds = seeds
        self._num_envs = len(seeds)
        if factors is None:
            self.factors = sample_factors(self.condition, seeds)
        else:
            self.factors = np.broadcast_to(np.asarray(factors, dtype=np.float64), (len(seeds), len(FACTORS))).copy()
            if not ((self.factors >= 0.0) & (self.factors <= 1.0)).all():
                raise ValueError("options['factors'] must lie in [0, 1]")
        self._tensor = profile_tensor(self.factors)  # (N, actions, slots, meters, 1 + meters)
        self._noise = _noise_table(seeds)
        n = len(seeds)
        self._rows = np.arange(n)
        self.t = 0
        self.meters = _initial_meters(seeds)
        self.last_action = np.full(n, -1, dtype=np.int64)
        self.last_delta = np.zeros((n, _N_METERS))
        self.anomaly = np.zeros((n, _N_METERS))
        self.meters_history = np.empty((n, STEPS_PER_EPISODE + 1, _N_METERS))
        self.meters_history[:, 0] = self.meters
        self.action_history = np.empty((n, STEPS_PER_EPISODE), dtype=np.int64)
        return self._observation(), {"seeds": seeds.copy(), "condition": self.condition}

    def step(self, actions) -> tuple[BatchObservation | dict, np.ndarray, np.ndarray, np.ndarray, dict]:
        if self._seeds is None:
            raise RuntimeError("call reset(seeds) before step()")
        if self.t >= STEPS_PER_EPISODE:
            if self.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP:
                obs, info = self.reset()
                n = len(self._seeds)
                return obs, np.zeros(n), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool), info
            raise RuntimeError(f"the episodes are over ({STEPS_PER_EPISODE} steps); call reset()")
        actions = np.asarray(actions)
        if actions.dtype.kind not in "iu":
            raise ValueError(f"actions must be integer indices 0-{len(ACTIONS) - 1}, got dtype {actions.dtype}")
        actions = actions.astype(np.int64, copy=False)
        if actions.shape != self._seeds.shape:
            raise ValueError(f"expected {len(self._seeds)} actions, got shape {actions.shape}")
        if actions.min(initial=0) < 0 or actions.max(initial=0) >= len(ACTIONS):
            bad = int(actions[(actions < 0) | (actions >= len(ACTIONS))][0])
            raise ValueError(f"unknown action index {bad}; allowed 0-{len(ACTIONS) - 1}: {', '.join(ACTIONS)}")
        slot = self.t % len(SLOTS)
        before = self.meters
        after = np.clip(before + expected_delta(self._tensor[self._rows, actions, slot], before) + self._noise[:, self.t], 0.0, 1.0)
        neutral_after = np.clip(before + neutral_delta(actions, slot, before), 0.0, 1.0)
        self.last_delta = after - before
        self.anomaly = after - neutral_after
        self.meters = after
        self.last_action = actions
        self.action_history[:, self.t] = actions
        self.t += 1
        self.meters_history[:, self.t] = after
        reward = step_reward(after, self.last_delta[:, 2])
        done = self.t == STEPS_PER_EPISODE
        terminated = np.full(len(actions), done)
        truncated = np.zeros(len(actions), dtype=bool)
        return self._obs(self._observation()), reward, terminated, truncated, {}

    def _observation(self) -> BatchObservation:
        return BatchObservation(self.t, self.meters, self.last_action, self.last_delta, self.anomaly)

    def _obs(self, batch: BatchObservation) -> BatchObservation | dict:
        return batch if self.obs_type == "object" else batch.arrays()

    # ---- privileged views (graders, oracle, dataset columns) --------------------------------
    @property
    def seeds(self) -> np.ndarray:
        return self._seeds

    @property
    def true_belief(self) -> np.ndarray:
        return true_belief(self.factors)

    @property
    def profile_tensor(self) -> np.ndarray:
        """(N, actions, slots, meters, 1 + meters): the transition model of each episode's person."""
        return self._tensor

    # ---- snapshot / restore -----------------------------------------------------------------
    def snapshot(self) -> EnvState:
        t = self.t
        return EnvState(
            condition=self.condition,
            seeds=self._seeds.copy(),
            step=t,
            meters=self.meters.copy(),
            last_action=self.last_action.copy(),
            last_delta=self.last_delta.copy(),
            anomaly=self.anomaly.copy(),
            meters_history=self.meters_history[:, : t + 1].copy(),
            action_history=self.action_history[:, :t].copy(),
        )

    def restore(self, state: EnvState) -> BatchObservation | dict:
        """Restore a snapshot; re-derives the profile and noise when the seeds differ."""
        if state.condition != self.condition:
            raise ValueError(f"snapshot is from condition {state.condition!r}, env is {self.condition!r}")
        if self._seeds is None or not np.array_equal(self._seeds, state.seeds):
            seeds = np.atleast_1d(np.asarray(state.seeds, dtype=np.int64))
            self._check_seeds(seeds)
            self._start(seeds)
        t = state.step
        self.t = t
        self.meters = state.meters.copy()
        self.last_action = state.last_action.copy()
        self.last_delta = state.last_delta.copy()
        self.anomaly = state.anomaly.copy()
        self.meters_history[:, : t + 1] = state.meters_history
        self.action_history[:, :t] = state.action_history
        return self._obs(self._observation())

    def __repr__(self) -> str:
        return f"VectorRhythmEnv({self.condition!r}, num_envs={self._num_envs}, obs_type={self.obs_type!r})"


class RhythmEnv(gym.Env):
    """Single-episode RhythmEnv, a `gymnasium.Env`.

    reset(seed=...) -> (observation, info); step(action) -> (observation, reward, terminated,
    truncated, info). `action` is an index into spec.ACTIONS (`action_space` is Discrete(10)) or an
    action name ("DEEP_WORK", case-insensitive). The observation is an `Observation` with
    obs_type="object" (the default here) or a dict in `observation_space` with obs_type="dict" (the
    default through gymnasium.make). With a `purpose` ("training" through gymnasium.make) the front
    ends' seeds rules hold (`seed_rules`): a seed names the week and must be allowed for the purpose,
    reset without one draws a training week, and only integer actions are taken. Without one (the
    default here, the project's own API): a seed inside the condition's range is the episode seed; reset
    without one draws it from the Gymnasium RNG (the condition's training seeds where it has some); a
    seed outside the range is an error with strict_seeds=True (the default here), and with
    strict_seeds=False it seeds the Gymnasium RNG that draws the episode seed.
    info["seed"] is the episode seed. At termination, info holds the true profile and belief (for
    grading; agents must not read them before the end). render_mode="ansi": render() returns text.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, condition: str = "continuous", render_mode: str | None = None, *, obs_type: str = "object",
                 strict_seeds: bool = True, purpose: str | None = None):
        self._vec = VectorRhythmEnv(condition, num_envs=1)
        self.purpose = None if purpose is None else check_purpose(purpose)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"unknown render_mode {render_mode!r}; allowed: {', '.join(self.metadata['render_modes'])}")
        self.condition = condition
        self.render_mode = render_mode
        self.obs_type = _check_obs_type(obs_type)
        self.strict_seeds = bool(strict_seeds)
        self.action_space = _action_space()
        self.observation_space = _observation_space()

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Observation | dict, dict]:
        _check_options(options, ("factors",))
        if self.purpose is not None:
            if seed is not None:  # refused before the RNG is touched
                seed = week_seed(self.condition, seed, self.purpose, self.np_random)
            super().reset(seed=seed)
            episode_seed = seed if seed is not None else week_seed(self.condition, None, self.purpose, self.np_random)
            batch, _ = self._vec._start(np.array([episode_seed], dtype=np.int64), (options or {}).get("factors"))
            return self._obs(batch), {"seed": episode_seed, "condition": self.condition}
        if seed is not None:
            seed = _as_int_seed(seed)
            if self.strict_seeds:
                check_seed(self.condition, seed)
        super().reset(seed=seed)
        if seed is not None and get_condition(self.condition).contains(seed):
            episode_seed = seed
        else:  # no seed, or (strict_seeds=False) one outside the range: the Gymnasium RNG draws it
            episode_seed = draw_training_seeds(self.np_random, self.condition)
        batch, _ = self._vec._start(np.array([episode_seed], dtype=np.int64), (options or {}).get("factors"))
        return self._obs(batch), {"seed": episode_seed, "condition": self.condition}

    def step(self, action) -> tuple[Observation | dict, float, bool, bool, dict]:
        index = _action(action, by_name=self.purpose is None)
        if not 0 <= index < len(ACTIONS):
            raise ValueError(f"unknown action index {action!r}; allowed 0-{len(ACTIONS) - 1}: {', '.join(ACTIONS)}")
        batch, reward, terminated, truncated, _ = self._vec.step(np.array([index]))
        info = {}
        if terminated[0]:
            info = {"factors": self._vec.factors[0].copy(), "true_belief": self._vec.true_belief[0].copy()}
        return self._obs(batch), float(reward[0]), bool(terminated[0]), bool(truncated[0]), info

    def _obs(self, batch: BatchObservation) -> Observation | dict:
        if self.obs_type == "object":
            return batch.item(0)
        return {name: values[0] for name, values in batch.arrays().items()}

    def render(self) -> str | None:
        if self.render_mode is None:
            gym.logger.warn("RhythmEnv.render() was called without a render_mode; create the env with render_mode='ansi'")
            return None
        if self._vec.seeds is None:
            raise RuntimeError("call reset() before render()")
        return render_ansi(self._vec._observation().item(0), self.condition, int(self._vec.seeds[0]))

    @property
    def vector(self) -> VectorRhythmEnv:
        """The underlying one-episode vector env (privileged: profile, histories)."""
        return self._vec

    def snapshot(self) -> EnvState:
        return self._vec.snapshot()

    def restore(self, state: EnvState) -> Observation | dict:
        if len(state.seeds) != 1:
            raise ValueError(f"a scalar env restores a one-episode snapshot, got {len(state.seeds)} episodes")
        return self._obs(self._vec.restore(state))
