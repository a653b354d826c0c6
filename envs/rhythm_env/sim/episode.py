"""Finished episodes as arrays: what graders read and what rollouts produce."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .profiles import sample_factors
from .spec import ACTIONS, BELIEF_DIMS, METERS, STEPS_PER_EPISODE, true_belief


@dataclass
class EpisodeBatch:
    """N finished episodes of one condition.

    beliefs holds NaN where an agent stated no belief; invalid flags steps whose answer could not be
    parsed (LLM agents) and fell back to a safe action.
    """

    condition: str
    seeds: np.ndarray  # (N,)
    factors: np.ndarray  # (N, 9) true hidden profile
    meters: np.ndarray  # (N, 29, 5): initial state then the state after each step
    actions: np.ndarray  # (N, 28) action indices
    beliefs: np.ndarray  # (N, 28, 3) stated belief at each step, NaN if none
    invalid: np.ndarray = field(default=None)  # (N, 28) bool
    agent: str = ""

    def __post_init__(self):
        if self.invalid is None:
            self.invalid = np.zeros(self.actions.shape, dtype=bool)
        n = len(self.seeds)
        expected = {
            "factors": (n, self.factors.shape[-1]),
            "meters": (n, STEPS_PER_EPISODE + 1, len(METERS)),
            "actions": (n, STEPS_PER_EPISODE),
            "beliefs": (n, STEPS_PER_EPISODE, len(BELIEF_DIMS)),
            "invalid": (n, STEPS_PER_EPISODE),
        }
        for name, shape in expected.items():
            if getattr(self, name).shape != shape:
                raise ValueError(f"EpisodeBatch.{name} has shape {getattr(self, name).shape}, expected {shape}")

    def __len__(self) -> int:
        return len(self.seeds)

    @property
    def true_belief(self) -> np.ndarray:
        return true_belief(self.factors)

    @property
    def final_belief(self) -> np.ndarray:
        """The belief stated at the last step (N, 3); NaN rows for agents that state none."""
        return self.beliefs[:, -1]

    @property
    def has_belief(self) -> np.ndarray:
        return ~np.isnan(self.final_belief).any(axis=1)

    def belief_mae(self) -> np.ndarray:
        """Per-episode MAE of the final belief against the true belief (NaN without a belief)."""
        return np.abs(self.final_belief - self.true_belief).mean(axis=1)

    @classmethod
    def from_env(cls, env, beliefs, invalid=None, agent: str = "") -> EpisodeBatch:
        """The finished week(s) `env` played (a RhythmEnv, also through gymnasium.make's wrappers, or a
        VectorRhythmEnv) with the `beliefs` stated at each slot: (28, 3) for one episode or (N, 28, 3),
        NaN where none was stated."""
        vec = getattr(getattr(env, "unwrapped", env), "vector", getattr(env, "unwrapped", env))
        if vec.seeds is None or vec.t != STEPS_PER_EPISODE:
            raise ValueError(f"the week is not finished: {0 if vec.seeds is None else vec.t} of "
                             f"{STEPS_PER_EPISODE} slots played")
        n = len(vec.seeds)
        beliefs = np.asarray(beliefs, dtype=np.float64).reshape(n, STEPS_PER_EPISODE, len(BELIEF_DIMS))
        invalid = None if invalid is None else np.asarray(invalid, dtype=bool).reshape(n, STEPS_PER_EPISODE)
        return cls(vec.condition, vec.seeds.copy(), vec.factors.copy(), vec.meters_history.copy(),
                   vec.action_history.copy(), beliefs.copy(), invalid, agent)

    @classmethod
    def from_records(cls, condition: str, records: list[dict], agent: str = "") -> EpisodeBatch:
        """Build from per-episode dicts with "seed", "actions" (names or indices), "meters" (29 x 5),
        optional "beliefs" (28 entries of {dim: value} or null) and "invalid" (28 bools).
        The true profile is re-derived from (condition, seed), never trusted from the record."""
        seeds = np.array([int(r["seed"]) for r in records], dtype=np.int64)
        actions = np.array(
            [[a if isinstance(a, int) else ACTIONS.index(a) for a in r["actions"]] for r in records], dtype=np.int64
        )
        beliefs = np.full((len(records), STEPS_PER_EPISODE, len(BELIEF_DIMS)), np.nan)
        for n, r in enumerate(records):
            for t, b in enumerate(r.get("beliefs") or []):
                if b is not None:
                    beliefs[n, t] = [b[d] for d in BELIEF_DIMS]
        invalid = np.array([r.get("invalid") or [False] * STEPS_PER_EPISODE for r in records], dtype=bool)
        return cls(
            condition, seeds, sample_factors(condition, seeds),
            np.array([r["meters"] for r in records], dtype=np.float64), actions, beliefs, invalid, agent,
        )
