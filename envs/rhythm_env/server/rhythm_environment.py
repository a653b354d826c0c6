"""RhythmEnv's OpenEnv `Environment`: a `TextWeek` per session (defined once, in rhythm_env.text)."""

from rhythm_env.text.openenv_server import RhythmEnvironment

__all__ = ["RhythmEnvironment"]
