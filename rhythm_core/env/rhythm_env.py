"""RhythmEnv: one simulated week of a person's life, as a Gymnasium-style env and a numpy vector env.

`VectorRhythmEnv` steps N episodes in lockstep (one numpy kernel per step); `RhythmEnv` is the
single-episode Gymnasium-style view on the same kernel, so both give bitwise identical results for
the same (condition, seed). Everything random is drawn at reset from counter-based streams keyed by
the seed, so an episode is a pure function of (condition, seed, actions).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from . import rng
from .conditions import check_seed, get_condition
from .dynamics import INITIAL_JITTER, INITIAL_METERS, NOISE_SD, expected_delta, neutral_delta, profile_tensor
from .profiles import sample_factors
from .spec import ACTIONS, CRASH_THRESHOLD, DAYS, FACTORS, METERS, SLOTS, STEPS_PER_EPISODE, action_index, true_belief

_NOISE_STREAM = rng.stream_id("noise")
_INIT_STREAM = rng.stream_id("initial-meters")
_N_METERS = len(METERS)


def _noise_table(seeds: np.ndarray) -> np.ndarray:
    counters = np.arange(STEPS_PER_EPISODE * _N_METERS).reshape(STEPS_PER_EPISODE, _N_METERS)
    return NOISE_SD * rng.normal(_NOISE_STREAM, seeds[:, None, None], counters[None])


def _initial_meters(seeds: np.ndarray) -> np.ndarray:
    u = rng.uniform(_INIT_STREAM, seeds[:, None], np.arange(_N_METERS)[None])
    return INITIAL_METERS + INITIAL_JITTER * (2.0 * u - 1.0)


def step_reward(meters: np.ndarray, progress_gain: np.ndarray) -> np.ndarray:
    """Dense shaped reward for RL: mean wellbeing meter + progress made - 0.25 per crashed meter.

    Scores are the graders' business (rhythm_core.graders); this is only a per-step learning signal.
    """
    wellbeing = 0.25 * (meters[:, 0] + meters[:, 1] + meters[:, 3] + meters[:, 4])
    crashes = np.count_nonzero(meters < CRASH_THRESHOLD, axis=1)
    return wellbeing + 2.0 * progress_gain - 0.25 * crashes


@dataclass(frozen=True)
class Observation:
    """What the agent sees at one step. The hidden profile is never part of it."""

    step: int  # 0..27, steps already taken
    meters: np.ndarray  # (5,) in [0, 1], order of spec.METERS
    last_action: str | None
    last_delta: np.ndarray | None  # (5,) actual change caused by the last step
    anomaly: np.ndarray | None  # (5,) last_delta minus the neutral profile's change

    @property
    def day(self) -> int:  # 1..7
        return min(self.step // len(SLOTS), DAYS - 1) + 1

    @property
    def slot(self) -> str:
        return SLOTS[self.step % len(SLOTS)]

    def to_dict(self) -> dict:
        def named(values):
            return None if values is None else {m: round(float(v), 4) for m, v in zip(METERS, values)}

        return {
            "step": self.step,
            "day": self.day,
            "slot": self.slot,
            "meters": named(self.meters),
            "last_action": self.last_action,
            "last_delta": named(self.last_delta),
            "anomaly": named(self.anomaly),
        }


@dataclass
class BatchObservation:
    """Observations of N lockstep episodes; `.item(n)` gives the scalar `Observation` of episode n."""

    step: int
    meters: np.ndarray  # (N, 5)
    last_action: np.ndarray  # (N,) int, -1 before the first step
    last_delta: np.ndarray  # (N, 5), zeros before the first step
    anomaly: np.ndarray  # (N, 5)

    @property
    def slot(self) -> int:
        return self.step % len(SLOTS)

    def __len__(self) -> int:
        return self.meters.shape[0]

    def item(self, n: int) -> Observation:
        started = self.step > 0
        return Observation(
            step=self.step,
            meters=self.meters[n].copy(),
            last_action=ACTIONS[self.last_action[n]] if started else None,
            last_delta=self.last_delta[n].copy() if started else None,
            anomaly=self.anomaly[n].copy() if started else None,
        )


@dataclass
class EnvState:
    """A restorable snapshot of a vector env (or of a scalar env: N = 1). Serializable to a dict."""

    condition: str
    seeds: np.ndarray
    step: int
    meters: np.ndarray
    last_action: np.ndarray
    last_delta: np.ndarray
    anomaly: np.ndarray
    meters_history: np.ndarray  # (N, step + 1, 5)
    action_history: np.ndarray  # (N, step)

    def to_dict(self) -> dict:
        return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in self.__dict__.items()}

    def to_json(self) -> str:
        """Compact JSON with exact floats (repr round-trips), for dataset columns."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> EnvState:
        return cls.from_dict(json.loads(text))

    def observation(self, i: int = 0) -> Observation:
        """What episode i's agent saw at this snapshot (the hidden profile is not part of it)."""
        return BatchObservation(self.step, self.meters, self.last_action, self.last_delta, self.anomaly).item(i)

    def episode(self, i: int) -> EnvState:
        """Episode i of a batch snapshot, as a one-episode snapshot."""
        arrays = {name: getattr(self, name)[i : i + 1] for name in self.__dataclass_fields__
                  if name not in ("condition", "step")}
        return EnvState(condition=self.condition, step=self.step, **arrays)

    @classmethod
    def from_dict(cls, data: dict) -> EnvState:
        arrays = {"seeds": np.int64, "last_action": np.int64, "action_history": np.int64}
        kwargs = {}
        for name in cls.__dataclass_fields__:
            value = data[name]
            if name in ("condition", "step"):
                kwargs[name] = value
            else:
                kwargs[name] = np.asarray(value, dtype=arrays.get(name, np.float64))
        kwargs["action_history"] = kwargs["action_history"].reshape(len(kwargs["seeds"]), int(data["step"]))
        return cls(**kwargs)


