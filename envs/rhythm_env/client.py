"""The OpenEnv client of RhythmEnv: one WebSocket session, one week at a time (`.sync()` to block).

OpenEnv's `AutoEnv.from_env("rhythm_env")` and `AutoAction.from_env("rhythm_env")` look in this module for
`RhythmEnv`, `RhythmAction` and `RhythmObservation` (its `<Name>Env` convention), so they are here beside
`RhythmEnvClient`, which `RhythmEnv` is.
"""

from rhythm_env.text.openenv_server import (
    RhythmAction,
    RhythmEnvClient,
    RhythmObservation,
    RhythmServerError,
    RhythmState,
)

RhythmEnv = RhythmEnvClient

__all__ = ["RhythmAction", "RhythmEnv", "RhythmEnvClient", "RhythmObservation", "RhythmServerError", "RhythmState"]
