"""The simulator, RhythmEnv: names and sizes (`spec`), conditions and their seed ranges
(`conditions`), hidden profiles and the population prior (`profiles`), the transition model
(`dynamics`), the Gymnasium-style and vector envs (`rhythm_env`), finished episodes as arrays
(`episode`) and counter-based seeded randomness (`rng`).

The bottom layer of rhythm_core: it imports nothing else from the package, and everything else may
import it. `from rhythm_core.env import RhythmEnv, VectorRhythmEnv` is the public entry point.
"""

from .rhythm_env import BatchObservation, EnvState, Observation, RhythmEnv, VectorRhythmEnv, step_reward

__all__ = ["BatchObservation", "EnvState", "Observation", "RhythmEnv", "VectorRhythmEnv", "step_reward"]
