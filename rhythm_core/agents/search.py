"""The search teacher: the Bayesian teacher's inference, acting by Monte-Carlo rollouts.

It keeps BayesAgent's exact posterior over the profile and its information bonus, and values each
action by simulating the rest of the week under the posterior-mean profile along `paths` noisy
paths (montecarlo.py), scored by the grader's own score-to-go. Only what the teacher has inferred
enters the rollouts: no hidden information. The noise is a private stream keyed by the episode's
seed, so play is deterministic and the env's own randomness is never touched.
"""

from __future__ import annotations

import numpy as np

from rhythm_env.sim import BatchObservation
from rhythm_env.sim.dynamics import NOISE_SD, profile_tensor
from rhythm_env.sim.spec import ACTIONS

from .bayes import INFO_WEIGHT, PLAN_GRADER, BayesAgent, inference_text
from .montecarlo import PATHS, ROLLOUT_POLICIES, monte_carlo_values, noise_paths


class SearchAgent(BayesAgent):
    name = "search"

    def __init__(self, explain: bool = False, info_weight: float = INFO_WEIGHT, grader: str = PLAN_GRADER, *,
                 paths: int = PATHS, noise_sd: float = NOISE_SD, rollout_policy: str = "heuristic",
                 noise_seed: int = 0):
        if grader is None:
            raise ValueError("the search teacher scores its rollouts with a grader's score-to-go; name one")
        if rollout_policy not in ROLLOUT_POLICIES:
            raise ValueError(f"unknown rollout policy {rollout_policy!r}; allowed: {', '.join(ROLLOUT_POLICIES)}")
        if paths < 1 or not noise_sd >= 0:
            raise ValueError(f"paths must be >= 1 and noise_sd >= 0, got {paths} and {noise_sd}")
        super().__init__(explain=explain, info_weight=info_weight, grader=grader)
        self.paths, self.noise_sd, self.rollout_policy, self.noise_seed = paths, noise_sd, rollout_policy, noise_seed

    def plan(self, obs: BatchObservation, factors: np.ndarray) -> np.ndarray:
        noise = noise_paths(self.seeds, obs.step, self.paths, self.noise_seed, self.noise_sd)
        return monte_carlo_values(profile_tensor(factors), obs.meters, obs.step, factors,
                                  self.grader.score_to_go(factors), noise, self.rollout_policy)

    def explain_choice(self, obs, n, belief, sd, action, values) -> str:
        return " ".join([*inference_text(obs, self._moved[n], belief, sd), _why_searched(action, values, self.paths)])


def _why_searched(action, values, paths: int) -> str:
    """The Monte-Carlo values of the three best actions, and why `action` won."""
    order = np.argsort(-values, kind="stable")
    best = int(order[0])
    ranked = ", ".join(f"{ACTIONS[a]} {values[a]:.3f}" for a in order[:3])
    text = f"Simulating the rest of the week {paths} times for this person, the score still to earn is {ranked}."
    if action == best:
        return f"{text} {ACTIONS[action]} is worth the most."
    return (f"{text} {ACTIONS[action]} is within {values[best] - values[action]:.3f} of {ACTIONS[best]} "
            "and tells me more about them.")
