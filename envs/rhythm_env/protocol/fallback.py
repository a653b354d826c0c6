"""The safe action the env takes when an answer is unusable (`fallback_action`, and
`fallback_actions` for a batch)."""

from __future__ import annotations

import numpy as np

from ..sim.spec import ACTIONS, METERS, SLOTS


def fallback_actions(steps, vitality) -> np.ndarray:
    """`fallback_action` for a batch: action indices from each episode's step and vitality."""
    steps, vitality = np.asarray(steps), np.asarray(vitality, dtype=np.float64)
    night = steps % len(SLOTS) == SLOTS.index("night")
    tired = vitality < 0.25
    return np.where(night, ACTIONS.index("SLEEP"), np.where(tired, ACTIONS.index("NAP"), ACTIONS.index("MEDITATE")))


def fallback_action(observation) -> str:
    """The action taken when an answer is invalid.

    SLEEP at night: staying up costs vitality and cognition, and sleep is the big nightly restore.
    NAP when vitality is low (< 0.25), to pull it away from the crash threshold. Otherwise MEDITATE:
    its own effects are small and non-negative on every meter for every profile, so it never pushes
    a meter towards a crash beyond the passive drift, and it makes no progress: an invalid answer is
    safe but earns nothing.
    """
    vitality = float(observation.meters[METERS.index("vitality")])
    return ACTIONS[int(fallback_actions(observation.step, vitality))]
