"""The simulator, RhythmEnv: names and sizes (`spec`), conditions and their seed ranges
(`conditions`), hidden profiles and the population prior (`profiles`), the transition model
(`dynamics`), the Gymnasium env and vector env (`rhythm_env`), what they hand out: observations,
snapshots and the text view (`observation`), their Gymnasium registration as "rhythm/RhythmEnv-v0"
(`gym`, run on import), the seeds rules every front end enforces (`seed_rules`), finished episodes as
arrays (`episode`) and counter-based seeded randomness (`rng`).

The bottom layer of rhythm_env: it imports nothing else from the package, and everything else may
import it. `from rhythm_env.sim import RhythmEnv, VectorRhythmEnv` is the public entry point.

The front ends for language-model trainers (the week as text, TRL's tool environment, the OpenEnv server
and client) speak the protocol and grade with the graders, so they live above both, in `text/`.
"""

from . import gym as _gym  # registers "rhythm/RhythmEnv-v0" with Gymnasium (idempotent)
from .observation import BatchObservation, EnvState, Observation
from .rhythm_env import RhythmEnv, VectorRhythmEnv, step_reward

ENV_ID = _gym.ENV_ID

__all__ = ["ENV_ID", "BatchObservation", "EnvState", "Observation", "RhythmEnv", "VectorRhythmEnv", "step_reward"]
