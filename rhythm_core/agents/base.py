"""One interface for every agent: batched decisions over lockstep episodes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rhythm_env.sim import BatchObservation, VectorRhythmEnv


@dataclass
class Decision:
    actions: np.ndarray  # (N,) action indices
    beliefs: np.ndarray | None = None  # (N, 3) in [0, 1], or None for agents that state no belief
    reasoning: list[str] | None = None  # one text per episode, for agents that explain themselves
    invalid: np.ndarray | None = None  # (N,) bool: the answer was unusable and a fallback was taken


class Agent:
    """Agents act on N episodes at once; a single episode is a batch of one.

    `reset(env)` is called after `env.reset(seeds)`. Only privileged agents (the oracle) may read the
    env's hidden profile; everyone else uses `env.num_envs`, `env.seeds` and `env.condition`.
    """

    name: str = "agent"
    emits_belief: bool = False
    privileged: bool = False

    def reset(self, env: VectorRhythmEnv) -> None:
        self.seeds = env.seeds

    def act(self, obs: BatchObservation) -> Decision:
        raise NotImplementedError
