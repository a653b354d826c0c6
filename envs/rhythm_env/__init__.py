"""RhythmEnv for OpenEnv: `RhythmEnv` (also named `RhythmEnvClient`) plays a week served by `server.app` with
`RhythmAction`s.

The environment's layers, lowest first; each imports only those before it:

    sim/       the simulator: spec, conditions, profiles, dynamics, the envs, seeds rules, Gymnasium
    protocol/  prompts and answers between the env and a language model
    graders/   versioned graders (v2, v3): a finished week -> final_score with components
    text/      the week as text and its front ends: TRL's tool environment, the OpenEnv server and client

`client.py`, `models.py` and `server/` are OpenEnv's files; they import the layers by this package's name.
"""

import importlib

__all__ = ["RhythmAction", "RhythmEnv", "RhythmEnvClient", "RhythmObservation", "RhythmServerError", "RhythmState"]


def __getattr__(name: str):
    # Loaded when first asked for: `import rhythm_env.sim` runs this file, and the simulator alone must not
    # load the client's OpenEnv, FastAPI and pydantic.
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.client"), name)
