"""Trajectory records (schema `rhythm-trajectory-1`, defined and read in `trajectories`): the one
place a step record and an episode record are built, for every teacher backend and for the
evaluation rollouts of students and baselines, so every writer gives the same keys in the same
order and the same teacher on the same seed gives the same bytes (no timing in a record).
"""

from __future__ import annotations

import hashlib

from rhythm_env.protocol import SYSTEM_PROMPT
from rhythm_env.sim.spec import ENV_VERSION, METERS

from .settings import TeacherSettings
from .trajectories import SCHEMA

SYSTEM_PROMPT_SHA256 = hashlib.sha256(SYSTEM_PROMPT.encode()).hexdigest()


def step_record(t, obs, prompt, raw, parsed, action, invalid, attempts, meters_after, usage) -> dict:
    """Step t: the observation it decided on, the prompt and raw answer (None for an agent without
    one), the parsed answer (None likewise), the action executed, the meters after it and its usage."""
    return {
        "step": t,
        "observation": obs.to_dict(),
        "prompt": prompt,
        "raw_answer": raw,
        "parsed": None if parsed is None else {
            "valid": parsed.valid,
            "action": parsed.action,
            "belief": parsed.belief,
            "reasoning": parsed.reasoning,
            "error": parsed.error,
        },
        "action": action,
        "invalid": invalid,
        "attempts": attempts,
        "meters_after": {m: float(v) for m, v in zip(METERS, meters_after)},
        "usage": usage,
    }


def episode_record(teacher: dict, condition, seed, steps, meters, beliefs, usage, *, protocol=None, request=None,
                   purpose=None) -> dict:
    """One episode played by `teacher` (an identity: backend, model, id). `protocol`, `request` and
    `purpose` are written only when given."""
    record = {"schema": SCHEMA, "env_version": ENV_VERSION, "condition": condition, "seed": int(seed),
              "teacher": teacher}
    if protocol is not None:
        record["protocol"] = protocol
    record.update({
        "steps": steps,
        "actions": [s["action"] for s in steps],
        "beliefs": beliefs,
        "invalid": [s["invalid"] for s in steps],
        "meters": [[float(v) for v in row] for row in meters],
        "usage": usage,
    })
    if request is not None:
        record["request"] = request
    if purpose is not None:
        record["purpose"] = purpose
    return record


def teacher_protocol(settings: TeacherSettings, **extra) -> dict:
    """A teacher record's `protocol`: the system prompt's hash, the prompt format and `extra`."""
    return {"system_prompt_sha256": SYSTEM_PROMPT_SHA256, "prompt_format": settings.prompt_format, **extra}
