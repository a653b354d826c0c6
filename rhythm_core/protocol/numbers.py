"""The numbers of the text protocol: the 2-decimal grid prompts show and answers write on (`DECIMALS`)
and the evidence chain's addition on it (`add_increment`).
"""

from __future__ import annotations

import numpy as np

# The grid every belief, increment and shown anomaly is written on: 2 decimals.
DECIMALS = 2


def add_increment(belief, increment) -> np.ndarray:
    """The evidence chain's addition: the previous belief plus the increment, clipped to [0, 1], on the
    grid (rounded as Python's `round` rounds), elementwise. Every belief of an evidence answer is its
    previous one plus its stated increment (`teacher.evidence.walk_chain`), and greedy decoding writes
    a student's belief the same way (`training.number_decoding.belief_sum`)."""
    total = np.clip(np.asarray(belief, dtype=np.float64) + np.asarray(increment, dtype=np.float64), 0.0, 1.0)
    return np.array([round(float(v), DECIMALS) for v in total.ravel()]).reshape(total.shape) + 0.0
