"""The grader interface: a finished episode -> final_score in [0, 1] with named components, and the
same score's acting part as a sum over the week's steps (`ScoreToGo`), which planners maximise."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..sim.episode import EpisodeBatch
from ..sim.spec import CRASH_THRESHOLD, METERS, STEPS_PER_EPISODE


@dataclass(frozen=True)
class ScoreToGo:
    """The part of a grader's final score that acting earns (every component but the belief), as a
    sum over the week's steps, for N people:

        sum over the non-belief components of weight * component
            = start(meters[0]) + sum over t = 1..28 of step(meters[t - 1], meters[t])

    A planner that adds `step` along a path it simulates scores the path exactly as the grader would
    score those meters (tests/test_graders.py checks the identity on played weeks).
    """

    level: np.ndarray  # (N, 5): what each meter's level after a step earns
    progress: float  # what each unit of progress made earns
    crash: float  # what each meter below CRASH_THRESHOLD after a step costs
    constant: float  # what a week earns before its first step (the crash-free score)

    def take(self, index) -> ScoreToGo:
        """The score of the people `index` selects (a row per simulated path)."""
        return ScoreToGo(self.level[index], self.progress, self.crash, self.constant)

    def start(self, meters: np.ndarray) -> np.ndarray:
        """What the week earns before its first step, from the initial meters (N, 5)."""
        return self.constant + self.progress * meters[:, 2]

    def state(self, meters: np.ndarray) -> np.ndarray:
        """What one step spent in `meters` (N, 5) earns, progress made aside."""
        return (meters * self.level).sum(axis=-1) - self.crash * (meters < CRASH_THRESHOLD).sum(axis=-1)

    def step(self, before: np.ndarray, after: np.ndarray) -> np.ndarray:
        """What the step from `before` to `after` (N, 5) earns."""
        return self.state(after) + self.progress * (after[:, 2] - before[:, 2])


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

    def score_to_go(self, factors: np.ndarray) -> ScoreToGo:
        """The acting part of this grader's score for people with profiles `factors` (N, 9), per step."""
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
WELLBEING_METERS = [0, 1, 3, 4]  # vitality, cognition, serenity, connection


def wellbeing(meters: np.ndarray) -> np.ndarray:
    """Mean over the 28 post-step states of the mean of vitality, cognition, serenity, connection."""
    return meters[:, 1:, WELLBEING_METERS].mean(axis=(1, 2))


def final_progress(meters: np.ndarray) -> np.ndarray:
    return meters[:, -1, 2]


def crash_avoidance(meters: np.ndarray) -> np.ndarray:
    """1 - the fraction of (step, meter) pairs below the crash threshold after the 28 steps."""
    return 1.0 - (meters[:, 1:] < CRASH_THRESHOLD).mean(axis=(1, 2))


def per_step_score(level: np.ndarray, weights: dict[str, float], progress: str, crash: str) -> ScoreToGo:
    """A ScoreToGo from a wellbeing component's per-step meter weights (`level`, its weight included)
    and the weights of the `progress` (final_progress) and `crash` (crash_avoidance) components:
    final progress is the initial progress plus the progress each step makes, and crash avoidance
    starts at 1 and loses 1/(28 * 5) for each meter below the threshold after each step."""
    return ScoreToGo(level, weights[progress], weights[crash] / (STEPS_PER_EPISODE * len(METERS)), weights[crash])


def mean_ci95(values: np.ndarray) -> tuple[float, float, float]:
    """Mean and normal-approximation 95% confidence interval of the mean."""
    values = np.asarray(values, dtype=np.float64)
    mean = float(values.mean())
    if len(values) < 2:
        return mean, mean, mean
    half = 1.96 * float(values.std(ddof=1)) / np.sqrt(len(values))
    return mean, mean - half, mean + half
