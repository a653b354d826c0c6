"""The OpenEnv client of RhythmEnv: one WebSocket session, one week at a time (`.sync()` to block)."""

from rhythm_core.text_env.openenv_server import RhythmEnvClient, RhythmServerError

__all__ = ["RhythmEnvClient", "RhythmServerError"]
