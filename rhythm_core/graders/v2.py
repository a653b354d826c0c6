"""Grader v2, as published: wellbeing, progress, crash avoidance, and 1 - belief MAE (20%)."""

from __future__ import annotations

import numpy as np

from ..env.episode import EpisodeBatch
from .base import Grader, crash_avoidance, final_progress, wellbeing


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
