"""Lockstep-batched vs sequential evaluation of the same checkpoint (episodes/s). Prints figures.

    python benchmarks/eval_batching.py --checkpoint dagster_home/storage/rhythm/sft_checkpoint/<version>/model
    python benchmarks/eval_batching.py            # trains a small tiny-model checkpoint first (~1 min)

Batched: all episodes advance together, one `generate` per step (28 calls for the whole set).
Sequential: one episode at a time (28 calls per episode). Target: batched >= 5x for 32 episodes.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def quick_checkpoint(tmp: Path) -> str:
    from rhythm_core.dataset import build_sft_dataset, save_sft_dataset
    from rhythm_core.teacher import TeacherSettings, run_teacher
    from rhythm_core.training.sft import SFTRunConfig, run_sft
    from rhythm_core.trajectories import read_trajectories

    run_teacher(TeacherSettings(), "continuous", range(1000, 1032), tmp / "t.jsonl")
    save_sft_dataset(build_sft_dataset(read_trajectories(tmp / "t.jsonl").records), tmp / "sft", {})
    return run_sft(SFTRunConfig(max_steps=80), tmp / "sft", tmp / "sft_out")["model_dir"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", default=None)
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default: the checkpoint's recommendation")
    args = parser.parse_args()

    from rhythm_core.eval_rollouts import play_records
    from rhythm_core.training.generation import SamplingConfig
    from rhythm_core.training.policy import LLMPolicyAgent

    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = args.checkpoint or quick_checkpoint(Path(tmp))
        agent = LLMPolicyAgent.from_checkpoint(checkpoint, sampling=SamplingConfig(max_new_tokens=args.max_new_tokens))
        seeds = list(range(args.episodes))
        start = time.perf_counter()
        batched = play_records(agent, "continuous", seeds, {"id": "student"})
        batched_s = time.perf_counter() - start
        start = time.perf_counter()
        sequential = [play_records(agent, "continuous", [s], {"id": "student"})[0] for s in seeds]
        sequential_s = time.perf_counter() - start
    same = sum(b["actions"] == s["actions"] for b, s in zip(batched, sequential))
    print(f"checkpoint {checkpoint}, {args.episodes} episodes, greedy, max_new_tokens {agent.sampling.max_new_tokens}")
    print(f"  lockstep batched: {batched_s:.1f} s = {args.episodes / batched_s:.2f} episodes/s (28 generate calls)")
    print(f"  sequential:       {sequential_s:.1f} s = {args.episodes / sequential_s:.2f} episodes/s "
          f"({28 * args.episodes} generate calls)")
    print(f"  speed-up {sequential_s / batched_s:.1f}x; identical trajectories: {same}/{args.episodes}")


if __name__ == "__main__":
    main()
