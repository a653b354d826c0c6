"""Why the students' OOD belief trails the teacher's: the evidence chain's three-number state.

    python benchmarks/factor_chain.py [--fit-seeds 1000-3699] [--windows 4,6] [--act]

The search teacher plays continuous training weeks (`--fit-seeds`, a dataset's training split) and
the windows' weeks. Two innovation chains (the product's form: per (action, slot), ridge on the shown
anomaly, the anomaly / t, (state - 0.5) / t and a constant, fitted on the teacher's own step-by-step
changes, walked on the 2-decimal grid from the student's point of view) are fitted: `chain3` on the
teacher's stated belief (3 numbers, the product's), `chain9` on its posterior mean of the 9 factors,
the belief then being the profile's fixed mapping of them. Per condition and quarter of within-
dimension factor disagreement (`ood_disagreement.disagreement`) it prints the final-belief MAE from
the person of the teacher and of each chain under the teacher's actions. `--act` then plays the
search teacher acting on a chain's state instead of its posterior (what a student that follows the
chain and acts as its teacher would can reach): on the posterior's belief (3 numbers, each mapped to the prior's
expected factors given it), on chain3's, and on chain9's factors; per condition its v3 score, the
paired difference from the teacher, the part of it that is not the belief's (actions), and the most
disagreeing quarter's. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ood_disagreement import disagreement  # noqa: E402

from rhythm_core.agents import SearchAgent  # noqa: E402
from rhythm_core.agents.rollout import rollout  # noqa: E402
from rhythm_core.env import VectorRhythmEnv  # noqa: E402
from rhythm_core.env.conditions import parse_seeds  # noqa: E402
from rhythm_core.env.profiles import gaussian_prior, sample_factors  # noqa: E402
from rhythm_core.env.spec import ACTIONS, BELIEF_OFFSET, BELIEF_WEIGHTS, SLOTS, STEPS_PER_EPISODE, true_belief  # noqa: E402
from rhythm_core.evaluation.rollouts import evaluation_window  # noqa: E402
from rhythm_core.graders import get_grader  # noqa: E402
from rhythm_core.teacher.evidence import INNOVATION_RIDGE, _evidence  # noqa: E402


def play(condition: str, seeds) -> dict:
    """The search teacher's weeks: each step's shown (action, anomaly), factor posterior mean, stated belief."""
    env = VectorRhythmEnv(condition)
    obs, _ = env.reset(seeds)
    agent = SearchAgent()
    agent.reset(env)
    n, steps = len(seeds), STEPS_PER_EPISODE
    week = {"action": np.zeros((n, steps), dtype=int), "anomaly": np.zeros((n, steps, 5)),
            "factors": np.zeros((n, steps, 9)), "belief": np.zeros((n, steps, 3))}
    for t in range(steps):
        if t > 0:
            for i in range(n):
                week["action"][i, t], week["anomaly"][i, t] = _evidence(obs.item(i), t)
        decision = agent.act(obs)
        week["factors"][:, t], week["belief"][:, t] = agent.factor_estimate(), decision.beliefs
        obs, *_ = env.step(decision.actions)
    week["truth"] = env.true_belief.copy()
    return week


def _features(anomaly, state, t: int) -> np.ndarray:
    return np.concatenate([anomaly, anomaly / t, (state - 0.5) / t, [1.0]])


def fit(week: dict, key: str) -> tuple[np.ndarray, np.ndarray]:
    """(start, coefs (A, S, F, D)) of the innovation chain on the teacher's `key` state."""
    state = week[key]
    rows: dict = {}
    for i in range(state.shape[0]):
        for t in range(1, STEPS_PER_EPISODE):
            cell = rows.setdefault((week["action"][i, t], (t - 1) % len(SLOTS)), ([], []))
            cell[0].append(_features(week["anomaly"][i, t], state[i, t - 1], t))
            cell[1].append(state[i, t] - state[i, t - 1])
    width = 10 + state.shape[2] + 1
    coefs = np.zeros((len(ACTIONS), len(SLOTS), width, state.shape[2]))
    for (a, s), (x, y) in rows.items():
        x, y = np.asarray(x), np.asarray(y)
        coefs[a, s] = np.linalg.solve(x.T @ x + INNOVATION_RIDGE * np.eye(width), x.T @ y)
    return state[:, 0].mean(axis=0), coefs


def chain_step(chain, state: np.ndarray, t: int, action: int, anomaly: np.ndarray) -> np.ndarray:
    """The chain's state after step t's (action, anomaly), on the 2-decimal grid, as a student writes it."""
    increment = np.round(_features(anomaly, state, t) @ chain[1][action, (t - 1) % len(SLOTS)], 2)
    return np.round(np.clip(state + increment, 0.0, 1.0), 2)


def final_beliefs(chain, week: dict, to_belief) -> np.ndarray:
    out = np.zeros((len(week["truth"]), 3))
    for i in range(len(out)):
        state = np.round(chain[0], 2)
        for t in range(1, STEPS_PER_EPISODE):
            state = chain_step(chain, state, t, week["action"][i, t], week["anomaly"][i, t])
        out[i] = to_belief(state)
    return out


