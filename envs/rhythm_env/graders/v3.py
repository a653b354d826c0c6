"""Grader v3: knowing the person must pay off, and a constant belief must earn nothing.

- belief_skill = 1 - MAE(belief) / MAE(population prior mean) for the episode's condition: the
  prior-mean belief scores 0 on average, a perfect belief 1, a worse-than-prior belief below 0.
  No stated belief scores 0 (no skill). The component is not clipped, so its mean is unbiased;
  the final score is clipped to [0, 1].
- preference_wellbeing weighs the meters by the person's own hidden preferences (how much they
  value connection, calm, progress), so acting on what was inferred pays off in the score.
"""

from __future__ import annotations

import numpy as np

from ..sim.episode import EpisodeBatch
from ..sim.profiles import prior_stats
from ..sim.spec import FACTOR_INDEX, STEPS_PER_EPISODE
from .base import Grader, ScoreToGo, crash_avoidance, final_progress, per_step_score


def preference_weights(factors: np.ndarray) -> np.ndarray:
    """Per-person weights (N, 5) over (vitality, cognition, progress, serenity, connection), sum 1."""
    f = factors
    raw = np.stack(
        [
            np.full(len(f), 1.0),
            np.full(len(f), 0.6),
            0.3 + 1.2 * f[:, FACTOR_INDEX["progress_reward_weight"]],
            0.4 + 1.0 * f[:, FACTOR_INDEX["stress_sensitivity"]],
            0.3 + 1.2 * f[:, FACTOR_INDEX["social_need"]],
        ],
        axis=1,
    )
    return raw / raw.sum(axis=1, keepdims=True)


class GraderV3(Grader):
    version = "v3"
    weights = {"preference_wellbeing": 0.45, "progress": 0.15, "crash_avoidance": 0.15, "belief_skill": 0.25}

    def components(self, episodes: EpisodeBatch) -> dict[str, np.ndarray]:
        _, prior_mae = prior_stats(episodes.condition)
        mae = episodes.belief_mae()
        w = preference_weights(episodes.factors)
        return {
            "preference_wellbeing": np.einsum("ntj,nj->n", episodes.meters[:, 1:], w) / (episodes.meters.shape[1] - 1),
            "progress": final_progress(episodes.meters),
            "crash_avoidance": crash_avoidance(episodes.meters),
            "belief_skill": np.where(np.isnan(mae), 0.0, 1.0 - np.nan_to_num(mae) / prior_mae),
        }

    def score_to_go(self, factors: np.ndarray) -> ScoreToGo:
        level = self.weights["preference_wellbeing"] / STEPS_PER_EPISODE * preference_weights(factors)
        return per_step_score(level, self.weights, "progress", "crash_avoidance")
