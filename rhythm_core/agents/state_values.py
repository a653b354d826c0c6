"""The search teacher's action values at stored states, for GRPO's reward: `action_values_at`.

Each state's posterior is the Bayesian filter replayed along the week it has observed (its meters
and actions so far; no hidden information), and each action is valued by the same Monte-Carlo
rollouts the search agent runs (montecarlo.py), with the same private noise: at a state the search
agent reached, these are the values it computed there. They are the grade still to earn (belief
aside); the information bonus the agent adds before it chooses is not part of them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..env import EnvState
from ..env.dynamics import NOISE_SD, profile_tensor
from ..env.spec import ACTIONS, METERS, STEPS_PER_EPISODE
from ..graders import get_grader
from .bayes import PLAN_GRADER, information_bonus, posterior_along, posterior_factors
from .montecarlo import PATHS, monte_carlo_values, noise_paths


def action_values_at(states: Sequence[EnvState], grader: str = PLAN_GRADER, *, paths: int = PATHS,
                     noise_sd: float = NOISE_SD, noise_seed: int = 0, rollout_policy: str = "heuristic",
                     info_weight: float = 0.0) -> np.ndarray:
    """The Monte-Carlo value (n, 10) of each action at each episode of `states` (n: their episodes in
    order; a state may hold several, and states may be at different steps and conditions): the mean
    score-to-go of `grader` over `paths` noisy rests of the week under the posterior mean, plus, with
    `info_weight` > 0, the teachers' bonus for what the action would reveal (the search teacher
    chooses by the sum at INFO_WEIGHT). A pure function of its arguments."""
    grade = get_grader(grader)
    seeds = np.concatenate([np.asarray(s.seeds, dtype=np.int64) for s in states])
    steps = np.concatenate([np.full(len(s.seeds), s.step, dtype=np.int64) for s in states])
    if steps.max(initial=0) >= STEPS_PER_EPISODE:
        raise ValueError(f"a state at step {STEPS_PER_EPISODE} ends the week: no action is left to value")
    meters = np.zeros((len(seeds), STEPS_PER_EPISODE + 1, len(METERS)))
    actions = np.zeros((len(seeds), STEPS_PER_EPISODE), dtype=np.int64)
    row = 0
    for s in states:  # the weeks side by side, padded after their own step (the replay ignores it)
        rows = slice(row, row + len(s.seeds))
        meters[rows, : s.step + 1] = s.meters_history
        actions[rows, : s.step] = s.action_history
        row = rows.stop
    mu, cov = posterior_along(meters, actions, steps)
    factors = posterior_factors(mu)
    values = np.empty((len(seeds), len(ACTIONS)))
    for step in np.unique(steps):  # lockstep within a step, as the agent plays
        rows = np.flatnonzero(steps == step)
        f = factors[rows]
        values[rows] = monte_carlo_values(profile_tensor(f), meters[rows, step], int(step), f, grade.score_to_go(f),
                                          noise_paths(seeds[rows], int(step), paths, noise_seed, noise_sd),
                                          rollout_policy)
        if info_weight:
            values[rows] += information_bonus(cov[rows], meters[rows, step], int(step), info_weight)
    return values
