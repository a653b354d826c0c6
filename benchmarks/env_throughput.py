"""Throughput of RhythmEnv and its agents on this machine. Prints figures; asserts nothing.

    python benchmarks/env_throughput.py       # also `make bench`; figures: benchmarks/results/env_throughput.json

Targets (issue 2): vector env >= 1,000,000 env-steps/s (4,096 episodes, heuristic policy);
scalar env >= 20,000 steps/s; Bayesian teacher >= 20 episodes/s; `rhythm baselines` for
10,000 seeds of random+heuristic in under 10 s.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from results_file import write_result

from rhythm_core.agents import BayesAgent, heuristic_actions
from rhythm_core.agents.rollout import rollout
from rhythm_core.env import RhythmEnv, VectorRhythmEnv
from rhythm_core.env.spec import ACTIONS, STEPS_PER_EPISODE


def best_of(fn, repeats=3):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def vector_env(n=4096):
    env = VectorRhythmEnv("continuous")
    seeds = np.arange(n) % 10_000

    def reset():
        env.reset(seeds)

    def episode():
        obs, _ = env.reset(seeds)
        for _ in range(STEPS_PER_EPISODE):
            obs, *_ = env.step(heuristic_actions(obs.meters, obs.slot))

    reset_s = best_of(reset)
    total_s = best_of(episode)
    steps = n * STEPS_PER_EPISODE
    print(f"vector env, {n} episodes, heuristic: {steps / (total_s - reset_s):,.0f} env-steps/s stepping "
          f"({steps / total_s:,.0f} including reset; reset {reset_s * 1e3:.0f} ms)")
    return {"episodes": n, "steps_per_s_stepping": round(steps / (total_s - reset_s)),
            "steps_per_s_with_reset": round(steps / total_s), "target_steps_per_s": 1_000_000}


def scalar_env(episodes=300):
    env = RhythmEnv("continuous")
    plan = [[ACTIONS[(s * 7 + t) % len(ACTIONS)] for t in range(STEPS_PER_EPISODE)] for s in range(episodes)]

    def run():
        for seed, actions in enumerate(plan):
            env.reset(seed=seed)
            for action in actions:
                env.step(action)

    total_s = best_of(run)
    print(f"scalar env: {episodes * STEPS_PER_EPISODE / total_s:,.0f} steps/s (reset included)")
    return {"steps_per_s": round(episodes * STEPS_PER_EPISODE / total_s), "target_steps_per_s": 20_000}


def bayes_teacher():
    one_by_one = 40
    start = time.perf_counter()
    for seed in range(1000, 1000 + one_by_one):
        rollout(BayesAgent(explain=True), "continuous", [seed])
    alone = one_by_one / (time.perf_counter() - start)
    batched = 1000
    start = time.perf_counter()
    rollout(BayesAgent(explain=True), "continuous", np.arange(1000, 1000 + batched), chunk_size=1000)
    batch = batched / (time.perf_counter() - start)
    print(f"bayes teacher with reasoning: {alone:,.1f} episodes/s one at a time, {batch:,.0f} episodes/s batched")
    return {"episodes_per_s_one_at_a_time": round(alone, 1), "episodes_per_s_batched": round(batch),
            "target_episodes_per_s": 20}


def cli_baselines():
    exe = Path(sys.executable).with_name("rhythm")
    cmd = [str(exe), "baselines", "--seeds", "0-9999", "--agents", "random,heuristic", "--json"]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env={**os.environ})
    wall = time.perf_counter() - start
    print(f"`rhythm baselines --seeds 0-9999 --agents random,heuristic`: {wall:.2f} s wall")
    return {"command": "rhythm baselines --seeds 0-9999 --agents random,heuristic", "wall_s": round(wall, 2),
            "target_s": 10}


if __name__ == "__main__":
    write_result("env_throughput", {"vector_env": vector_env(), "scalar_env": scalar_env(),
                                    "bayes_teacher": bayes_teacher(), "cli_baselines": cli_baselines()},
                 question="How fast do the environment and the offline agents run on this machine?")
