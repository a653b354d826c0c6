"""DAgger labels from the free teacher: a student plays, the Bayesian teacher labels every state it
reaches.

The Bayesian teacher's posterior depends only on the observed history (meters and the actions
taken), so it can say what it would answer in any state, including the states a student reaches by
its own mistakes, which teacher data never shows. `label_student_rollouts` plays the student on
training seeds in lockstep; the teacher is fed the same observations and the actions the student
really took (`BayesAgent.observe_actions`), and its answer at each step is the label.

Records use the trajectory schema with `purpose: "dagger"` and these meanings:

- `actions`, `meters`, `steps[t].action`, `steps[t].invalid`: what was executed (the student's
  action, or the fallback when its answer was unusable), so a replay reproduces the episode;
- `steps[t].raw_answer`, `steps[t].parsed`, `beliefs`: the teacher's label for the state;
- `steps[t].student_answer`: what the student answered there; `student`: who played.

Only the offline Bayesian teacher labels here: with a paid API teacher every label is a billed
request, which this path does not make (it would have to go through `run_teacher`'s cost guard).
Evaluation seeds are refused.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..agents.base import Agent
from ..env.conditions import check_training_seeds
from ..env.spec import BELIEF_DIMS
from ..protocol import parse_answer
from .run import TeacherSettings, bayes_records

DAGGER_PURPOSE = "dagger"


def label_student_rollouts(student: Agent, condition: str, seeds: Sequence[int], *,
                           student_id: str = "student") -> list[dict]:
    """Play `student` on `seeds` of `condition` (lockstep) and label every step with the Bayesian
    teacher's answer in that state; one `purpose: "dagger"` trajectory record per episode."""
    seeds = np.asarray(seeds, dtype=np.int64)
    if len(seeds) == 0:
        raise ValueError("label_student_rollouts needs at least one seed")
    check_training_seeds(condition, [int(s) for s in seeds])
    records = bayes_records(TeacherSettings(), condition, seeds, purpose=DAGGER_PURPOSE, student=student)
    for record in records:
        record["student"] = {"id": student_id}
    return records


def label_agreement(records: list[dict]) -> dict:
    """How far the student is from its labels on these rollouts: the share of steps where it took the
    teacher's action, its stated belief's mean absolute error to the teacher's, its invalid rate."""
    same, gaps, invalid, total = 0, [], 0, 0
    for record in records:
        for step in record["steps"]:
            total += 1
            invalid += bool(step["invalid"])
            same += step["action"] == step["parsed"]["action"] and not step["invalid"]
            stated = parse_answer(step.get("student_answer") or "")
            if stated.valid and stated.belief is not None:
                gaps.append(np.mean([abs(stated.belief[d] - step["parsed"]["belief"][d]) for d in BELIEF_DIMS]))
    return {"action_agreement": same / total if total else None,
            "belief_mae_vs_teacher": float(np.mean(gaps)) if gaps else None,
            "invalid_rate": invalid / total if total else None, "labeled_steps": total}
