"""Model-based lookahead shared by the oracle (true profile) and the Bayesian teacher (posterior mean).

For every candidate action the planner simulates the expected (noise-free) transition under a
profile, then follows the heuristic for the rest of the horizon, and scores the path with the
person's preferences: preference-weighted wellbeing each step, progress made, a soft crash
penalty, and a terminal value for the state left behind. This is a rollout policy over the
heuristic, so with a correct profile it is never worse than the heuristic in expectation.
"""

from __future__ import annotations

import numpy as np

from ..env.dynamics import expected_delta
from ..env.spec import ACTIONS, FACTOR_INDEX, SLOTS, STEPS_PER_EPISODE
from ..graders.v3 import preference_weights
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


def action_values(tensor: np.ndarray, meters: np.ndarray, step: int, factors: np.ndarray,
                  horizon: int = HORIZON) -> np.ndarray:
    """Expected value of each action (N, 10) from `meters` (N, 5) at `step`, for profiles `factors`
    (N, 9) whose transition models are `tensor` (dynamics.profile_tensor(factors))."""
    n = meters.shape[0]
    w, progress_w = utility_weights(factors)
    idx = np.repeat(np.arange(n), _A)
    w, progress_w = w[idx], progress_w[idx]
    m = np.repeat(meters, _A, axis=0)
    acts = np.tile(np.arange(_A), n)
    value = np.zeros(n * _A)
    last = min(step + horizon, STEPS_PER_EPISODE)
    for t in range(step, last):
        slot = t % len(SLOTS)
        if t > step:
            acts = heuristic_actions(m, slot)
        nxt = np.clip(m + expected_delta(tensor[idx, acts, slot], m), 0.0, 1.0)
        value += _WELLBEING_PER_STEP * (nxt * w).sum(axis=1)
        value += progress_w * (nxt[:, 2] - m[:, 2])
        value -= _CRASH_PER_STEP * _soft_crash(nxt)
        m = nxt
    remaining = STEPS_PER_EPISODE - last  # the state left behind is valued for the rest of the week
    value += remaining * (_WELLBEING_PER_STEP * (m * w).sum(axis=1) - _CRASH_PER_STEP * _soft_crash(m))
    return value.reshape(n, _A)
