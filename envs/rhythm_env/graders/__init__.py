"""Versioned graders. `get_grader("v2")`, `get_grader("v3")`; each has `.version` and `.grade()`; and
`mean_ci95`, the mean of graded scores with its 95% confidence interval.

May import `sim` only: a grader is a pure function of a finished episode.
"""

from .base import Grader, GradeResult, mean_ci95
from .v2 import GraderV2
from .v3 import GraderV3
from .week import grade_env_week

GRADERS: dict[str, type[Grader]] = {"v2": GraderV2, "v3": GraderV3}
# The grader the recipe plays, trains and reports under unless told otherwise (`RHYTHM_GRADER`).
DEFAULT_GRADER = "v3"


def get_grader(name: str) -> Grader:
    try:
        return GRADERS[name]()
    except KeyError:
        raise ValueError(f"unknown grader {name!r}; allowed: {', '.join(GRADERS)}") from None


__all__ = ["DEFAULT_GRADER", "GRADERS", "GradeResult", "Grader", "GraderV2", "GraderV3", "get_grader", "grade_env_week",
           "mean_ci95"]
