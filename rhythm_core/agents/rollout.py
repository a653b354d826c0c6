"""Play agents on the vector env: `play_lockstep`, the one loop every player uses, and `rollout`,
which collects its finished episodes."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from rhythm_env.sim import BatchObservation, EnvState, VectorRhythmEnv
from rhythm_env.sim.episode import EpisodeBatch
from rhythm_env.sim.spec import BELIEF_DIMS, STEPS_PER_EPISODE

from .base import Agent, Decision


@dataclass
class LockstepStep:
    """Step t of a lockstep play: what the agent saw, what it decided, and what the env showed after."""

    t: int
    obs: BatchObservation  # before the step: what the agent acted on
    decision: Decision
    next_obs: BatchObservation  # after the env took `decision.actions`
    snapshot: EnvState | None = None  # the env before the step, with play_lockstep(..., snapshots=True)


def play_lockstep(agent: Agent, env: VectorRhythmEnv, seeds, *, snapshots: bool = False) -> Iterator[LockstepStep]:
    """Reset `env` on `seeds` (one episode each) and `agent` on it, then play the week: each step the
    agent acts on every episode's observation and the env takes its actions. Yields each step once the
    env has taken it (the agent has not acted again yet); when the iteration ends `env` holds the
    finished episodes."""
    obs, _ = env.reset(seeds)
    agent.reset(env)
    for t in range(STEPS_PER_EPISODE):
        snapshot = env.snapshot() if snapshots else None
        decision = agent.act(obs)
        next_obs, *_ = env.step(decision.actions)
        yield LockstepStep(t, obs, decision, next_obs, snapshot)
        obs = next_obs


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
    n = len(seeds)
    beliefs = np.full((n, STEPS_PER_EPISODE, len(BELIEF_DIMS)), np.nan)
    invalid = np.zeros((n, STEPS_PER_EPISODE), dtype=bool)
    for step in play_lockstep(agent, env, seeds):
        if step.decision.beliefs is not None:
            beliefs[:, step.t] = step.decision.beliefs
        if step.decision.invalid is not None:
            invalid[:, step.t] = step.decision.invalid
    return EpisodeBatch(condition, seeds, env.factors, env.meters_history.copy(), env.action_history.copy(),
                        beliefs, invalid, agent.name)
