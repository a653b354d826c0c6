"""Names and sizes that define RhythmEnv: meters, slots, actions, latent factors, belief dimensions.

Everything else refers to these tuples by index, so their order is part of the env version.
"""

from __future__ import annotations

import numpy as np

ENV_VERSION = "rhythm-env-1"

METERS: tuple[str, ...] = ("vitality", "cognition", "progress", "serenity", "connection")
SLOTS: tuple[str, ...] = ("morning", "afternoon", "evening", "night")
DAYS = 7
STEPS_PER_EPISODE = DAYS * len(SLOTS)  # 28

ACTIONS: tuple[str, ...] = (
    "DEEP_WORK",
    "SHALLOW_WORK",
    "LEARN",
    "EXERCISE",
    "SOCIALIZE",
    "FAMILY_TIME",
    "MEDITATE",
    "NAP",
    "SLEEP",
    "LEISURE",
)
ACTION_INDEX = {name: i for i, name in enumerate(ACTIONS)}

# The hidden profile: nine latent factors in [0, 1]. Three per belief dimension.
FACTORS: tuple[str, ...] = (
    "social_battery",  # socializing drains (0) or energizes (1) vitality
    "social_need",  # how fast connection fades and how much contact restores it
    "stress_sensitivity",  # serenity lost to demanding actions; gained from meditation
    "chronotype",  # 0 night owl ... 1 lark: when focused work pays off
    "morning_energy",  # vitality boost (or slump) in the morning slot
    "sleep_need",  # how much a night's sleep falls short for this person
    "work_vitality_recovery",  # deep work drains (0) or restores (1) the workaholic
    "progress_serenity_bonus",  # serenity from getting things done
    "progress_reward_weight",  # how much the person values progress (guilt during leisure)
)
FACTOR_INDEX = {name: i for i, name in enumerate(FACTORS)}

BELIEF_DIMS: tuple[str, ...] = ("social", "morning", "work")

# true_belief = BELIEF_WEIGHTS @ factors + BELIEF_OFFSET. Each row has three factors; the factors
# named with "1 -" enter inverted. Weights sum to 1 per row, so beliefs stay in [0, 1].
_BELIEF_SPEC = {
    "social": {"social_battery": 0.45, "social_need": 0.30, "stress_sensitivity": -0.25},
    "morning": {"chronotype": 0.50, "morning_energy": 0.30, "sleep_need": -0.20},
    "work": {"work_vitality_recovery": 0.45, "progress_serenity_bonus": 0.25, "progress_reward_weight": 0.30},
}
BELIEF_WEIGHTS = np.zeros((len(BELIEF_DIMS), len(FACTORS)))
BELIEF_OFFSET = np.zeros(len(BELIEF_DIMS))
for _d, _name in enumerate(BELIEF_DIMS):
    for _factor, _w in _BELIEF_SPEC[_name].items():
        BELIEF_WEIGHTS[_d, FACTOR_INDEX[_factor]] = _w
        if _w < 0:
            BELIEF_OFFSET[_d] += -_w  # w * (1 - f) = -w*f + w  with w > 0
BELIEF_WEIGHTS.setflags(write=False)
BELIEF_OFFSET.setflags(write=False)

CRASH_THRESHOLD = 0.10


def action_index(name: str) -> int:
    """Index of an action name (case-insensitive); a clear ValueError names the allowed set."""
    key = str(name).strip().upper()
    try:
        return ACTION_INDEX[key]
    except KeyError:
        raise ValueError(f"unknown action {name!r}; allowed actions: {', '.join(ACTIONS)}") from None


def true_belief(factors: np.ndarray) -> np.ndarray:
    """Map profile factors (..., 9) to the true belief (..., 3) over (social, morning, work).

    Summed factor by factor rather than with a matmul, whose rounding depends on the batch size.
    """
    factors = np.asarray(factors, dtype=np.float64)
    out = np.broadcast_to(BELIEF_OFFSET, (*factors.shape[:-1], len(BELIEF_DIMS))).copy()
    for f in range(len(FACTORS)):
        out += factors[..., f, None] * BELIEF_WEIGHTS[:, f]
    return out


def belief_to_dict(belief) -> dict[str, float]:
    return {name: float(v) for name, v in zip(BELIEF_DIMS, belief)}
