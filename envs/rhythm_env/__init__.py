"""RhythmEnv for OpenEnv: `RhythmEnvClient` plays a week served by `server.app` with `RhythmAction`s."""

from .client import RhythmEnvClient, RhythmServerError
from .models import RhythmAction, RhythmObservation, RhythmState

__all__ = ["RhythmAction", "RhythmEnvClient", "RhythmObservation", "RhythmServerError", "RhythmState"]
