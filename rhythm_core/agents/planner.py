"""Model-based lookahead shared by the oracle (true profile) and the Bayesian teacher (posterior mean).

For every candidate action the planner simulates the expected (noise-free) transition under a
profile, then follows the heuristic for the rest of the horizon, and scores the path, plus a
terminal value for the state left behind (held for the rest of the week). This is a rollout policy
over the heuristic, so with a correct profile it is never worse than the heuristic in expectation.

Two path scores. Given a grader's `ScoreToGo` (graders/base.py), the path earns exactly what the
grader would give those meters: the teacher optimises the grade it is judged by. Without one, the
planner's own utility (the teacher's before 2026-11-26, still the oracle's): preference-weighted
wellbeing each step, progress made at ~0.30 a unit, and a soft crash penalty.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rhythm_env.graders.base import ScoreToGo
from rhythm_env.graders.v3 import preference_weights
from rhythm_env.sim.dynamics import expected_delta
from rhythm_env.sim.spec import ACTIONS, FACTOR_INDEX, SLOTS, STEPS_PER_EPISODE

from .simple import heuristic_actions

HORIZON = 4
_WELLBEING_PER_STEP = 0.35 / STEPS_PER_EPISODE
_PROGRESS = 0.30
_CRASH_PER_STEP = 0.15 / STEPS_PER_EPISODE
_A = len(ACTIONS)


def utility_weights(factors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(wellbeing weights over the 5 meters with progress zeroed (N, 5), progress weight (N,))."""
    w = preference_weights(factors)
    w[:, 2] = 0.0
    w /= w.sum(axis=1, keepdims=True)
    progress = _PROGRESS * (0.6 + 0.8 * factors[:, FACTOR_INDEX["progress_reward_weight"]])
    return w, progress


def _soft_crash(meters: np.ndarray) -> np.ndarray:
    return np.clip((0.15 - meters) / 0.05, 0.0, 1.0).max(axis=1)


@dataclass(frozen=True)
class _OwnUtility:
    """The planner's own utility, in ScoreToGo's shape (`take`, `step`, `state`) so both scores share one loop."""

    w: np.ndarray  # (N, 5) wellbeing weights, progress zeroed
    progress: np.ndarray  # (N,) what a unit of progress made is worth

    def take(self, index) -> _OwnUtility:
        return _OwnUtility(self.w[index], self.progress[index])

    def state(self, meters: np.ndarray) -> np.ndarray:
        return _WELLBEING_PER_STEP * (meters * self.w).sum(axis=1) - _CRASH_PER_STEP * _soft_crash(meters)

    def step(self, before: np.ndarray, after: np.ndarray) -> np.ndarray:
        return self.state(after) + self.progress * (after[:, 2] - before[:, 2])


def action_values(tensor: np.ndarray, meters: np.ndarray, step: int, factors: np.ndarray,
                  horizon: int = HORIZON, score: ScoreToGo | None = None,
                  owner: np.ndarray | None = None) -> np.ndarray:
    """Expected value of each action (M, 10) from `meters` (M, 5) at `step`, for profiles `factors`
    (N, 9) whose transition models are `tensor` (dynamics.profile_tensor(factors)). `score`: the
    grader's score for those N people (None: the planner's own utility). `owner` (M,): the person
    each row of `meters` is (default: row m is person m), so many states of one person share a tensor."""
    m_rows = meters.shape[0]
    person = np.arange(m_rows) if owner is None else owner
    idx = np.repeat(person, _A)
    utility = (_OwnUtility(*utility_weights(factors)) if score is None else score).take(idx)
    m = np.repeat(meters, _A, axis=0)
    acts = np.tile(np.arange(_A), m_rows)
    value = np.zeros(m_rows * _A)
    last = min(step + horizon, STEPS_PER_EPISODE)
    for t in range(step, last):
        slot = t % len(SLOTS)
        if t > step:
            acts = heuristic_actions(m, slot)
        nxt = np.clip(m + expected_delta(tensor[idx, acts, slot], m), 0.0, 1.0)
        value += utility.step(m, nxt)
        m = nxt
    value += (STEPS_PER_EPISODE - last) * utility.state(m)  # the state left behind, for the rest of the week
    return value.reshape(m_rows, _A)
