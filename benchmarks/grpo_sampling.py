"""GRPO sampling the action alone (the product) against sampling the whole answer, from one SFT checkpoint.

    python benchmarks/grpo_sampling.py --dataset RUN/sft_dataset/<v> --sft RUN/sft_checkpoint/<v>/model \
        --out /tmp/grpo_sampling [--variants action,answer] [--seeds 0,1,2] [--windows 0,5] [--threads 1]

In the product each GRPO prompt ends with the SFT student's own greedy reasoning and belief for that
state (`protocol.action_prefix`), so a completion is the action; in the variant "answer" the prefix is
empty and GRPO samples whole answers, belief and evidence numbers included. Per variant and GRPO seed
it prints GRPO seconds, mean KL, the share of groups without reward spread, the gate, and the paired
GRPO - SFT difference (with its standard error) and both belief MAEs on 200 held-out continuous
*training* seeds (9500-9699, the tuning set), then, for `--windows`, on evaluation windows (reported,
never tuned on: window 0 = the default evaluation seeds, 5 = continuous 500-599, OOD 10250-10299,
discrete3 20075-20089).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from report import print_markdown  # benchmarks/ is the script's own folder
from students_on_windows import play

TUNING_SEEDS = "9500-9699"


def paired(grpo_dir: str, sft_dir: str, condition: str, seeds: list[int], cache: dict) -> str:
    """'diff ± se (belief MAE sft -> grpo)' for one condition's seeds; the SFT side is played once."""
    key = (condition, tuple(seeds))
    if key not in cache:
        cache[key] = play(sft_dir, condition, seeds)
    (before, mae_before), (after, mae_after) = cache[key], play(grpo_dir, condition, seeds)
    diff = after - before
    return (f"{diff.mean():+.4f} ± {diff.std(ddof=1) / np.sqrt(len(diff)):.4f} "
            f"(MAE {mae_before:.3f} → {mae_after:.3f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--sft", required=True, help="the SFT checkpoint's model directory")
    parser.add_argument("--out", required=True)
    parser.add_argument("--variants", default="action,answer")
    parser.add_argument("--seeds", default="0,1,2", help="GRPO seeds")
    parser.add_argument("--windows", default="", help="evaluation windows to report, e.g. 0,5 (never tuned on)")
    parser.add_argument("--grpo", default="{}", help="GRPORunConfig overrides as JSON")
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()

    import torch

    from rhythm_core.env.conditions import check_training_seeds, parse_seeds
    from rhythm_core.evaluation.rollouts import evaluation_window
    from rhythm_core.training import grpo

    if args.threads:
        torch.set_num_threads(args.threads)
    tuning = parse_seeds(TUNING_SEEDS)
    check_training_seeds("continuous", tuning)
    cache: dict = {}
    rows = []
    for seed in (int(s) for s in args.seeds.split(",")):
        for variant in args.variants.split(","):
            prefix = grpo.action_prefix
            if variant == "answer":
                grpo.action_prefix = lambda answer: ""  # no prefix: GRPO samples the whole answer
            started = time.perf_counter()
            config = grpo.GRPORunConfig(**{"report_to": "none", **json.loads(args.grpo), "seed": seed})
            result = grpo.run_grpo(config, args.dataset, args.sft, Path(args.out) / f"{variant}_seed{seed}")
            seconds = time.perf_counter() - started
            grpo.action_prefix = prefix
            gate = result["validation"]
            row = {"variant": variant, "seed": seed, "grpo_s": round(seconds, 1),
                   "mean_kl": round(result["mean_kl"], 5), "zero_std": result["mean_frac_groups_zero_reward_std"],
                   "gate": f"{gate['difference']:+.4f} ± {gate['difference_se']:.4f}",
                   "tuning": paired(result["model_dir"], args.sft, "continuous", tuning, cache)}
            for window in (int(w) for w in args.windows.split(",") if w):
                for condition, spec in evaluation_window(window).items():
                    row[f"w{window}_{condition}"] = paired(result["model_dir"], args.sft, condition,
                                                           parse_seeds(spec), cache)
            print(json.dumps(row), flush=True)
            rows.append(row)
    print_markdown(rows)


if __name__ == "__main__":
    main()
