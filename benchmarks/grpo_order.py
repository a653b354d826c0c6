"""GRPO's prompt order: runs of prompts that share a step of the week (the default) against a plain
shuffle, from one SFT checkpoint, side by side in one run.

action_value finishes each scored answer's week with the SFT student; the completions of one GRPO
step are scored in one call, and states at the same (condition, step) share one lockstep play. With
prompts in runs of one step a call plays one batch; shuffled, one per distinct step. Prints each
variant's GRPO wall seconds (the gate included), its gate figure and, per evaluation window and
condition, the paired GRPO - SFT difference (greedy, v3) with its standard error.

    python benchmarks/grpo_order.py --dataset RUN/sft_dataset/<v> --sft RUN/sft_checkpoint/<v>/model \
        --out /tmp/grpo_order [--windows 0,5] [--max-steps 20] [--batch 16] [--orders by_step,shuffled] [--seeds 0,1,2]

RUN is an output folder of `rhythm distill` (or the Dagster storage) with the dataset and the SFT
checkpoint trained on it.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from report import print_markdown  # benchmarks/ is the script's own folder

from rhythm_core.env.conditions import parse_seeds
from rhythm_core.evaluation.rollouts import evaluation_window
from rhythm_core.training import grpo
from rhythm_core.training.validation import compare_students


def shuffled(rows, per_step, seed):
    """The order before: one seeded shuffle, steps mixed within a GRPO step."""
    return [rows[i] for i in np.random.default_rng(seed).permutation(len(rows))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--sft", required=True, help="the SFT checkpoint's model directory")
    parser.add_argument("--out", required=True)
    parser.add_argument("--windows", default="0,5", help="evaluation windows (rollouts.evaluation_window)")
    parser.add_argument("--max-steps", type=int, default=grpo.GRPORunConfig.max_steps)
    parser.add_argument("--batch", type=int, default=grpo.GRPORunConfig.per_device_train_batch_size,
                        help="completions per GRPO step (a multiple of num_generations)")
    parser.add_argument("--orders", default="by_step,shuffled")
    parser.add_argument("--seeds", default="0", help="GRPO seeds, comma-separated: each variant runs once per seed")
    args = parser.parse_args()

    by_step = grpo.order_by_step
    rows = []
    runs = [(name, order, int(seed)) for seed in args.seeds.split(",")
            for name, order in (("by_step", by_step), ("shuffled", shuffled)) if name in args.orders.split(",")]
    for name, order, seed in runs:
        # build_prompt_dataset looks order_by_step up at call time; the shuffled order is no product option
        grpo.order_by_step = order
        started = time.perf_counter()
        result = grpo.run_grpo(grpo.GRPORunConfig(max_steps=args.max_steps, per_device_train_batch_size=args.batch,
                                                  report_to="none", seed=seed),
                               args.dataset, args.sft, Path(args.out) / f"{name}_seed{seed}")
        wall = time.perf_counter() - started
        gate = result["validation"]
        row = {"variant": name, "steps": args.max_steps, "batch": args.batch, "seed": seed,
               "grpo_s": round(wall, 1), "gate_s": gate["wall_s"],
               "gate": f"{gate['difference']:+.4f} ± {gate['difference_se']:.4f}",
               "mean_kl": round(result["mean_kl"], 4), "zero_std": result["mean_frac_groups_zero_reward_std"]}
        for window in (int(w) for w in args.windows.split(",")):
            for condition, spec in evaluation_window(window).items():
                paired = compare_students((name, result["model_dir"]), ("sft", args.sft),
                                          {condition: list(parse_seeds(spec))})
                row[f"w{window}_{condition}"] = f"{paired['difference']:+.3f} ± {paired['difference_se']:.3f}"
        print(json.dumps(row), flush=True)
        rows.append(row)
    grpo.order_by_step = by_step
    print_markdown(rows)


if __name__ == "__main__":
    main()
