"""Settings fixed when the definitions load.

RHYTHM_GRADER picks the active grader (default v3). Its version string is part of the code version
of every asset that grades, so switching graders marks exactly those assets unsynced.
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from rhythm_core.graders import GRADERS

ACTIVE_GRADER = os.environ.get("RHYTHM_GRADER", "v3")
if ACTIVE_GRADER not in GRADERS:
    raise ValueError(f"RHYTHM_GRADER={ACTIVE_GRADER!r} is not a grader; allowed: {', '.join(GRADERS)}")


# Assets that grade carry this tag: the `regrade` job selects by it, so a new grading asset joins
# the job by declaring the tag, not by editing a list.
GRADING_TAGS = {"rhythm/grades": "true"}
# Grading assets follow their inputs and their grader: re-run when an upstream updates or when the
# code version (which holds the grader version) changes. The daemon of `dagster dev` evaluates this.
GRADING_AUTOMATION = dg.AutomationCondition.eager() | dg.AutomationCondition.code_version_changed()


def artifact_root(context) -> Path:
    """Where artifacts live: RHYTHM_ARTIFACTS, else the Dagster instance's storage directory."""
    override = os.environ.get("RHYTHM_ARTIFACTS")
    root = Path(override) if override else Path(context.instance.storage_directory()) / "rhythm"
    root.mkdir(parents=True, exist_ok=True)
    return root
