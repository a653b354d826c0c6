"""The action, observation and state of RhythmEnv over OpenEnv (defined once, in rhythm_core.text_env)."""

from rhythm_core.text_env.openenv_server import RhythmAction, RhythmObservation, RhythmState

__all__ = ["RhythmAction", "RhythmObservation", "RhythmState"]
