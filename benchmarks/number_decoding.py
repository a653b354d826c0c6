"""How a student writes its numbers: greedy argmax, the median of its distribution over numbers (the
product's `SamplingConfig.numbers`), or the mean (lost; lives only here), on held-out training seeds.

    python benchmarks/number_decoding.py --students NAME=MODEL_DIR,... [--seeds 9500-9699] [--modes argmax,median,mean]

Each student plays the seeds (continuous training seeds the recipes never train on: a tuning set) once
per mode; per student and mode it prints the v3 score and final belief MAE, and the paired difference
from argmax per week with its standard error, and the share of number tokens the mode changed. Prints
figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import functools
import time

import numpy as np


def mean_processor(tokenizer):
    """The mean instead of the median: the number of the greedy token's kind nearest the expected value."""
    import torch
    from transformers import LogitsProcessor

    from rhythm_core.training.number_decoding import _number_kinds

    kinds = [(torch.tensor(ids), torch.tensor(values)) for ids, values in _number_kinds(tokenizer)]

    class NumberMean(LogitsProcessor):
        def __call__(self, input_ids, scores):
            top = scores.argmax(dim=1)
            for ids, values in kinds:
                rows = torch.isin(top, ids).nonzero().flatten()
                if len(rows):
                    p = torch.softmax(scores[rows][:, ids].float(), dim=1)
                    chosen = ids[((p * values).sum(dim=1, keepdim=True) - values).abs().argmin(dim=1)]
                    scores[rows, chosen] = scores[rows].max(dim=1).values + 1.0
            return scores

    return NumberMean()


def play(model_dir: str, seeds: np.ndarray, mode: str) -> tuple[np.ndarray, np.ndarray, list[int], float]:
    """Per-week v3 and belief MAE, and the student's number tokens (to count changes), in one mode."""
    from transformers import LogitsProcessorList

    from rhythm_core.agents.rollout import rollout
    from rhythm_core.graders import get_grader
    from rhythm_core.training.generation import SamplingConfig
    from rhythm_core.training.policy import LLMPolicyAgent

    agent = LLMPolicyAgent.from_checkpoint(
        model_dir, sampling=SamplingConfig(temperature=0.0, numbers="median" if mode == "median" else "argmax"))
    if mode == "mean":
        agent.model.generate = functools.partial(agent.model.generate,
                                                 logits_processor=LogitsProcessorList([mean_processor(agent.tokenizer)]))
    started = time.perf_counter()
    episodes = rollout(agent, "continuous", seeds)
    wall = time.perf_counter() - started
    return get_grader("v3").grade_batch(episodes)[0], np.asarray(episodes.belief_mae(), dtype=float), \
        episodes.beliefs.reshape(-1).tolist(), wall


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--students", required=True, help="name=model_dir,...")
    p.add_argument("--seeds", default="9500-9699", help="continuous training seeds (a tuning set)")
    p.add_argument("--modes", default="argmax,median,mean")
    args = p.parse_args(argv)

    from rhythm_core.env.conditions import parse_seeds

    seeds = np.asarray(parse_seeds(args.seeds))
    modes = args.modes.split(",")
    print("| student | mode | v3 | belief MAE | Δ v3 from argmax | Δ belief MAE | stated beliefs changed | play s |")
    print("|---|---|---|---|---|---|---|---|")
    for spec in args.students.split(","):
        name, model_dir = spec.split("=", 1)
        runs = {mode: play(model_dir, seeds, mode) for mode in ["argmax", *[m for m in modes if m != "argmax"]]}
        base_v3, base_mae, base_beliefs, _ = runs["argmax"]
        for mode, (v3, mae, beliefs, wall) in runs.items():
            dv, dm = v3 - base_v3, mae - base_mae
            changed = np.mean(np.asarray(beliefs) != np.asarray(base_beliefs)) if len(beliefs) == len(base_beliefs) else float("nan")
            print(f"| {name} | {mode} | {v3.mean():.4f} | {np.nanmean(mae):.4f} | {dv.mean():+.4f} ± "
                  f"{dv.std(ddof=1) / np.sqrt(len(dv)):.4f} | {np.nanmean(dm):+.4f} | {changed:.1%} | {wall:.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()
