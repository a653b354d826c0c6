"""The grader interface: a finished episode -> final_score in [0, 1] with named components."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..env.episode import EpisodeBatch
from ..env.spec import CRASH_THRESHOLD


@dataclass(frozen=True)
class GradeResult:
    final_score: float
    components: dict[str, float]


class Grader:
    """Subclasses set `version`, `weights` (component -> weight) and implement `components()`."""

    version: str = ""
    weights: dict[str, float] = {}

    def components(self, episodes: EpisodeBatch) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def grade_batch(self, episodes: EpisodeBatch) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Vectorized grading: (final_score (N,), {component: (N,)})."""
        parts = self.components(episodes)
        total = sum(self.weights[name] * parts[name] for name in self.weights)
        return np.clip(total, 0.0, 1.0), parts

    def grade(self, episode: EpisodeBatch) -> GradeResult:
        """Grade a single episode (an EpisodeBatch of length 1)."""
        if len(episode) != 1:
            raise ValueError(f"grade() takes one episode, got {len(episode)}; use grade_batch()")
        score, parts = self.grade_batch(episode)
        return GradeResult(float(score[0]), {k: float(v[0]) for k, v in parts.items()})


# Shared component definitions.
def wellbeing(meters: np.ndarray) -> np.ndarray:
    """Mean over the 28 post-step states of the mean of vitality, cognition, serenity, connection."""
    return meters[:, 1:, [0, 1, 3, 4]].mean(axis=(1, 2))


def final_progress(meters: np.ndarray) -> np.ndarray:
    return meters[:, -1, 2]


def crash_avoidance(meters: np.ndarray) -> np.ndarray:
    """1 - the fraction of (step, meter) pairs below the crash threshold after the 28 steps."""
    return 1.0 - (meters[:, 1:] < CRASH_THRESHOLD).mean(axis=(1, 2))


def mean_ci95(values: np.ndarray) -> tuple[float, float, float]:
    """Mean and normal-approximation 95% confidence interval of the mean."""
    values = np.asarray(values, dtype=np.float64)
    mean = float(values.mean())
    if len(values) < 2:
        return mean, mean, mean
    half = 1.96 * float(values.std(ddof=1)) / np.sqrt(len(values))
    return mean, mean - half, mean + half
