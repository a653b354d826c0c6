"""Grading a week played through the Gymnasium env: its actions are the env's, the beliefs the agent's."""

from __future__ import annotations

from ..sim.episode import EpisodeBatch
from .base import GradeResult


def grade_env_week(env, beliefs, grader: str = "v3", invalid=None) -> GradeResult:
    """The grade of the finished week `env` played (a RhythmEnv, through gymnasium.make or not) with the
    belief stated at each slot: `beliefs` (28, 3), columns social, morning, work in [0, 1], NaN where
    none was stated; the same number the evaluation and the text front ends give for those actions and
    beliefs. `.final_score` is the week's score."""
    from . import get_grader

    return get_grader(grader).grade(EpisodeBatch.from_env(env, beliefs, invalid, agent="gymnasium"))


__all__ = ["grade_env_week"]
