"""The Bayesian teacher: infers the hidden profile from anomalies and acts on its posterior.

Inference. The transition model is linear in the centred profile x = factors - 0.5 given the state
(see dynamics.py), so the anomaly of each meter is y = H x + noise, with H the model's Jacobian at
the pre-step state. With a Gaussian prior moment-matched to the in-distribution population, the
posterior is exactly a Kalman update per step. Meters that hit 0 or 1 (clipped) are not used: their
change says nothing linear about the person. The teacher always uses the in-distribution prior, so
on OOD profiles it is honestly mis-specified.

Acting. The posterior-mean profile drives the same lookahead planner as the oracle, plus a bonus for
the expected reduction of belief variance an action would bring (information seeking), which is
largest early in the week. `bayes`, the teacher the recipe distils, scores the planner's paths with
the planner's own utility; `bayes_v3` with grader v3's own score-to-go, the grade it is judged by:
it plays better, but the demo's student distilled from it scored lower on the default evaluation
seeds, its belief error above the teacher's (benchmarks/README.md, D2). The search teacher (search.py) keeps this inference and replaces the
planner's values with Monte-Carlo ones scored by the grader.

Reasoning. Each step's text is written from the numbers the update actually used: the observed
anomaly, which factor it moved and by how much, the belief with its uncertainty, and why the
chosen action won.
"""

from __future__ import annotations

import numpy as np

from rhythm_env.graders import DEFAULT_GRADER, get_grader
from rhythm_env.sim import BatchObservation, VectorRhythmEnv
from rhythm_env.sim.dynamics import NOISE_SD, neutral_delta, profile_jacobian, profile_tensor
from rhythm_env.sim.profiles import gaussian_prior
from rhythm_env.sim.spec import (
    ACTIONS,
    BELIEF_DIMS,
    BELIEF_WEIGHTS,
    FACTORS,
    METERS,
    SLOTS,
    STEPS_PER_EPISODE,
    true_belief,
)

from .base import Agent, Decision
from .planner import action_values

INFO_WEIGHT = 0.5
PLAN_GRADER = DEFAULT_GRADER  # the grade the teacher's planner maximises
_W = BELIEF_WEIGHTS


def kalman_update(mu, cov, before, actions, slot, after, anomaly):
    """One exact update of the posterior (mu (N, 9) centred, cov (N, 9, 9)) from the step that took
    `actions` in `slot` from meters `before` to `after` with `anomaly` (N, 5). Returns (mu, cov, gain,
    innovation, usable): a clipped meter (or one whose neutral change would have been) is not used."""
    h = profile_jacobian(actions, slot, before)
    neutral_raw = before + neutral_delta(actions, slot, before)
    usable = (after > 0.0) & (after < 1.0) & (neutral_raw >= 0.0) & (neutral_raw <= 1.0)
    h = h * usable[:, :, None]
    y = anomaly * usable
    hs = h @ cov  # (N, 5, 9)
    s = hs @ h.transpose(0, 2, 1) + NOISE_SD**2 * np.eye(len(METERS))
    gain = np.linalg.solve(s, hs).transpose(0, 2, 1)  # (N, 9, 5)
    innovation = y - np.einsum("njf,nf->nj", h, mu)
    mu = mu + np.einsum("nfj,nj->nf", gain, innovation)
    cov = cov - gain @ hs
    cov = 0.5 * (cov + cov.transpose(0, 2, 1))
    return mu, cov, gain, innovation, usable


