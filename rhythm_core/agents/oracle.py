"""The privileged oracle: knows the true profile, states the true belief, plans with the true model.
It is the ceiling for both acting and inferring. Its planner scores paths with its own utility, as
every published table's ceiling row did; `grader` scores them with that grader's score-to-go instead
(a higher ceiling for that grade: benchmarks/README.md, D1)."""

from __future__ import annotations

from rhythm_env.graders import get_grader
from rhythm_env.sim import BatchObservation, VectorRhythmEnv

from .base import Agent, Decision
from .planner import action_values


class OracleAgent(Agent):
    name = "oracle"
    emits_belief = True
    privileged = True

    def __init__(self, grader: str | None = None):
        self.grader = None if grader is None else get_grader(grader)

    def reset(self, env: VectorRhythmEnv) -> None:
        super().reset(env)
        self._factors = env.factors
        self._tensor = env.profile_tensor
        self._belief = env.true_belief
        self._score = None if self.grader is None else self.grader.score_to_go(self._factors)

    def act(self, obs: BatchObservation) -> Decision:
        values = action_values(self._tensor, obs.meters, obs.step, self._factors, score=self._score)
        return Decision(actions=values.argmax(axis=1), beliefs=self._belief.copy())
