"""Grader v2, as published: wellbeing, progress, crash avoidance, and 1 - belief MAE (20%)."""

from __future__ import annotations

import numpy as np

from ..sim.episode import EpisodeBatch
from ..sim.spec import METERS, STEPS_PER_EPISODE
from .base import WELLBEING_METERS, Grader, ScoreToGo, crash_avoidance, final_progress, per_step_score, wellbeing

# `wellbeing` per step: a 28th of the mean of its four meters
_WELLBEING_LEVEL = np.isin(np.arange(len(METERS)), WELLBEING_METERS) / (len(WELLBEING_METERS) * STEPS_PER_EPISODE)


class GraderV2(Grader):
    version = "v2"
    weights = {"wellbeing": 0.35, "progress": 0.30, "crash_avoidance": 0.15, "belief_accuracy": 0.20}

    def components(self, episodes: EpisodeBatch) -> dict[str, np.ndarray]:
        mae = episodes.belief_mae()
        return {
            "wellbeing": wellbeing(episodes.meters),
            "progress": final_progress(episodes.meters),
            "crash_avoidance": crash_avoidance(episodes.meters),
            # An agent that states no belief earns nothing here.
            "belief_accuracy": np.where(np.isnan(mae), 0.0, 1.0 - np.nan_to_num(mae)),
        }

    def score_to_go(self, factors: np.ndarray) -> ScoreToGo:
        level = np.broadcast_to(self.weights["wellbeing"] * _WELLBEING_LEVEL, (len(factors), len(METERS)))
        return per_step_score(level, self.weights, "progress", "crash_avoidance")
