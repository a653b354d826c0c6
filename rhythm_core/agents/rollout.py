"""Play agents on the vector env and collect finished episodes."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..env import VectorRhythmEnv
from ..env.episode import EpisodeBatch
from ..env.spec import BELIEF_DIMS, STEPS_PER_EPISODE
from .base import Agent


def rollout(
    agent: Agent,
    condition: str,
    seeds: Sequence[int],
    *,
    chunk_size: int = 4096,
    on_chunk: Callable[[int], None] | None = None,
) -> EpisodeBatch:
    """Play `agent` on every seed of `condition` (lockstep chunks of `chunk_size` episodes).

    `on_chunk(n_done)` is called after each chunk (progress bars).
    """
    seeds = np.asarray(seeds, dtype=np.int64)
    parts = []
    for start in range(0, len(seeds), chunk_size):
        chunk = seeds[start : start + chunk_size]
        parts.append(_rollout_chunk(agent, condition, chunk))
        if on_chunk is not None:
            on_chunk(len(chunk))
    if not parts:
        raise ValueError("rollout() needs at least one seed")
    return EpisodeBatch(
        condition=condition,
        seeds=np.concatenate([p.seeds for p in parts]),
        factors=np.concatenate([p.factors for p in parts]),
        meters=np.concatenate([p.meters for p in parts]),
        actions=np.concatenate([p.actions for p in parts]),
        beliefs=np.concatenate([p.beliefs for p in parts]),
        invalid=np.concatenate([p.invalid for p in parts]),
        agent=agent.name,
    )


def _rollout_chunk(agent: Agent, condition: str, seeds: np.ndarray) -> EpisodeBatch:
    env = VectorRhythmEnv(condition)
    obs, _ = env.reset(seeds)
    agent.reset(env)
    n = len(seeds)
    beliefs = np.full((n, STEPS_PER_EPISODE, len(BELIEF_DIMS)), np.nan)
    invalid = np.zeros((n, STEPS_PER_EPISODE), dtype=bool)
    for t in range(STEPS_PER_EPISODE):
        decision = agent.act(obs)
        if decision.beliefs is not None:
            beliefs[:, t] = decision.beliefs
        if decision.invalid is not None:
            invalid[:, t] = decision.invalid
        obs, *_ = env.step(decision.actions)
    return EpisodeBatch(condition, seeds, env.factors, env.meters_history.copy(), env.action_history.copy(),
                        beliefs, invalid, agent.name)
