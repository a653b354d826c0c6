"""Play RhythmEnv weeks on a remote server (`rhythm serve-env`, or envs/rhythm_env's `server`) over OpenEnv's
WebSocket client, with a simple rule: a fixed rotation of four actions, a belief of 0.5 throughout.
Replace `choose` with your agent.

    rhythm serve-env --host 0.0.0.0 --port 8000                   # on the server
    python examples/play_remote.py --url http://SERVER:8000 --seeds 1000-1003
"""

from __future__ import annotations

import argparse
import json

from rhythm_env.sim.conditions import parse_seeds
from rhythm_env.text.openenv_server import RhythmAction, RhythmEnvClient

# The action and belief per slot: a stand-in for an agent that reads `observation.text`.
ROTATION = ("SLEEP", "DEEP_WORK", "EXERCISE", "SOCIALIZE")


def choose(observation) -> RhythmAction:
    slot = observation.step % len(ROTATION)
    return RhythmAction(action=ROTATION[slot], social=0.5, morning=0.5, work=0.5)


def play(url: str, seed: int, condition: str = "continuous") -> float:
    """One week on the server at `url`; returns its grade (the last step's reward)."""
    with RhythmEnvClient(base_url=url).sync() as env:
        result = env.reset(condition=condition, seed=seed)
        while not result.done:
            result = env.step(choose(result.observation))
        return result.reward


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="the server, e.g. http://127.0.0.1:8000")
    parser.add_argument("--seeds", default="1000-1003", help="weeks to play (the server's purpose decides which)")
    parser.add_argument("--condition", default="continuous")
    args = parser.parse_args(argv)
    grades = {seed: play(args.url, seed, args.condition) for seed in parse_seeds(args.seeds)}
    print(json.dumps({"grades": grades, "mean": sum(grades.values()) / len(grades)}))
    return grades


if __name__ == "__main__":
    main()
