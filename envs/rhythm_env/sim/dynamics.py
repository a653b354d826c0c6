"""How actions move the meters: a bilinear transition model shared by the env and model-based agents.

For action a in slot s, the expected change of meter j is

    delta_j = sum_k sum_i T[a, s, j, k, i] * m~_k * x~_i

with m~ = (1, meters) the state before the step and x~ = (1, factors - 0.5) the centred hidden
profile. The model is therefore linear in the profile given the state, which is what makes the
"anomaly" (actual delta minus the neutral profile's delta, x = 0) informative about the person and
lets the Bayesian teacher do exact linear-Gaussian updates. The env adds seeded Gaussian noise and
clips meters to [0, 1].
"""

from __future__ import annotations

import numpy as np

from .spec import ACTIONS, FACTORS, METERS, SLOTS

NOISE_SD = 0.06  # per meter per step
INITIAL_METERS = np.array([0.70, 0.70, 0.10, 0.60, 0.60])
INITIAL_JITTER = 0.05

_A, _S, _J = len(ACTIONS), len(SLOTS), len(METERS)
_K, _I = 1 + len(METERS), 1 + len(FACTORS)

_ALL_ACTIONS = ACTIONS
_ALL_SLOTS = SLOTS


def _build() -> np.ndarray:
    table = np.zeros((_A, _S, _J, _K, _I))

    def add(actions, slots, meter, coef, state=None, factor=None):
        actions = _ALL_ACTIONS if actions == "*" else ([actions] if isinstance(actions, str) else actions)
        slots = _ALL_SLOTS if slots == "*" else ([slots] if isinstance(slots, str) else slots)
        k = 0 if state is None else 1 + METERS.index(state)
        i = 0 if factor is None else 1 + FACTORS.index(factor)
        for a in actions:
            for s in slots:
                table[ACTIONS.index(a), SLOTS.index(s), METERS.index(meter), k, i] += coef

    awake = [a for a in ACTIONS if a != "SLEEP"]
    late = ["evening", "night"]

    # Passive drift every step: the day wears on vitality, connection fades with social need.
    add("*", "*", "vitality", -0.02)
    add("*", "*", "cognition", -0.01)
    add("*", "*", "progress", -0.005)
    add("*", "*", "serenity", -0.01)
    add("*", "*", "connection", -0.015)
    add("*", "*", "connection", -0.04, factor="social_need")
    # Morning people wake up energized; night owls drag through the morning.
    add("*", "morning", "vitality", 0.10, factor="morning_energy")
    # Staying up at night costs.
    add(awake, "night", "vitality", -0.05)
    add(awake, "night", "cognition", -0.04)

    # DEEP_WORK: progress scales with cognition and with working at the right time of day.
    add("DEEP_WORK", "*", "vitality", -0.07)
    add("DEEP_WORK", "*", "vitality", 0.16, factor="work_vitality_recovery")
    add("DEEP_WORK", "*", "cognition", -0.10)
    add("DEEP_WORK", "*", "progress", 0.01)
    add("DEEP_WORK", "*", "progress", 0.08, state="cognition")
    add("DEEP_WORK", "morning", "progress", 0.16, factor="chronotype")
    add("DEEP_WORK", late, "progress", -0.16, factor="chronotype")
    add("DEEP_WORK", "*", "serenity", -0.02)
    add("DEEP_WORK", "*", "serenity", -0.10, factor="stress_sensitivity")
    add("DEEP_WORK", "*", "serenity", 0.12, factor="progress_serenity_bonus")
    add("DEEP_WORK", "*", "connection", -0.005)

    add("SHALLOW_WORK", "*", "vitality", -0.03)
    add("SHALLOW_WORK", "*", "vitality", 0.06, factor="work_vitality_recovery")
    add("SHALLOW_WORK", "*", "cognition", -0.04)
    add("SHALLOW_WORK", "*", "progress", 0.01)
    add("SHALLOW_WORK", "*", "progress", 0.05, state="cognition")
    add("SHALLOW_WORK", "*", "serenity", -0.01)
    add("SHALLOW_WORK", "*", "serenity", -0.04, factor="stress_sensitivity")
    add("SHALLOW_WORK", "*", "serenity", 0.05, factor="progress_serenity_bonus")

    add("LEARN", "*", "vitality", -0.03)
    add("LEARN", "*", "cognition", -0.06)
    add("LEARN", "morning", "cognition", 0.06, factor="chronotype")
    add("LEARN", late, "cognition", -0.06, factor="chronotype")
    add("LEARN", "*", "progress", 0.02)
    add("LEARN", "*", "progress", 0.04, state="cognition")
    add("LEARN", "*", "serenity", 0.01)
    add("LEARN", "*", "serenity", 0.04, factor="progress_serenity_bonus")

    add("EXERCISE", "*", "vitality", -0.02)
    add("EXERCISE", "morning", "vitality", 0.08, factor="morning_energy")
    add("EXERCISE", "*", "cognition", 0.04)
    add("EXERCISE", "*", "serenity", 0.06)

    # SOCIALIZE: the introvert is drained, the extrovert energized; stress-sensitive people tense up.
    add("SOCIALIZE", "*", "vitality", -0.01)
    add("SOCIALIZE", "*", "vitality", 0.24, factor="social_battery")
    add("SOCIALIZE", "*", "cognition", -0.01)
    add("SOCIALIZE", "*", "connection", 0.10)
    add("SOCIALIZE", "*", "connection", 0.06, factor="social_need")
    add("SOCIALIZE", "*", "serenity", 0.02)
    add("SOCIALIZE", "*", "serenity", -0.12, factor="stress_sensitivity")

    add("FAMILY_TIME", "*", "vitality", -0.02)
    add("FAMILY_TIME", "*", "vitality", 0.06, factor="social_battery")
    add("FAMILY_TIME", "*", "connection", 0.07)
    add("FAMILY_TIME", "*", "connection", 0.04, factor="social_need")
    add("FAMILY_TIME", "*", "serenity", 0.04)

    add("MEDITATE", "*", "serenity", 0.07)
    add("MEDITATE", "*", "serenity", 0.08, factor="stress_sensitivity")
    add("MEDITATE", "*", "cognition", 0.02)
    add("MEDITATE", "*", "vitality", 0.01)

    add("NAP", "*", "vitality", 0.06)
    add("NAP", "afternoon", "vitality", 0.03)
    add("NAP", "*", "vitality", 0.06, factor="sleep_need")
    add("NAP", "*", "cognition", 0.02)

    # SLEEP at night restores vitality and cognition towards 1; high sleep need restores less.
    add("SLEEP", "night", "vitality", 0.45)
    add("SLEEP", "night", "vitality", -0.35, state="vitality")
    add("SLEEP", "night", "vitality", -0.20, factor="sleep_need")
    add("SLEEP", "night", "vitality", 0.20, state="vitality", factor="sleep_need")
    add("SLEEP", "night", "cognition", 0.15)
    add("SLEEP", "night", "cognition", -0.15, state="cognition")
    add("SLEEP", "night", "serenity", 0.02)
    # Sleeping in the day: a little rest, a lost slot; owls gain from sleeping in.
    day = ["morning", "afternoon", "evening"]
    add("SLEEP", day, "vitality", 0.04)
    add("SLEEP", "morning", "vitality", -0.10, factor="chronotype")
    add("SLEEP", day, "cognition", -0.02)
    add("SLEEP", day, "serenity", -0.02)

    # LEISURE: relaxing, unless the person feels guilty about not progressing.
    add("LEISURE", "*", "serenity", 0.05)
    add("LEISURE", "*", "serenity", -0.08, factor="progress_reward_weight")
    add("LEISURE", "*", "vitality", 0.02)
    add("LEISURE", "*", "cognition", 0.01)
    add("LEISURE", "*", "connection", 0.01)
    table.setflags(write=False)
    return table


