"""Gymnasium registration: after `import rhythm_env.sim`,

    env = gymnasium.make("rhythm/RhythmEnv-v0", condition="ood")
    vec = gymnasium.make_vec("rhythm/RhythmEnv-v0", num_envs=4096, vectorization_mode="vector_entry_point")

make() builds `RhythmEnv` and make_vec(vectorization_mode="vector_entry_point") the numpy
`VectorRhythmEnv`, both with obs_type="dict" (observations lie in `observation_space`) and
purpose="training": the seeds rules every front end holds (`seed_rules`): a seed names the week and must
be a training seed (the numbers equal RhythmEnv(condition)'s for that seed), reset without one draws a
training week, and ood and discrete3 need purpose="evaluation" and a seed. Gymnasium's `check_env` resets
with seeds 123 and 456, evaluation weeks: check with purpose=None (the simulator's own rules, any seed;
strict_seeds=False lets one outside the range seed the RNG that draws the week). Registering again is a
no-op.
"""

from __future__ import annotations

import gymnasium

ENV_ID = "rhythm/RhythmEnv-v0"
DEFAULT_KWARGS = {"condition": "continuous", "obs_type": "dict", "strict_seeds": False, "purpose": "training"}


def register() -> None:
    """Register ENV_ID with Gymnasium unless it is registered already (idempotent)."""
    if ENV_ID in gymnasium.registry:
        return
    gymnasium.register(
        id=ENV_ID,
        entry_point="rhythm_env.sim.rhythm_env:RhythmEnv",
        vector_entry_point="rhythm_env.sim.rhythm_env:VectorRhythmEnv",
        kwargs=dict(DEFAULT_KWARGS),
    )


register()
