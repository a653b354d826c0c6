"""Gymnasium registration: after `import rhythm_core.env`,

    env = gymnasium.make("rhythm/RhythmEnv-v0", condition="ood")
    vec = gymnasium.make_vec("rhythm/RhythmEnv-v0", num_envs=4096, vectorization_mode="vector_entry_point")

make() builds `RhythmEnv` and make_vec(vectorization_mode="vector_entry_point") the numpy
`VectorRhythmEnv`, both with obs_type="dict" (observations lie in `observation_space`) and
strict_seeds=False (any seed works; one inside the condition's range is the episode seed itself, so
the numbers equal RhythmEnv(condition)'s for that seed). Registering again is a no-op.
"""

from __future__ import annotations

import gymnasium

ENV_ID = "rhythm/RhythmEnv-v0"
DEFAULT_KWARGS = {"condition": "continuous", "obs_type": "dict", "strict_seeds": False}


def register() -> None:
    """Register ENV_ID with Gymnasium unless it is registered already (idempotent)."""
    if ENV_ID in gymnasium.registry:
        return
    gymnasium.register(
        id=ENV_ID,
        entry_point="rhythm_core.env.rhythm_env:RhythmEnv",
        vector_entry_point="rhythm_core.env.rhythm_env:VectorRhythmEnv",
        kwargs=dict(DEFAULT_KWARGS),
    )


register()
