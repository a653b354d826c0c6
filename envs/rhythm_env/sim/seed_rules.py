"""The seeds rules every front end enforces (Gymnasium with a `purpose`, TRL's tool environment, the OpenEnv
server): which week a reset may start for a purpose.

A week for "training" comes from the condition's training seeds outside the tuning seeds
(`conditions.check_training_seeds`: continuous 1000-9999 without 9500-9699; ood and discrete3 are
evaluation-only); a week for "evaluation" from the condition's evaluation seeds. A given seed names the
week itself; without one, a training week is drawn and an evaluation week is refused (evaluation seeds
are listed, never drawn).
"""

from __future__ import annotations

import numpy as np

from .conditions import TRAINING_SEEDS, TUNING_SEEDS, check_purpose_seeds, check_training_seeds, get_condition

PURPOSES = ("training", "evaluation")


def check_purpose(purpose: str) -> str:
    if purpose not in PURPOSES:
        raise ValueError(f"unknown purpose {purpose!r}; allowed: {', '.join(PURPOSES)}")
    return purpose


def draw_range(condition: str) -> tuple[int, int]:
    """[low, high) of the episode seeds a generator draws: the condition's training seeds where it has
    some (continuous 1000-9999, so drawn episodes never touch evaluation seeds), else its whole range
    (ood and discrete3 are evaluation-only)."""
    training = TRAINING_SEEDS.get(condition)
    if training is not None:
        return training.start, training.stop
    cond = get_condition(condition)
    return cond.first_seed, cond.last_seed + 1


def draw_training_seeds(generator, condition: str, size: int | None = None):
    """Episode seeds `generator` draws uniformly from `draw_range`, any that falls on a tuning seed
    (conditions.TUNING_SEEDS: continuous 9500-9699, never training data) drawn again; an int where
    `size` is None, else an int64 array. A draw off the tuning seeds is the one it always was; each
    redraw takes one more number from the generator, shifting its later draws."""
    low, high = draw_range(condition)
    tuning = TUNING_SEEDS.get(condition, range(0))
    seeds = np.atleast_1d(generator.integers(low, high, size=size, dtype=np.int64))
    while len(redraw := np.flatnonzero((seeds >= tuning.start) & (seeds < tuning.stop))):
        seeds[redraw] = generator.integers(low, high, size=len(redraw), dtype=np.int64)
    return int(seeds[0]) if size is None else seeds


def check_integer_seed(seed) -> int:
    """`seed` as an int, or ValueError: a bool, a string, a float with a fraction or NaN is no seed."""
    try:
        whole = not isinstance(seed, (bool, str)) and float(seed).is_integer()
    except (TypeError, ValueError):
        whole = False
    if not whole:
        raise ValueError(f"seed {seed!r} is not an integer")
    return int(seed)


def week_seeds(condition: str, seeds, purpose: str) -> list[int]:
    """The given episode seeds, each allowed for `purpose` (ValueError naming the first refused one)."""
    check_purpose(purpose)
    return check_purpose_seeds(condition, [check_integer_seed(s) for s in seeds], purpose)


def week_seed(condition: str, seed, purpose: str, rng: np.random.Generator) -> int:
    """The episode seed a week of `purpose` starts from: `seed` checked against the rules, or (training
    only) one `rng` draws from the condition's training seeds outside the tuning seeds."""
    get_condition(condition)
    check_purpose(purpose)
    if seed is not None:
        return week_seeds(condition, [seed], purpose)[0]
    if purpose == "evaluation":
        raise ValueError("an evaluation week needs its seed (evaluation seeds are listed, never drawn)")
    if condition not in TRAINING_SEEDS:
        check_training_seeds(condition, [])  # names the conditions that have training seeds
    return draw_training_seeds(rng, condition)


__all__ = ["PURPOSES", "check_integer_seed", "check_purpose", "draw_range", "draw_training_seeds", "week_seed",
           "week_seeds"]
