"""Does a student follow its evidence chain in its own weeks? The student plays greedily; the chain its
dataset's answers were written with is walked over the same weeks (the observations the student's
own actions produced); per step, the mean distance between the student's stated belief and the
chain's, and each one's final belief error from the person.

    python benchmarks/chain_following.py NAME=MODEL_DIR=DATASET_DIR ... [--window 0] [--conditions continuous,ood]

A student that follows its chain in the teacher's weeks (the teacher-forced probe of
`distillation.py`) can still leave it in its own; this says at which step. Prints figures; asserts
nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STEPS_SHOWN = (1, 2, 4, 8, 14, 27)


def chain_following(model_dir: str, dataset_dir: str, condition: str, seeds: np.ndarray) -> dict:
    """Per-step mean |stated − chain| (T,), and the final belief MAE of the student and of the chain."""
    import datasets

    from rhythm_core.agents.rollout import rollout
    from rhythm_core.data.sft_dataset import evidence_readout
    from rhythm_core.env import VectorRhythmEnv
    from rhythm_core.training.generation import SamplingConfig
    from rhythm_core.training.policy import LLMPolicyAgent

    readout = evidence_readout(datasets.load_from_disk(dataset_dir))
    if readout is None:
        raise SystemExit(f"{dataset_dir}: not written with the evidence reasoning, no chain to follow")
    episodes = rollout(LLMPolicyAgent.from_checkpoint(model_dir, sampling=SamplingConfig(temperature=0.0)),
                       condition, seeds)
    env = VectorRhythmEnv(condition)
    obs, _ = env.reset(seeds)
    histories = [[] for _ in seeds]
    for t in range(episodes.actions.shape[1]):
        for n in range(len(seeds)):
            histories[n].append(obs.item(n))
        obs, *_ = env.step(episodes.actions[:, t])
    chain = np.stack([readout.chain(h)[1] for h in histories])
    return {"distance": np.abs(episodes.beliefs - chain).mean(axis=(0, 2)),
            "student": float(np.abs(episodes.beliefs[:, -1] - episodes.true_belief).mean()),
            "chain": float(np.abs(chain[:, -1] - episodes.true_belief).mean())}


def main(argv=None) -> None:
    from rhythm_core.env.conditions import parse_seeds
    from rhythm_core.evaluation.rollouts import evaluation_window

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("students", nargs="+", help="NAME=MODEL_DIR=DATASET_DIR (the dataset it was trained on)")
    p.add_argument("--window", type=int, default=0)
    p.add_argument("--conditions", default="continuous,ood")
    args = p.parse_args(argv)
    print("| student | condition | " + " | ".join(f"distance at t={t}" for t in STEPS_SHOWN)
          + " | final belief MAE: student | chain in its weeks |")
    print("|---|---|" + "---|" * (len(STEPS_SHOWN) + 2))
    for spec in args.students:
        name, model_dir, dataset_dir = spec.split("=", 2)
        for condition in args.conditions.split(","):
            seeds = np.asarray(parse_seeds(evaluation_window(args.window)[condition]))
            figures = chain_following(model_dir, dataset_dir, condition, seeds)
            cells = " | ".join(f"{figures['distance'][t]:.3f}" for t in STEPS_SHOWN)
            print(f"| {name} | {condition} | {cells} | {figures['student']:.3f} | {figures['chain']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
