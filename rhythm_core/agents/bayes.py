"""The Bayesian teacher: infers the hidden profile from anomalies and acts on its posterior.

Inference. The transition model is linear in the centred profile x = factors - 0.5 given the state
(see dynamics.py), so the anomaly of each meter is y = H x + noise, with H the model's Jacobian at
the pre-step state. With a Gaussian prior moment-matched to the in-distribution population, the
posterior is exactly a Kalman update per step. Meters that hit 0 or 1 (clipped) are not used: their
change says nothing linear about the person. The teacher always uses the in-distribution prior, so
on OOD profiles it is honestly mis-specified.

Acting. The posterior-mean profile drives the same lookahead planner as the oracle, plus a bonus
for the expected reduction of belief variance an action would bring (information seeking), which
is largest early in the week.

Reasoning. Each step's text is written from the numbers the update actually used: the observed
anomaly, which factor it moved and by how much, the belief with its uncertainty, and why the
chosen action won.
"""

from __future__ import annotations

import numpy as np

from ..env import BatchObservation, VectorRhythmEnv
from ..env.dynamics import NOISE_SD, neutral_delta, profile_jacobian, profile_tensor
from ..env.profiles import gaussian_prior
from ..env.spec import ACTIONS, BELIEF_DIMS, BELIEF_WEIGHTS, FACTORS, METERS, SLOTS, STEPS_PER_EPISODE, true_belief
from .base import Agent, Decision
from .planner import action_values

INFO_WEIGHT = 0.5
_W = BELIEF_WEIGHTS


class BayesAgent(Agent):
    name = "bayes"
    emits_belief = True

    def __init__(self, explain: bool = False, info_weight: float = INFO_WEIGHT):
        self.explain = explain
        self.info_weight = info_weight

    def reset(self, env: VectorRhythmEnv) -> None:
        super().reset(env)
        n = env.num_envs
        mean, cov = gaussian_prior("continuous")
        self.mu = np.zeros((n, len(FACTORS))) + (mean - 0.5)
        self.cov = np.broadcast_to(cov, (n, *cov.shape)).copy()
        self._prev_meters = None
        self._prev_action = None
        self._moved: list[str] = [""] * n

    # ---- inference --------------------------------------------------------------------------
    def _update(self, obs: BatchObservation) -> None:
        if obs.step == 0 or self._prev_meters is None:
            return
        before, acts, slot = self._prev_meters, self._prev_action, (obs.step - 1) % len(SLOTS)
        h = profile_jacobian(acts, slot, before)
        neutral_raw = before + neutral_delta(acts, slot, before)
        usable = (obs.meters > 0.0) & (obs.meters < 1.0) & (neutral_raw >= 0.0) & (neutral_raw <= 1.0)
        h = h * usable[:, :, None]
        y = obs.anomaly * usable
        hs = h @ self.cov  # (N, 5, 9)
        s = hs @ h.transpose(0, 2, 1) + NOISE_SD**2 * np.eye(len(METERS))
        gain = np.linalg.solve(s, hs).transpose(0, 2, 1)  # (N, 9, 5)
        innovation = y - np.einsum("njf,nf->nj", h, self.mu)
        old_mu = self.mu
        self.mu = self.mu + np.einsum("nfj,nj->nf", gain, innovation)
        self.cov = self.cov - gain @ hs
        self.cov = 0.5 * (self.cov + self.cov.transpose(0, 2, 1))
        if self.explain:
            self._moved = _describe_update(acts, obs.anomaly, usable, gain, innovation, old_mu, self.mu)

    def factor_estimate(self) -> np.ndarray:
        return np.clip(self.mu + 0.5, 0.0, 1.0)

    def belief(self) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean belief (N, 3) and its standard deviation (N, 3)."""
        mean = np.clip(true_belief(self.mu + 0.5), 0.0, 1.0)
        var = np.einsum("df,nfg,dg->nd", _W, self.cov, _W)
        return mean, np.sqrt(np.maximum(var, 0.0))

    def information_gain(self, meters: np.ndarray, slot: int) -> np.ndarray:
        """Expected reduction of the summed belief variance for each action (N, 10)."""
        n, a = len(meters), len(ACTIONS)
        h = profile_jacobian(np.tile(np.arange(a), n), slot, np.repeat(meters, a, axis=0))
        cov = np.repeat(self.cov, a, axis=0)
        g = h @ cov @ _W.T  # (N*A, 5, 3)
        s = h @ cov @ h.transpose(0, 2, 1) + NOISE_SD**2 * np.eye(len(METERS))
        reduction = np.einsum("nji,nji->n", g, np.linalg.solve(s, g))
        return reduction.reshape(n, a)

    # ---- acting -----------------------------------------------------------------------------
    def act(self, obs: BatchObservation) -> Decision:
        self._update(obs)
        factors = self.factor_estimate()
        values = action_values(profile_tensor(factors), obs.meters, obs.step, factors)
        remaining = (STEPS_PER_EPISODE - obs.step) / STEPS_PER_EPISODE
        info = self.information_gain(obs.meters, obs.slot)
        total = values + self.info_weight * remaining * info
        actions = total.argmax(axis=1)
        belief, sd = self.belief()
        reasoning = None
        if self.explain:
            reasoning = [
                _reasoning(obs, n, self._moved[n], belief[n], sd[n], actions[n], values[n], info[n])
                for n in range(len(obs))
            ]
        self._prev_meters = obs.meters.copy()
        self._prev_action = actions
        return Decision(actions=actions, beliefs=belief, reasoning=reasoning)

    def observe_actions(self, actions: np.ndarray) -> None:
        """The actions really taken after the last `act` when someone else acted (a student plays,
        the teacher follows): the next update explains the anomalies by these."""
        self._prev_action = np.asarray(actions, dtype=np.int64).copy()


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


def _reasoning(obs, n, moved, belief, sd, action, values, info) -> str:
    day, slot = obs.step // len(SLOTS) + 1, SLOTS[obs.slot]
    parts = [f"Day {day} {slot}."]
    if moved:
        parts.append(moved)
    parts.append(
        "Belief: " + ", ".join(f"{d} {b:.2f}±{s:.2f}" for d, b, s in zip(BELIEF_DIMS, belief, sd)) + "."
    )
    best_value = int(np.argmax(values))
    if action == best_value:
        parts.append(f"{ACTIONS[action]} has the best expected value for this person right now.")
    else:
        parts.append(
            f"{ACTIONS[action]} is close in value to {ACTIONS[best_value]} "
            f"({values[action] - values[best_value]:+.3f}) and tells me more about them."
        )
    return " ".join(parts)
