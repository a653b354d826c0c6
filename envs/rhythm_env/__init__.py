"""RhythmEnv for OpenEnv: `RhythmEnv` (also named `RhythmEnvClient`) plays a week served by `server.app` with
`RhythmAction`s."""

from .client import RhythmEnv, RhythmEnvClient, RhythmServerError
from .models import RhythmAction, RhythmObservation, RhythmState

__all__ = ["RhythmAction", "RhythmEnv", "RhythmEnvClient", "RhythmObservation", "RhythmServerError", "RhythmState"]
