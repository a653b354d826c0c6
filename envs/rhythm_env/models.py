"""The action, observation and state of RhythmEnv over OpenEnv (defined once, in rhythm_env.text)."""

from rhythm_env.text.openenv_server import RhythmAction, RhythmObservation, RhythmState

__all__ = ["RhythmAction", "RhythmObservation", "RhythmState"]
