"""Baselines that ignore who the person is: random, the fixed-priority heuristic, the heuristic
with a constant prior-mean belief, and the fallback-only policy."""

from __future__ import annotations

import numpy as np

from rhythm_env.protocol import fallback_actions
from rhythm_env.sim import BatchObservation, rng
from rhythm_env.sim.spec import ACTION_INDEX, ACTIONS, BELIEF_DIMS, METERS, SLOTS

from .base import Agent, Decision

_RANDOM_STREAM = rng.stream_id("agent:random")
_A = ACTION_INDEX


class RandomAgent(Agent):
    """Uniform over the ten actions, seeded by (episode seed, step)."""

    name = "random"

    def act(self, obs: BatchObservation) -> Decision:
        u = rng.uniform(_RANDOM_STREAM, self.seeds, obs.step)
        return Decision(actions=np.minimum((u * len(ACTIONS)).astype(np.int64), len(ACTIONS) - 1))


def heuristic_actions(meters: np.ndarray, slot: int) -> np.ndarray:
    """The fixed priority list (first rule that fires wins), vectorized over episodes:

    night -> SLEEP; vitality < 0.25 -> NAP; serenity < 0.30 -> MEDITATE; connection < 0.30 ->
    SOCIALIZE; morning/afternoon -> DEEP_WORK if cognition >= 0.35 else SHALLOW_WORK;
    evening -> FAMILY_TIME if connection < 0.5 else LEISURE.
    """
    v, c, s, n = meters[:, 0], meters[:, 1], meters[:, 3], meters[:, 4]
    if slot == SLOTS.index("night"):
        return np.full(len(meters), _A["SLEEP"], dtype=np.int64)
    if slot == SLOTS.index("evening"):
        default = np.where(n < 0.5, _A["FAMILY_TIME"], _A["LEISURE"])
    else:
        default = np.where(c >= 0.35, _A["DEEP_WORK"], _A["SHALLOW_WORK"])
    return np.select(
        [v < 0.25, s < 0.30, n < 0.30],
        [_A["NAP"], _A["MEDITATE"], _A["SOCIALIZE"]],
        default=default,
    ).astype(np.int64)


class HeuristicAgent(Agent):
    name = "heuristic"

    def act(self, obs: BatchObservation) -> Decision:
        return Decision(actions=heuristic_actions(obs.meters, obs.slot))


class HeuristicConstBeliefAgent(HeuristicAgent):
    """The heuristic plus a constant belief of 0.5 on every dimension (the population prior mean)."""

    name = "heuristic_const_belief"
    emits_belief = True

    def act(self, obs: BatchObservation) -> Decision:
        decision = super().act(obs)
        decision.beliefs = np.full((len(obs), len(BELIEF_DIMS)), 0.5)
        return decision


class FallbackAgent(Agent):
    """What a language model that never answers validly earns: every step is an invalid answer, so
    the env takes `protocol.fallback_action` (SLEEP at night, NAP when tired, else MEDITATE) and no
    belief is stated. Every evaluation table shows it: a student must beat it to have learned anything."""

    name = "fallback"

    def act(self, obs: BatchObservation) -> Decision:
        actions = fallback_actions(np.full(len(obs), obs.step), obs.meters[:, METERS.index("vitality")])
        return Decision(actions=actions.astype(np.int64), invalid=np.ones(len(obs), dtype=bool))
