"""Lockstep-batched vs sequential evaluation of the same checkpoint (episodes/s). Prints figures.

    python benchmarks/eval_batching.py --checkpoint dagster_home/storage/rhythm/sft_checkpoint/<version>/model
    python benchmarks/eval_batching.py            # trains a small tiny-model checkpoint first

Batched: all episodes advance together, one `generate` per step (28 calls for the whole set), each
prompt reusing the KV cache of the prefix it shares with its previous step's prompt; also timed
without that reuse. Sequential: one episode at a time (28 calls per episode), with the same reuse.
Target: batched >= 5x sequential for 32 episodes.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from results_file import write_result


def quick_checkpoint(tmp: Path) -> str:
    from rhythm_core.data.sft_dataset import build_sft_dataset, save_sft_dataset
    from rhythm_core.teacher.run import run_teacher
    from rhythm_core.teacher.settings import TeacherSettings
    from rhythm_core.teacher.trajectories import read_trajectories
    from rhythm_core.training.sft import SFTRunConfig, run_sft

    run_teacher(TeacherSettings(backend="bayes"), "continuous", range(1000, 1032), tmp / "t.jsonl")
    save_sft_dataset(build_sft_dataset(read_trajectories(tmp / "t.jsonl").records), tmp / "sft", {})
    return run_sft(SFTRunConfig(max_steps=80), tmp / "sft", tmp / "sft_out")["model_dir"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", default=None)
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default: the checkpoint's recommendation")
    args = parser.parse_args()

    from rhythm_core.evaluation.rollouts import play_records
    from rhythm_core.training.generation import SamplingConfig
    from rhythm_core.training.policy import LLMPolicyAgent

    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = args.checkpoint or quick_checkpoint(Path(tmp))
        sampling = SamplingConfig(max_new_tokens=args.max_new_tokens)
        seeds = list(range(args.episodes))

        def timed(reuse: bool, together: bool):
            agent = LLMPolicyAgent.from_checkpoint(checkpoint, sampling=sampling, reuse_prompt_cache=reuse)
            start = time.perf_counter()
            if together:
                records = play_records(agent, "continuous", seeds, {"id": "student"})
            else:
                records = [play_records(agent, "continuous", [s], {"id": "student"})[0] for s in seeds]
            return time.perf_counter() - start, records, agent

        batched_s, batched, agent = timed(reuse=True, together=True)
        plain_s, plain, _ = timed(reuse=False, together=True)
        sequential_s, sequential, _ = timed(reuse=True, together=False)
    reused = agent.prompt_cache.reused_fraction if agent.prompt_cache else 0.0
    same = sum(b["actions"] == s["actions"] for b, s in zip(batched, sequential))
    same_plain = sum(b["actions"] == p["actions"] for b, p in zip(batched, plain))
    n = args.episodes
    print(f"checkpoint {checkpoint}, {n} episodes, greedy, max_new_tokens {agent.sampling.max_new_tokens}")
    print(f"  lockstep batched:                  {batched_s:.1f} s = {n / batched_s:.2f} episodes/s "
          f"(28 generate calls; {reused:.0%} of prompt tokens reused from the cache)")
    print(f"  lockstep batched, no prompt cache: {plain_s:.1f} s = {n / plain_s:.2f} episodes/s")
    print(f"  sequential:                        {sequential_s:.1f} s = {n / sequential_s:.2f} episodes/s "
          f"({28 * n} generate calls)")
    print(f"  speed-up {sequential_s / batched_s:.1f}x over sequential ({sequential_s / plain_s:.1f}x without the "
          f"prompt cache); identical trajectories: {same}/{n} vs sequential, {same_plain}/{n} vs no cache")
    write_result("eval_batching", {
        "checkpoint": "a quick 80-step checkpoint" if args.checkpoint is None else "given", "episodes": n,
        "max_new_tokens": agent.sampling.max_new_tokens, "batched_s": round(batched_s, 1),
        "batched_no_prompt_cache_s": round(plain_s, 1), "sequential_s": round(sequential_s, 1),
        "speed_up": round(sequential_s / batched_s, 1), "speed_up_no_prompt_cache": round(sequential_s / plain_s, 1),
        "prompt_tokens_reused": round(reused, 3), "identical_vs_sequential": same, "identical_vs_no_cache": same_plain},
        question="How much faster is lockstep play with the prompt cache than one week at a time?")

if __name__ == "__main__":
    main()
