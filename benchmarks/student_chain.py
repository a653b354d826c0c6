"""Where a student's belief error comes from: its own arithmetic, or the evidence read-out it learned.

    python benchmarks/student_chain.py --model RUN/sft_checkpoint/<v>/model --dataset RUN/sft_dataset/<v> \\
        [--condition continuous --seeds 9500-9599]

Plays the student greedily, then recomputes the dataset's read-out chain (`EvidenceReadout.chain`) on
the observations the student itself saw. At the week's end it prints the student's belief MAE against
the truth, the chain's against the truth (what following the chain exactly would give under the
student's actions) and the student's against the chain (its own error), and that distance at steps
1, 2, 4, 8, 14 and 27 (where the student leaves its chain). Per step it compares each
stated belief with "previous stated belief + the chain's increment for this step" (for an innovation
chain the increment the chain took from its own previous belief) and prints the mean
signed error by the band the previous belief lies in: a student shy of rare numbers pulls beliefs
beyond 0.3 / 0.7 back towards 0.5. Per increment the chain takes it prints the mean increment the
student wrote and how often it wrote the chain's exactly (where its increments fall short). The
default seeds are the tuning set (continuous training seeds); other conditions' seeds are evaluation
seeds, to look at, not to tune on. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BANDS = ((0.0, 0.1), (0.1, 0.3), (0.3, 0.7), (0.7, 0.9), (0.9, 1.01))
STEPS_SHOWN = (1, 2, 4, 8, 14, 27)


def increment_table(written: np.ndarray, chain: np.ndarray) -> dict:
    """Per increment the chain takes (on the grid, -0.04 to +0.04, then any of size 0.05 or more), how
    many steps, the mean increment the student wrote (its stated belief's change: the increment itself
    wherever the belief is their sum and not clipped) and how often exactly the chain's."""
    table = {}
    for value in np.arange(-4, 5) / 100:
        at = np.isclose(chain, value) & ~np.isnan(written)
        if at.any():
            table[f"{value:+.2f}"] = {"steps": int(at.sum()), "mean_written": round(float(written[at].mean()), 4),
                                      "exact": round(float(np.isclose(written[at], value).mean()), 3)}
    large = (np.abs(chain) >= 0.05) & ~np.isnan(written)
    if large.any():  # the shortfall along the chain's direction
        table["|x|>=0.05"] = {"steps": int(large.sum()),
                              "mean_shortfall": round(float(np.mean(np.abs(chain[large]) - written[large] * np.sign(chain[large]))), 4)}
    return table


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--dataset", required=True, help="the sft_dataset the model was trained on (its read-out)")
    p.add_argument("--condition", default="continuous")
    p.add_argument("--seeds", default="9500-9599")
    args = p.parse_args(argv)

    import datasets

    from rhythm_core.agents.rollout import rollout
    from rhythm_core.data.sft_dataset import evidence_readout
    from rhythm_core.env import VectorRhythmEnv
    from rhythm_core.env.conditions import parse_seeds
    from rhythm_core.env.spec import STEPS_PER_EPISODE
    from rhythm_core.training.generation import SamplingConfig
    from rhythm_core.training.policy import LLMPolicyAgent

    readout = evidence_readout(datasets.load_from_disk(args.dataset))
    if readout is None:
        raise SystemExit(f"{args.dataset}: not an 'evidence' dataset; it has no read-out")
    seeds = np.asarray(parse_seeds(args.seeds))
    episodes = rollout(LLMPolicyAgent.from_checkpoint(args.model, sampling=SamplingConfig(temperature=0.0)),
                       args.condition, seeds)
    # The observations the student saw, replayed from its actions.
    env = VectorRhythmEnv(args.condition)
    obs, _ = env.reset(seeds)
    seen = [[] for _ in seeds]
    for t in range(STEPS_PER_EPISODE):
        for n in range(len(seeds)):
            seen[n].append(obs.item(n))
        obs, *_ = env.step(episodes.actions[:, t])
    chains = [readout.chain(history) for history in seen]
    increments = np.array([c[0] for c in chains])
    chain_beliefs = np.array([c[1] for c in chains])
    chain_final = chain_beliefs[:, -1]
    stated, truth = episodes.beliefs, episodes.true_belief

    def mae(a, b):
        return round(float(np.nanmean(np.abs(a - b))), 4)

    # what each answer should say given the student's own previous belief (NaN after an invalid answer)
    expected = np.clip(stated[:, :-1] + increments[:, 1:], 0.0, 1.0)
    error, previous = stated[:, 1:] - expected, stated[:, :-1]
    bands = {}
    for lo, hi in BANDS:
        inside = (previous >= lo) & (previous < hi)
        bands[f"{lo:.1f}-{min(hi, 1.0):.1f}"] = {
            "share": round(float(inside.mean()), 4),
            "mean_error": round(float(np.nanmean(error[inside])), 4) if inside.any() else None,
            "mean_abs_error": round(float(np.nanmean(np.abs(error[inside]))), 4) if inside.any() else None}
    print(json.dumps({
        "condition": args.condition, "seeds": args.seeds,
        "student_vs_truth": mae(stated[:, -1], truth), "chain_vs_truth": mae(chain_final, truth),
        "student_vs_chain": mae(stated[:, -1], chain_final),
        "student_vs_chain_by_step": {t: mae(stated[:, t], chain_beliefs[:, t]) for t in STEPS_SHOWN},
        "step_error_by_previous_belief": bands,
        "written_increment_by_chain_increment": increment_table(np.diff(stated, axis=1), increments[:, 1:]),
    }))


if __name__ == "__main__":
    main()
