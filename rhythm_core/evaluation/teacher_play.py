"""The teacher on the evaluation seeds: the "teacher ceiling" row of the evaluation.

Opt-in (`include_teacher`): the configured teacher (Bayesian, or a paid OpenAI-compatible model)
plays the evaluation seeds of every condition, so a student is compared with its own teacher on the
same held-out seeds. This is the one place teacher episodes may use evaluation seeds, and only
evaluation seeds: every seed is checked to be one, and each record is stamped `purpose:
"evaluation"`, which the SFT dataset refuses — these episodes never become training data
(teacher_trajectories keeps refusing evaluation seeds).

Like teacher_trajectories the play is resumable and exactly-once: episodes are appended to a work
file per (teacher, condition, seeds) under `<root>/eval_teacher/work/`, so an interrupted or
over-budget evaluation keeps what it paid for and the next attempt plays only the missing seeds.
The resource's `max_cost_usd` is one budget for the whole play, across conditions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from rhythm_env.sim.spec import ENV_VERSION

from ..store import sha256_file, write_jsonl
from ..teacher.budget import usage_totals
from ..teacher.run import run_teacher
from ..teacher.settings import TeacherSettings
from ..teacher.trajectories import read_trajectories

TEACHER_PLAYER = "teacher"
EVALUATION_PURPOSE = "evaluation"


def teacher_identity(settings: TeacherSettings) -> dict:
    return {**settings.describe(), "role": "teacher"}


def work_file(root, settings: TeacherSettings, condition: str, seeds_spec: str) -> Path:
    key = f"{EVALUATION_PURPOSE}|{settings.play_key}|{condition}|{seeds_spec}|{ENV_VERSION}"
    return Path(root) / "eval_teacher" / "work" / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsonl"


def play_teacher(settings: TeacherSettings, seeds: dict[str, str], staged, root, *,
                 log: Callable[[str], None] | None = None, client=None) -> dict:
    """Play the teacher on each condition's evaluation seeds into `staged`/teacher__<condition>.jsonl;
    returns the files' manifest entries (as `play_condition`). Raises ValueError for a seed that is
    not an evaluation seed, StageIncomplete (`rhythm_core.store`) when seeds failed or the cost guard
    stopped the run."""
    from rhythm_env.sim.conditions import eval_seed_list

    log = log or (lambda message: None)
    plan = {condition: eval_seed_list(condition, spec) for condition, spec in seeds.items()}  # all checked first
    remaining = settings.max_cost_usd
    files, spent = {}, 0.0
    for condition, wanted in plan.items():
        work = work_file(root, settings, condition, seeds[condition])
        run_settings = settings if remaining is None else replace(settings, max_cost_usd=max(0.0, remaining - spent))
        result = run_teacher(run_settings, condition, wanted, work, log=log, client=client, purpose=EVALUATION_PURPOSE)
        spent += result.cost_usd
        result.raise_if_incomplete(f"teacher play on the {condition} evaluation seeds",
                                   {"condition": condition, "work_file": str(work), "cost_usd_this_run": round(spent, 6)})
        keep = set(wanted)
        records = sorted((r for r in read_trajectories(work, allow_truncated_tail=False).records if r["seed"] in keep),
                         key=lambda r: r["seed"])
        file = f"{TEACHER_PLAYER}__{condition}.jsonl"
        write_jsonl(Path(staged) / file, records)
        usage = usage_totals(records)
        invalid = float(np.mean([r["invalid"] for r in records]))
        files[file] = {"player": TEACHER_PLAYER, "condition": condition, "episodes": len(records),
                       "invalid_rate": invalid, "sha256": sha256_file(Path(staged) / file),
                       "teacher_id": settings.teacher_id, "cost_usd": usage["cost_usd"],
                       "cache_hit_fraction": usage["cache_hit_fraction"]}
        log(f"teacher {settings.teacher_id} on {condition}: {len(records)} episodes ({result.skipped} resumed), "
            f"invalid answers {invalid:.1%}, cost ${files[file]['cost_usd']:.4f}")
    return files
