"""The privileged oracle: knows the true profile, states the true belief, plans with the true model.
It is the ceiling for both acting and inferring."""

from __future__ import annotations

from ..env import BatchObservation, VectorRhythmEnv
from .base import Agent, Decision
from .planner import action_values


class OracleAgent(Agent):
    name = "oracle"
    emits_belief = True
    privileged = True

    def reset(self, env: VectorRhythmEnv) -> None:
        super().reset(env)
        self._factors = env.factors
        self._tensor = env.profile_tensor
        self._belief = env.true_belief

    def act(self, obs: BatchObservation) -> Decision:
        values = action_values(self._tensor, obs.meters, obs.step, self._factors)
        return Decision(actions=values.argmax(axis=1), beliefs=self._belief.copy())
