"""RhythmEnv's OpenEnv `Environment`: a `TextWeek` per session (defined once, in rhythm_core.text_env)."""

from rhythm_core.text_env.openenv_server import RhythmEnvironment

__all__ = ["RhythmEnvironment"]
