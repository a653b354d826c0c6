"""Throughput of RhythmEnv and its agents on this machine. Prints figures; asserts nothing.

    python benchmarks/env_throughput.py       # also `make bench`; figures: benchmarks/results/env_throughput.json

Targets (issue 2): vector env >= 1,000,000 env-steps/s (4,096 episodes, heuristic policy);
scalar env >= 20,000 steps/s; Bayesian teacher >= 20 episodes/s; `rhythm baselines` for
10,000 seeds of random+heuristic in under 10 s. The OpenEnv server (`rhythm serve-env`) is timed
with 1 and 16 concurrent WebSocket clients beside the in-process TextWeek it wraps (no target).
"""

from __future__ import annotations

import asyncio
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from results_file import write_result

from rhythm_core.agents import BayesAgent, heuristic_actions
from rhythm_core.agents.rollout import rollout
from rhythm_env.sim import RhythmEnv, VectorRhythmEnv
from rhythm_env.sim.spec import ACTIONS, STEPS_PER_EPISODE
from rhythm_env.text.week import TextWeek


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


def week_plan(seed):
    """One week's slots for the server section: an action and a belief per slot."""
    return [{"action": ACTIONS[(seed * 3 + t * 7) % len(ACTIONS)], "social": (seed + t) % 11 / 10,
             "morning": t / 27, "work": 1 - t / 27} for t in range(STEPS_PER_EPISODE)]


def start_server(max_sessions):
    """`rhythm serve-env` on a free port; returns (process, url) once it serves."""
    exe = Path(sys.executable).with_name("rhythm")
    proc = subprocess.Popen([str(exe), "serve-env", "--port", "0", "--max-sessions", str(max_sessions)],
                            stdout=subprocess.PIPE, text=True)
    ready, _, _ = select.select([proc.stdout], [], [], 120)
    match = re.search(r"http://[\d.]+:\d+", proc.stdout.readline() if ready else "")
    if match is None:
        proc.kill()
        raise SystemExit("rhythm serve-env did not start")
    return proc, match.group(0)


def openenv_server(weeks_alone=20, clients=16, weeks_each=4):
    """Steps/s of `rhythm serve-env` for 1 and `clients` concurrent sessions, resets and the final grade included,
    beside the same weeks played in process (what the server's wire and sessions cost)."""
    from rhythm_env.text.openenv_server import RhythmAction, RhythmEnvClient

    def text_weeks():
        for seed in range(1000, 1000 + weeks_alone):
            week = TextWeek()
            week.start("continuous", seed)
            for slot in week_plan(seed):
                week.act(**slot)
            week.grade()

    in_process = weeks_alone * STEPS_PER_EPISODE / best_of(text_weeks)

    async def client_plays(url, seeds):
        async with RhythmEnvClient(base_url=url) as env:
            for seed in seeds:
                await env.reset(seed=seed)
                for slot in plans[seed]:
                    await env.step(slot)

    async def clients_play(url, n, weeks):  # n sessions at once, each playing `weeks` weeks in turn
        await asyncio.gather(*(client_plays(url, range(1000 + k * weeks, 1000 + (k + 1) * weeks)) for k in range(n)))

    seeds = range(1000, 1000 + max(weeks_alone, clients * weeks_each))
    plans = {seed: [RhythmAction(**slot) for slot in week_plan(seed)] for seed in seeds}
    load = os.getloadavg()[0]
    proc, url = start_server(clients)
    try:
        asyncio.run(clients_play(url, 1, 1))  # warm-up: the first session's imports and connections
        alone_s = best_of(lambda: asyncio.run(clients_play(url, 1, weeks_alone)))
        many_s = best_of(lambda: asyncio.run(clients_play(url, clients, weeks_each)))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    one = weeks_alone * STEPS_PER_EPISODE / alone_s
    many = clients * weeks_each * STEPS_PER_EPISODE / many_s
    print(f"OpenEnv server over WebSocket: {one:,.0f} steps/s with 1 client, {many:,.0f} with {clients} concurrent "
          f"clients; in-process TextWeek {in_process:,.0f} steps/s (resets and grades included)")
    return {"command": f"rhythm serve-env --port 0 --max-sessions {clients}",
            "clients": "async RhythmEnvClient sessions in one process, over WebSocket (/ws)",
            "weeks_1_client": weeks_alone, f"weeks_per_client_{clients}_clients": weeks_each,
            "steps_per_s_1_client": round(one), f"steps_per_s_{clients}_clients": round(many),
            "in_process_text_week_steps_per_s": round(in_process), "load_average_1min_before": round(load, 2)}


if __name__ == "__main__":
    write_result("env_throughput", {"vector_env": vector_env(), "scalar_env": scalar_env(),
                                    "bayes_teacher": bayes_teacher(), "cli_baselines": cli_baselines(),
                                    "server": openenv_server()},
                 question="How fast do the environment and the offline agents run on this machine?")
