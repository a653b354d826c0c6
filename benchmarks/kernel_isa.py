"""What pinning torch's CPU kernels to AVX2 costs: SFT steps and the students' evaluation play with
the machine's own kernels and with AVX2's, side by side (alternating, each in a fresh process).

    python benchmarks/kernel_isa.py --dataset DAGSTER_HOME/storage/rhythm/sft_dataset/<v> \\
        --checkpoint DAGSTER_HOME/storage/rhythm/sft_checkpoint/<v>/model --rounds 2

Prints one JSON line per (round, kernels): the CPU capability torch used, the seconds of `--steps`
whole-week SFT steps (the demo's recipe, short phase off) and of the checkpoint playing 20 continuous
evaluation weeks greedily, and the SFT loss (which differs between the kernels: other rounding).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from results_file import write_result

CHILD = r"""
import json, sys, tempfile, time
import torch
from rhythm_core.training.sft import SFTRunConfig, run_sft
from rhythm_core.evaluation.rollouts import play_condition
dataset, checkpoint, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
with tempfile.TemporaryDirectory() as out:
    start = time.perf_counter()
    result = run_sft(SFTRunConfig(max_steps=steps, short_context_steps=0, report_to="none", eval_examples=0), dataset, out)
    sft_s = time.perf_counter() - start
with tempfile.TemporaryDirectory() as out:
    start = time.perf_counter()
    play_condition({"student": checkpoint}, "continuous", "0-19", out, baselines=[])
    play_s = time.perf_counter() - start
print(json.dumps({"capability": torch.backends.cpu.get_cpu_capability(), "sft_s": round(result["train_s"], 2),
                  "sft_wall_s": round(sft_s, 2), "play_s": round(play_s, 2),
                  "final_train_loss": result["final_train_loss"]}))
"""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    rows = []
    for round_ in range(args.rounds):
        for kernels in ("native", "avx2"):
            env = {**os.environ, "RHYTHM_CPU_KERNELS": kernels}
            env.pop("ATEN_CPU_CAPABILITY", None)
            done = subprocess.run([sys.executable, "-c", CHILD, args.dataset, args.checkpoint, str(args.steps)],
                                  env=env, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
            if done.returncode:
                raise RuntimeError(done.stderr[-3000:])
            rows.append({"round": round_, "kernels": kernels, **json.loads(done.stdout.strip().splitlines()[-1])})
            print(json.dumps(rows[-1]), flush=True)
    write_result("kernel_isa", {"sft_steps": args.steps, "play_weeks": 20, "rows": rows},
                 question="What does pinning torch's CPU kernels to AVX2 cost in SFT and play?")
    return 0


if __name__ == "__main__":
    sys.exit(main())
