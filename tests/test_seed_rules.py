"""One set of seeds rules on every front end (env/seed_rules.py): Gymnasium through gymnasium.make, TRL's
RhythmToolEnv and the OpenEnv server refuse the same weeks for training (an evaluation seed, a tuning
seed, an evaluation-only condition, a seed that is no integer, an unknown reset argument) and accept the
same training week, playing the same numbers; Gymnasium takes integer actions only."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest

from rhythm_env.sim import ENV_ID, RhythmEnv
from rhythm_env.text.tool_env import RhythmToolEnv

WEEK = 1234
REFUSED = [  # (condition, seed, what the message says)
    ("continuous", 5, "seed 5 is not a training seed"),
    ("continuous", 9600, "seed 9600 is a tuning seed"),
    ("continuous", 12_345, "seed 12345 is outside the continuous range"),
    ("ood", 10_001, "condition 'ood' is evaluation-only"),
    ("continuous", 1500.5, "seed 1500.5 is not an integer"),
]


def gym_start(condition, seed, **extra):
    env = gymnasium.make(ENV_ID, condition=condition)
    obs, info = env.reset(seed=seed, options=extra or None)
    return info["seed"], obs["meters"]


def trl_start(condition, seed, **extra):
    env = RhythmToolEnv()
    env.reset(condition=condition, seed=seed, **extra)
    return env.week.seed, env.week.history[-1].meters


def openenv_start(condition, seed, **extra):
    from fastapi.testclient import TestClient

    from rhythm_env.text.openenv_server import create_rhythm_app

    with TestClient(create_rhythm_app(max_sessions=1)) as http, http.websocket_connect("/ws") as ws:
        ws.send_json({"type": "reset", "data": {"condition": condition, "seed": seed, **extra}})
        answer = ws.receive_json()
    if answer["type"] == "error":
        raise ValueError(answer["data"]["message"])
    observation = answer["data"]["observation"]
    return observation["seed"], np.array(list(observation["meters"].values()))


FRONT_ENDS = {"gymnasium": gym_start, "trl": trl_start, "openenv": openenv_start}


@pytest.mark.parametrize("front_end", list(FRONT_ENDS))
def test_every_front_end_refuses_the_same_weeks_for_training_and_plays_the_same_week(front_end):
    start = FRONT_ENDS[front_end]
    for condition, seed, message in REFUSED:
        with pytest.raises(ValueError, match=message):
            start(condition, seed)
    # A misspelt argument is refused, never read as "no seed" (Gymnasium's reset reads `options`).
    with pytest.raises(ValueError, match="unknown reset (argument|option)"):
        start("continuous", WEEK, sead=1500)
    seed, meters = start("continuous", WEEK)
    reference, _ = RhythmEnv("continuous").reset(seed=WEEK)
    assert seed == WEEK and np.allclose(meters, reference.meters)


def test_gymnasium_takes_integer_actions_only_and_draws_training_weeks():
    env = gymnasium.make(ENV_ID)
    env.reset(seed=WEEK)
    for action in (2.5, "sleep", True, np.float64(2.0)):
        with pytest.raises(ValueError, match="action must be an integer index 0-9"):
            env.step(action)
    assert env.step(np.int64(2))[0]["last_action"] == 2 and env.step(3)[0]["last_action"] == 3
    drawn = [env.reset()[1]["seed"] for _ in range(300)]
    assert all(1_000 <= s <= 9_999 and not 9_500 <= s < 9_700 for s in drawn)
    with pytest.raises(ValueError, match="an evaluation week needs its seed"):
        gymnasium.make(ENV_ID, condition="ood", purpose="evaluation").reset()
    vec = gymnasium.make_vec(ENV_ID, num_envs=2, vectorization_mode="vector_entry_point")
    with pytest.raises(ValueError, match="seed 999 is not a training seed"):
        vec.reset(seed=999)  # weeks 999 and 1000
    vec.reset(seed=WEEK)
    with pytest.raises(ValueError, match="actions must be integer indices"):
        vec.step(np.array([1.5, 2.0]))