@dataclass
class VectorRhythmEnv:
    """N RhythmEnv episodes stepped together in numpy. All episodes share the step counter."""

    condition: str = "continuous"
    _seeds: np.ndarray = field(default=None, init=False, repr=False)

    def __post_init__(self):
        get_condition(self.condition)

    # ---- lifecycle -------------------------------------------------------------------------
    def reset(self, seeds, options: dict | None = None) -> tuple[BatchObservation, dict]:
        """Start one episode per seed. `options={"factors": (N, 9) array}` replaces the hidden
        profiles (counterfactual studies and tests: e.g. the neutral profile, all 0.5)."""
        seeds = np.atleast_1d(np.asarray(seeds, dtype=np.int64))
        for s in np.unique(seeds):
            check_seed(self.condition, int(s))
        self._seeds = seeds
        factors = (options or {}).get("factors")
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

    def step(self, actions) -> tuple[BatchObservation, np.ndarray, np.ndarray, np.ndarray, dict]:
        if self._seeds is None:
            raise RuntimeError("call reset(seeds) before step()")
        if self.t >= STEPS_PER_EPISODE:
            raise RuntimeError(f"the episodes are over ({STEPS_PER_EPISODE} steps); call reset()")
        actions = np.asarray(actions, dtype=np.int64)
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
        return self._observation(), reward, terminated, truncated, {}

    def _observation(self) -> BatchObservation:
        return BatchObservation(self.t, self.meters, self.last_action, self.last_delta, self.anomaly)

    # ---- privileged views (graders, oracle, dataset columns) --------------------------------
    @property
    def seeds(self) -> np.ndarray:
        return self._seeds

    @property
    def num_envs(self) -> int:
        return len(self._seeds)

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

    def restore(self, state: EnvState) -> BatchObservation:
        """Restore a snapshot; re-derives the profile and noise when the seeds differ."""
        if state.condition != self.condition:
            raise ValueError(f"snapshot is from condition {state.condition!r}, env is {self.condition!r}")
        if self._seeds is None or not np.array_equal(self._seeds, state.seeds):
            self.reset(state.seeds)
        t = state.step
        self.t = t
        self.meters = state.meters.copy()
        self.last_action = state.last_action.copy()
        self.last_delta = state.last_delta.copy()
        self.anomaly = state.anomaly.copy()
        self.meters_history[:, : t + 1] = state.meters_history
        self.action_history[:, :t] = state.action_history
        return self._observation()


class RhythmEnv:
    """Single-episode, Gymnasium-style view of RhythmEnv.

    reset(seed=...) -> (Observation, info); step(action) -> (Observation, reward, terminated,
    truncated, info). `action` is an action name ("DEEP_WORK") or index. At termination, info holds
    the true profile and belief (for grading; agents must not read them before the end).
    """

    def __init__(self, condition: str = "continuous"):
        self.condition = condition
        self._vec = VectorRhythmEnv(condition)

    def reset(self, *, seed: int, options: dict | None = None) -> tuple[Observation, dict]:
        seed = check_seed(self.condition, seed)
        batch, _ = self._vec.reset([seed], options)
        return batch.item(0), {"seed": seed, "condition": self.condition}

    def step(self, action) -> tuple[Observation, float, bool, bool, dict]:
        index = action_index(action) if isinstance(action, str) else int(action)
        if not 0 <= index < len(ACTIONS):
            raise ValueError(f"unknown action index {action!r}; allowed 0-{len(ACTIONS) - 1}: {', '.join(ACTIONS)}")
        batch, reward, terminated, truncated, _ = self._vec.step(np.array([index]))
        info = {}
        if terminated[0]:
            info = {"factors": self._vec.factors[0].copy(), "true_belief": self._vec.true_belief[0].copy()}
        return batch.item(0), float(reward[0]), bool(terminated[0]), bool(truncated[0]), info

    @property
    def vector(self) -> VectorRhythmEnv:
        """The underlying one-episode vector env (privileged: profile, histories)."""
        return self._vec

    def snapshot(self) -> EnvState:
        return self._vec.snapshot()

    def restore(self, state: EnvState) -> Observation:
        if len(state.seeds) != 1:
            raise ValueError(f"a scalar env restores a one-episode snapshot, got {len(state.seeds)} episodes")
        return self._vec.restore(state).item(0)
