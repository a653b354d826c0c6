"""Settings fixed when the definitions load.

RHYTHM_GRADER picks the active grader (default v3). Its name and the hash of the graders' code are
part of the code version of every asset that grades, so switching graders (or editing one) marks
exactly those assets unsynced. Every asset's code version is computed from the code (`code_version`).
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from rhythm_core.code_version import grader_version, source_hash
from rhythm_env.graders import DEFAULT_GRADER, GRADERS

ACTIVE_GRADER = os.environ.get("RHYTHM_GRADER", DEFAULT_GRADER)
if ACTIVE_GRADER not in GRADERS:
    raise ValueError(f"RHYTHM_GRADER={ACTIVE_GRADER!r} is not a grader; allowed: {', '.join(GRADERS)}")


# Assets that grade carry this tag: the `regrade` job selects by it, so a new grading asset joins
# the job by declaring the tag, not by editing a list.
GRADING_TAGS = {"rhythm/grades": "true"}
# Grading assets follow their inputs and their grader: re-run when an upstream updates or when the
# code version (which holds the grader version) changes. The daemon of `dagster dev` evaluates this.
GRADING_AUTOMATION = dg.AutomationCondition.eager() | dg.AutomationCondition.code_version_changed()


def artifact_root(context) -> Path:
    """The local folder this process's stages publish into: the artifact root (RHYTHM_ARTIFACTS, else
    the instance's storage/rhythm), or an object store's local cache (rhythm_core/store/)."""
    from rhythm_pipeline.defs.resources import artifact_store_from_env

    root = artifact_store_from_env().store(context.instance).cache
    root.mkdir(parents=True, exist_ok=True)
    return root


def code_version(name: str, *runs, config: type[dg.Config] | None = None, grader: str | None = None,
                 **extra) -> str:
    """`<name>-<hash>`: the hash of the normalised source of every rhythm_core module that `runs` (the
    functions an asset calls, or module names, for code that only its subprocess imports) import,
    and of `config`'s defaults and `extra`; a grading asset adds `|grader=<name>:<hash>`. A change to
    what runs marks the asset unsynced; a comment or docstring does not."""
    modules = {run if isinstance(run, str) else run.__module__ for run in runs}
    defaults = config().model_dump() if config is not None else {}
    version = f"{name}-{source_hash(modules, {'defaults': defaults, **extra})}"
    return version + (f"|grader={grader_version(grader)}" if grader else "")