def _belief_to_factors(belief: np.ndarray) -> np.ndarray:
    """The in-distribution prior's expected factors given a belief (..., 3)."""
    mean, cov = gaussian_prior("continuous")
    gain = cov @ BELIEF_WEIGHTS.T @ np.linalg.inv(BELIEF_WEIGHTS @ cov @ BELIEF_WEIGHTS.T)
    return np.clip(mean + (belief - BELIEF_OFFSET - BELIEF_WEIGHTS @ mean) @ gain.T, 0.0, 1.0)


class ChainActing(SearchAgent):
    """The search teacher (its inference kept for the information bonus) acting on `kind`'s state:
    "belief3" its own posterior's belief, "chain3" / "chain9" the chain walked over the week so far."""

    def __init__(self, kind: str, chain=None):
        super().__init__()
        self.name, self.kind, self.chain = f"search_on_{kind}", kind, chain

    def reset(self, env) -> None:
        super().reset(env)
        if self.chain is not None:
            self.state = np.tile(np.round(self.chain[0], 2), (env.num_envs, 1))

    def _update(self, obs) -> None:
        super()._update(obs)
        if self.chain is None or obs.step == 0:
            return
        for i in range(len(self.state)):
            self.state[i] = chain_step(self.chain, self.state[i], obs.step, *_evidence(obs.item(i), obs.step))

    def _belief(self) -> np.ndarray:
        if self.kind == "belief3":
            return np.clip(true_belief(self.mu + 0.5), 0.0, 1.0)
        return self.state if self.kind == "chain3" else np.clip(true_belief(self.state), 0.0, 1.0)

    def factor_estimate(self) -> np.ndarray:
        return self.state if self.kind == "chain9" else _belief_to_factors(self._belief())

    def belief(self):
        return self._belief(), super().belief()[1]


def _se(x: np.ndarray) -> float:
    return x.std(ddof=1) / np.sqrt(len(x))


def acting(chains: dict, condition: str, seeds: np.ndarray, top: np.ndarray) -> None:
    """Print the search teacher's row and, paired with it, each player acting on a chain's state (`top`:
    the most disagreeing quarter's weeks)."""
    grader = get_grader("v3")
    reference = None
    for agent in [SearchAgent(), ChainActing("belief3"), *(ChainActing(k, c) for k, c in chains.items())]:
        scores, components = grader.grade_batch(rollout(agent, condition, seeds))
        if reference is None:
            reference = scores, components["belief_skill"]
        delta = scores - reference[0]
        actions = delta - grader.weights["belief_skill"] * (components["belief_skill"] - reference[1])
        print(f"| {condition} | {agent.name} | {scores.mean():.4f} | {delta.mean():+.4f} ± {_se(delta):.4f} | "
              f"{actions.mean():+.4f} ± {_se(actions):.4f} | {delta[top].mean():+.4f} | {actions[top].mean():+.4f} |")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fit-seeds", default="1000-3699")
    p.add_argument("--windows", default="4,6")
    p.add_argument("--act", action="store_true", help="also play the search teacher acting on each chain's state")
    args = p.parse_args(argv)
    train = play("continuous", np.asarray(parse_seeds(args.fit_seeds)))
    chain3, chain9 = fit(train, "belief"), fit(train, "factors")
    tops = {}
    print("| condition | quarter | disagreement | weeks | teacher | chain3 (the product's) | chain9 |\n|---|---|---|---|---|---|---|")
    for condition in ("continuous", "ood"):
        seeds = np.asarray([s for w in args.windows.split(",") for s in parse_seeds(evaluation_window(int(w))[condition])])
        week = play(condition, seeds)
        errors = {"teacher": np.abs(week["belief"][:, -1] - week["truth"]).mean(axis=1),
                  "chain3": np.abs(final_beliefs(chain3, week, lambda b: b) - week["truth"]).mean(axis=1),
                  "chain9": np.abs(final_beliefs(chain9, week, lambda f: np.clip(true_belief(f[None])[0], 0, 1))
                                   - week["truth"]).mean(axis=1)}
        spread = disagreement(sample_factors(condition, seeds))
        edges = [-np.inf, *np.quantile(spread, [0.25, 0.5, 0.75]), np.inf]
        for q in range(4):
            inside = (spread > edges[q]) & (spread <= edges[q + 1])
            print(f"| {condition} | {q + 1} | {spread[inside].mean():.3f} | {inside.sum()} | "
                  + " | ".join(f"{e[inside].mean():.4f}" for e in errors.values()) + " |")
        print(f"| {condition} | all | {spread.mean():.3f} | {len(seeds)} | " + " | ".join(f"{e.mean():.4f}" for e in errors.values()) + " |")
        tops[condition] = (seeds, spread > edges[3])
    if args.act:
        print("\n| condition | player | v3 | Δ from the teacher | actions' part | Δ, most disagreeing quarter | actions' part |"
              "\n|---|---|---|---|---|---|---|")
        for condition, (seeds, top) in tops.items():
            acting({"chain3": chain3, "chain9": chain9}, condition, seeds, top)


if __name__ == "__main__":
    main()
