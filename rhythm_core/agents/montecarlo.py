"""Monte-Carlo action values: each of the ten actions, then a rollout policy for the rest of the
week, along noisy paths simulated under one profile, scored by a grader's score-to-go.

Whole-week noisy paths see what a short expected-value lookahead cannot: a meter that may crash
two days later, progress that only pays at the end of the week. The noise comes from a private
counter-based stream keyed by (episode seed, decision step, path), never from the env's, so the
values are a pure function of what the agent knows and its seeds. The ten actions share each
path's noise (common random numbers), so they are compared on the same luck.
"""

from __future__ import annotations

import numpy as np

from rhythm_env.graders.base import ScoreToGo
from rhythm_env.sim import rng
from rhythm_env.sim.dynamics import NOISE_SD, expected_delta
from rhythm_env.sim.spec import ACTIONS, METERS, SLOTS, STEPS_PER_EPISODE

from .planner import action_values
from .simple import heuristic_actions

PATHS = 16
ROLLOUT_POLICIES = ("heuristic", "planner")
_A, _J = len(ACTIONS), len(METERS)


def noise_paths(seeds: np.ndarray, step: int, paths: int = PATHS, noise_seed: int = 0,
                noise_sd: float = NOISE_SD) -> np.ndarray:
    """The meter noise of `paths` simulated rests of the week from `step`: (N, paths, 28 - step, 5),
    a pure function of (noise_seed, episode seed, step, path, future step, meter)."""
    stream = rng.stream_id(f"agent:search:noise:{noise_seed}")
    path = np.arange(paths)[:, None, None]
    t = np.arange(step, STEPS_PER_EPISODE)[None, :, None]
    counters = ((step * paths + path) * STEPS_PER_EPISODE + t) * _J + np.arange(_J)
    return noise_sd * rng.normal(stream, np.asarray(seeds, dtype=np.int64)[:, None, None, None], counters[None])


def monte_carlo_values(tensor: np.ndarray, meters: np.ndarray, step: int, factors: np.ndarray, score: ScoreToGo,
                       noise: np.ndarray, policy: str = "heuristic") -> np.ndarray:
    """The mean score-to-go (N, 10) of taking each action from `meters` (N, 5) at `step`, then
    following `policy` (the heuristic, or the lookahead planner scoring with `score`) to the end
    of the week, over the paths of `noise` (N, P, 28 - step, 5), for people with profiles `factors`
    (N, 9) whose transition models are `tensor` and whose grade is `score`."""
    if policy not in ROLLOUT_POLICIES:
        raise ValueError(f"unknown rollout policy {policy!r}; allowed: {', '.join(ROLLOUT_POLICIES)}")
    n, p = noise.shape[:2]
    owner = np.repeat(np.arange(n), _A * p)  # row (person, action, path)
    utility = score.take(owner)
    m = np.repeat(meters, _A * p, axis=0)
    acts = np.tile(np.repeat(np.arange(_A), p), n)
    value = np.zeros(len(m))
    for k, t in enumerate(range(step, STEPS_PER_EPISODE)):
        slot = t % len(SLOTS)
        if k > 0:
            acts = (heuristic_actions(m, slot) if policy == "heuristic"
                    else action_values(tensor, m, t, factors, score=score, owner=owner).argmax(axis=1))
        eps = np.broadcast_to(noise[:, None, :, k], (n, _A, p, _J)).reshape(-1, _J)
        nxt = np.clip(m + expected_delta(tensor[owner, acts, slot], m) + eps, 0.0, 1.0)
        value += utility.step(m, nxt)
        m = nxt
    return value.reshape(n, _A, p).mean(axis=2)