def prior(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The in-distribution prior for n people: centred mean (n, 9) and covariance (n, 9, 9)."""
    mean, cov = gaussian_prior("continuous")
    return np.zeros((n, len(FACTORS))) + (mean - 0.5), np.broadcast_to(cov, (n, *cov.shape)).copy()


def posterior_factors(mu: np.ndarray) -> np.ndarray:
    """The profile the teacher acts on: the posterior mean (centred `mu`), clipped to [0, 1]."""
    return np.clip(mu + 0.5, 0.0, 1.0)


def information_gain(cov: np.ndarray, meters: np.ndarray, slot: int) -> np.ndarray:
    """Expected reduction of the summed belief variance (N, 10) each action would bring to posteriors
    with covariance `cov` (N, 9, 9) from `meters` (N, 5) in `slot`."""
    n, a = len(meters), len(ACTIONS)
    h = profile_jacobian(np.tile(np.arange(a), n), slot, np.repeat(meters, a, axis=0))
    cov = np.repeat(cov, a, axis=0)
    g = h @ cov @ _W.T  # (N*A, 5, 3)
    s = h @ cov @ h.transpose(0, 2, 1) + NOISE_SD**2 * np.eye(len(METERS))
    reduction = np.einsum("nji,nji->n", g, np.linalg.solve(s, g))
    return reduction.reshape(n, a)


def information_bonus(cov: np.ndarray, meters: np.ndarray, step: int, info_weight: float = INFO_WEIGHT) -> np.ndarray:
    """What the teachers add to an action's value for what it would reveal (N, 10): the expected
    reduction of belief variance, weighted by `info_weight` and by the share of the week still to come."""
    remaining = (STEPS_PER_EPISODE - step) / STEPS_PER_EPISODE
    return info_weight * remaining * information_gain(cov, meters, step % len(SLOTS))


class BayesAgent(Agent):
    name = "bayes"
    emits_belief = True

    def __init__(self, explain: bool = False, info_weight: float = INFO_WEIGHT, grader: str | None = None):
        self.explain = explain
        self.info_weight = info_weight
        self.grader = None if grader is None else get_grader(grader)

    def reset(self, env: VectorRhythmEnv) -> None:
        super().reset(env)
        n = env.num_envs
        self.mu, self.cov = prior(n)
        self._prev_meters = None
        self._prev_action = None
        self._moved: list[str] = [""] * n

    # ---- inference --------------------------------------------------------------------------
    def _update(self, obs: BatchObservation) -> None:
        if obs.step == 0 or self._prev_meters is None:
            return
        acts, old_mu = self._prev_action, self.mu
        self.mu, self.cov, gain, innovation, usable = kalman_update(
            self.mu, self.cov, self._prev_meters, acts, (obs.step - 1) % len(SLOTS), obs.meters, obs.anomaly)
        if self.explain:
            self._moved = _describe_update(acts, obs.anomaly, usable, gain, innovation, old_mu, self.mu)

    def factor_estimate(self) -> np.ndarray:
        return posterior_factors(self.mu)

    def belief(self) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean belief (N, 3) and its standard deviation (N, 3)."""
        mean = np.clip(true_belief(self.mu + 0.5), 0.0, 1.0)
        var = np.einsum("df,nfg,dg->nd", _W, self.cov, _W)
        return mean, np.sqrt(np.maximum(var, 0.0))

    def information_gain(self, meters: np.ndarray, slot: int) -> np.ndarray:
        """Expected reduction of the summed belief variance for each action (N, 10)."""
        return information_gain(self.cov, meters, slot)

    # ---- acting -----------------------------------------------------------------------------
    def plan(self, obs: BatchObservation, factors: np.ndarray) -> np.ndarray:
        """What each action is worth (N, 10) to people with profiles `factors`, before the bonus."""
        score = None if self.grader is None else self.grader.score_to_go(factors)
        return action_values(profile_tensor(factors), obs.meters, obs.step, factors, score=score)

    def act(self, obs: BatchObservation) -> Decision:
        self._update(obs)
        values = self.plan(obs, self.factor_estimate())
        total = values + information_bonus(self.cov, obs.meters, obs.step, self.info_weight)
        actions = total.argmax(axis=1)
        belief, sd = self.belief()
        reasoning = None
        if self.explain:
            reasoning = [self.explain_choice(obs, n, belief[n], sd[n], actions[n], values[n]) for n in range(len(obs))]
        self._prev_meters = obs.meters.copy()
        self._prev_action = actions
        return Decision(actions=actions, beliefs=belief, reasoning=reasoning)

    def explain_choice(self, obs, n, belief, sd, action, values) -> str:
        """Episode n's text: what this step's evidence moved, the belief, and why `action` won."""
        return " ".join([*inference_text(obs, self._moved[n], belief, sd), _why_planned(action, values)])


def _describe_update(acts, anomaly, usable, gain, innovation, old_mu, new_mu) -> list[str]:
    """Name the factor this step's evidence moved most and the meter whose surprise moved it."""
    texts = []
    for n in range(len(acts)):
        if not usable[n].any():
            texts.append(f"{ACTIONS[acts[n]]} hit a meter limit, so it told me nothing new.")
            continue
        f = int(np.argmax(np.abs(new_mu[n] - old_mu[n])))
        j = int(np.argmax(np.abs(gain[n, f] * innovation[n])))
        texts.append(
            f"After {ACTIONS[acts[n]]}, {METERS[j]} moved {anomaly[n, j]:+.3f} relative to a typical person, "
            f"so I moved {FACTORS[f].replace('_', ' ')} from {old_mu[n, f] + 0.5:.2f} to {new_mu[n, f] + 0.5:.2f}."
        )
    return texts


def inference_text(obs, moved, belief, sd) -> list[str]:
    """The day, what this step's evidence moved (if anything) and the belief with its uncertainty."""
    parts = [f"Day {obs.step // len(SLOTS) + 1} {SLOTS[obs.slot]}."]
    if moved:
        parts.append(moved)
    parts.append("Belief: " + ", ".join(f"{d} {b:.2f}±{s:.2f}" for d, b, s in zip(BELIEF_DIMS, belief, sd)) + ".")
    return parts


def _why_planned(action, values) -> str:
    best_value = int(np.argmax(values))
    if action == best_value:
        return f"{ACTIONS[action]} has the best expected value for this person right now."
    return (f"{ACTIONS[action]} is close in value to {ACTIONS[best_value]} "
            f"({values[action] - values[best_value]:+.3f}) and tells me more about them.")


class BayesV3Agent(BayesAgent):
    """The Bayesian teacher planning with grader v3's own score-to-go (`PLAN_GRADER`)."""

    name = "bayes_v3"

    def __init__(self, explain: bool = False, info_weight: float = INFO_WEIGHT, grader: str | None = PLAN_GRADER):
        super().__init__(explain=explain, info_weight=info_weight, grader=grader)
