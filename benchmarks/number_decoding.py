"""How a student writes its numbers: greedy argmax (lost), the median of its distribution over numbers
(the product's greedy decoding, `training/number_decoding.py`), or the mean (lost), on held-out training
seeds; the two lost modes live only here.

    python benchmarks/number_decoding.py --students NAME=MODEL_DIR,... [--seeds 9500-9699] [--modes argmax,median,mean]
        [--repeats N]

Each student plays the seeds (continuous training seeds the recipes never train on: a tuning set) once
per mode; per student and mode it prints the v3 score and final belief MAE, and the paired difference
from argmax per week with its standard error, and the seconds of play (with `--repeats N`, the modes
played N times in turn, each time's seconds: the machine is noisy). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import time

import numpy as np

MODES = ("argmax", "median", "mean", "median_sum", "median_nosum", "mean_sum")


def mean_processor(tokenizer):
    """The mean instead of the median: the number of the greedy token's kind nearest the expected value."""
    import torch
    from transformers import LogitsProcessor

    from rhythm_core.training.number_decoding import number_kinds

    kinds = [(torch.tensor(ids), torch.tensor(values)) for ids, values in number_kinds(tokenizer)]

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


def numbers_as(mode: str):
    """A context in which greedy play writes numbers as `mode` says: "median" is the product's decoding
    (each belief the previous one plus the increment where the checkpoint learned the linear chain);
    "median_sum" / "median_nosum" the median with the belief's sum on / off whatever the checkpoint
    says; "argmax" (plain greedy), "mean" and "mean_sum" (the mean, each belief the sum) swap the
    product's hook (`generation.number_processors`)."""
    from unittest import mock

    from transformers import LogitsProcessorList

    from rhythm_core.training import generation

    product = generation.number_processors
    if mode == "median":
        return contextlib.nullcontext()
    if mode in ("median_sum", "median_nosum"):
        return mock.patch.object(generation, "number_processors",
                                 lambda sampling, tokenizer, _sum=False: product(sampling, tokenizer, mode == "median_sum"))
    if mode == "argmax":
        return mock.patch.object(generation, "number_processors", lambda sampling, tokenizer, _sum=False: None)
    if mode == "mean":
        return mock.patch.object(generation, "number_processors",
                                 lambda sampling, tokenizer, _sum=False: LogitsProcessorList([mean_processor(tokenizer)]))
    if mode == "mean_sum":  # the increments as the mean, each belief their sum
        from rhythm_core.training.number_decoding import belief_sum_processor

        return mock.patch.object(generation, "number_processors", lambda sampling, tokenizer, _sum=False: LogitsProcessorList(
            [mean_processor(tokenizer), belief_sum_processor(tokenizer)]))
    raise ValueError(f"unknown mode {mode!r}; allowed: {', '.join(MODES)}")


def play(model_dir: str, seeds: np.ndarray, mode: str) -> tuple[np.ndarray, np.ndarray, float]:
    """Per-week v3 and belief MAE in one mode, and the seconds of play."""
    from rhythm_core.agents.rollout import rollout
    from rhythm_core.graders import get_grader
    from rhythm_core.training.generation import SamplingConfig
    from rhythm_core.training.policy import LLMPolicyAgent

    agent = LLMPolicyAgent.from_checkpoint(model_dir, sampling=SamplingConfig(temperature=0.0))
    started = time.perf_counter()
    with numbers_as(mode):
        episodes = rollout(agent, "continuous", seeds)
    wall = time.perf_counter() - started
    return get_grader("v3").grade_batch(episodes)[0], np.asarray(episodes.belief_mae(), dtype=float), wall


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--students", required=True, help="name=model_dir,...")
    p.add_argument("--seeds", default="9500-9699", help="continuous training seeds (a tuning set)")
    p.add_argument("--modes", default="argmax,median,mean")
    p.add_argument("--repeats", type=int, default=1, help="play the modes this many times in turn, for their seconds")
    args = p.parse_args(argv)

    from rhythm_core.env.conditions import parse_seeds

    seeds = np.asarray(parse_seeds(args.seeds))
    modes = args.modes.split(",")
    print("| student | mode | v3 | belief MAE | Δ v3 from argmax | Δ belief MAE | play s |")
    print("|---|---|---|---|---|---|---|")
    for spec in args.students.split(","):
        name, model_dir = spec.split("=", 1)
        order = ["argmax", *[m for m in modes if m != "argmax"]]
        runs, walls = {}, {mode: [] for mode in order}
        for _ in range(max(1, args.repeats)):
            for mode in order:
                v3, mae, wall = play(model_dir, seeds, mode)
                runs[mode] = (v3, mae)
                walls[mode].append(f"{wall:.1f}")
        base_v3, base_mae = runs["argmax"]
        for mode, (v3, mae) in runs.items():
            dv, dm = v3 - base_v3, mae - base_mae
            print(f"| {name} | {mode} | {v3.mean():.4f} | {np.nanmean(mae):.4f} | {dv.mean():+.4f} ± "
                  f"{dv.std(ddof=1) / np.sqrt(len(dv)):.4f} | {np.nanmean(dm):+.4f} | {' / '.join(walls[mode])} |", flush=True)


if __name__ == "__main__":
    main()