TRANSITION = _build()  # (actions, slots, meters, 1 + meters, 1 + factors)
_NEUTRAL = np.ascontiguousarray(TRANSITION[..., 0])
_BY_FACTOR = np.ascontiguousarray(np.moveaxis(TRANSITION, -1, 0).reshape(TRANSITION.shape[-1], -1))
_FACTOR_COLUMNS = [(np.flatnonzero(row), row[np.flatnonzero(row)]) for row in _BY_FACTOR[1:]]


def _contract_state(blocks: np.ndarray, meters: np.ndarray) -> np.ndarray:
    """blocks (N, meters, 1 + meters, ...) -> (N, meters, ...): the sum over k of blocks * m~_k.

    np.einsum without `optimize` loops over each output element and sums its k terms in order
    (no BLAS), so every row is computed the same way whatever the batch size.
    """
    state = np.empty((meters.shape[0], meters.shape[1] + 1))
    state[:, 0] = 1.0
    state[:, 1:] = meters
    return np.einsum("njk...,nk->nj...", blocks, state)


def profile_tensor(factors: np.ndarray) -> np.ndarray:
    """The transition model specialised to each profile: (N, 9) -> (N, actions, slots, meters, 1 + meters).

    Summed factor by factor in a fixed order (no BLAS, whose blocking depends on N), so every
    element is the same whatever the batch: the scalar env, the vector env, and an agent's episode
    alone or in a crowd agree bitwise.
    """
    x = factors - 0.5
    out = np.empty((len(factors), _BY_FACTOR.shape[1]))
    out[:] = _BY_FACTOR[0]
    # Each factor touches only a few dozen of the 1,200 entries: add those columns alone.
    for i, (columns, coefs) in enumerate(_FACTOR_COLUMNS):
        out[:, columns] += x[:, i, None] * coefs
    return out.reshape(len(factors), *TRANSITION.shape[:-1])


def expected_delta(rows: np.ndarray, meters: np.ndarray) -> np.ndarray:
    """Expected meter change (N, 5) from rows (N, meters, 1 + meters) of a profile tensor (gathered
    at each episode's action and slot) and the pre-step meters (N, 5)."""
    return _contract_state(rows, meters)


def neutral_delta(actions: np.ndarray, slot, meters: np.ndarray) -> np.ndarray:
    """What the neutral profile (all factors 0.5) would get: (N, 5)."""
    return _contract_state(_NEUTRAL[actions, slot], meters)


def profile_jacobian(actions: np.ndarray, slot, meters: np.ndarray) -> np.ndarray:
    """d(delta)/d(factors) at the given state: (N,) actions, slot, (N, 5) meters -> (N, 5, 9)."""
    return _contract_state(TRANSITION[actions, slot][..., 1:], meters)
