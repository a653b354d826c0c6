"""How well the "evidence" chain (rhythm_core/teacher/evidence.py) infers the person, next to the
Bayesian teacher and a constant, when the actions are the teacher's or another policy's. Prints
figures; asserts nothing.

    python benchmarks/evidence_readout.py

The chain is what a student trained with `reasoning: evidence` is taught to write: its final
belief is the ceiling such a student can reach by following it exactly, and the rows under the
heuristic's and random actions show how far it holds when the student acts differently from the
teacher it learned from. Also prints how predictable the teacher's own per-step belief change is
from the step alone (a linear fit on the action and the anomaly), the target `reasoning: update`
asked a student to learn.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rhythm_core.agents import BayesAgent, heuristic_actions  # noqa: E402
from rhythm_core.env import VectorRhythmEnv  # noqa: E402
from rhythm_core.env.conditions import parse_seeds  # noqa: E402
from rhythm_core.env.spec import ACTIONS, STEPS_PER_EPISODE  # noqa: E402
from rhythm_core.evaluation.rollouts import DEFAULT_EVAL_SEEDS  # noqa: E402
from rhythm_core.teacher.evidence import evidence_chain, evidence_weights  # noqa: E402


def play(condition: str, seeds, policy: str):
    """Final beliefs of the chain and the teacher (which watches whoever acts), and the truth."""
    env = VectorRhythmEnv(condition)
    obs, _ = env.reset(seeds)
    teacher = BayesAgent()
    teacher.reset(env)
    rng = np.random.default_rng(0)
    histories, final = [[] for _ in seeds], None
    for _ in range(STEPS_PER_EPISODE):
        for n in range(len(seeds)):
            histories[n].append(obs.item(n).to_dict())
        decision = teacher.act(obs)
        final = decision.beliefs
        if policy == "teacher":
            actions = decision.actions
        else:
            actions = (heuristic_actions(obs.meters, obs.slot) if policy == "heuristic"
                       else rng.integers(0, len(ACTIONS), len(seeds)))
            teacher.observe_actions(actions)
        obs, *_ = env.step(actions)
    chain = np.array([evidence_chain(h)[1][-1] for h in histories])
    return chain, final, env.true_belief


def update_predictability(seeds) -> tuple[float, float]:
    """Mean |error| of a linear fit (action x anomaly) of the teacher's 2-decimal belief change, on
    held-out weeks, against always predicting no change."""
    def steps(chunk):
        env = VectorRhythmEnv("continuous")
        obs, _ = env.reset(chunk)
        teacher = BayesAgent()
        teacher.reset(env)
        x, y, previous, acted = [], [], None, None
        for _ in range(STEPS_PER_EPISODE):
            decision = teacher.act(obs)
            if previous is not None:
                f = np.zeros((len(chunk), len(ACTIONS), 6))
                f[np.arange(len(chunk)), acted, :5] = np.round(obs.anomaly, 2)
                f[np.arange(len(chunk)), acted, 5] = 1.0
                x.append(f.reshape(len(chunk), -1))
                y.append(np.round(decision.beliefs, 2) - np.round(previous, 2))
            previous, acted = decision.beliefs.copy(), decision.actions.copy()
            obs, *_ = env.step(decision.actions)
        return np.concatenate(x), np.concatenate(y)

    x, y = steps(np.asarray(seeds[:-200]))
    xt, yt = steps(np.asarray(seeds[-200:]))
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    return float(np.abs(np.round(xt @ coef, 2) - yt).mean()), float(np.abs(yt).mean())


def main() -> None:
    start = time.perf_counter()
    evidence_weights()
    print(f"read-out fitted on continuous training seeds 1000-4999 in {time.perf_counter() - start:.1f} s")
    print("| condition | actions | chain final belief MAE | teacher | constant 0.5 |")
    print("|---|---|---|---|---|")
    for condition, spec in DEFAULT_EVAL_SEEDS.items():
        seeds = np.asarray(parse_seeds(spec))
        for policy in ("teacher", "heuristic", "random"):
            chain, teacher, truth = play(condition, seeds, policy)
            print(f"| {condition} | {policy} | {np.abs(chain - truth).mean():.3f} | {np.abs(teacher - truth).mean():.3f} "
                  f"| {np.abs(0.5 - truth).mean():.3f} |")
    err, zero = update_predictability(np.arange(5000, 6700))
    print(f"teacher's own per-step change from the step alone (linear, action x anomaly): |error| {err:.4f} "
          f"against {zero:.4f} for 'no change' ({1 - err / zero:.0%} less)")


if __name__ == "__main__":
    main()
