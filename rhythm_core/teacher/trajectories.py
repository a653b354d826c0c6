"""Teacher trajectory files: one JSON line per complete episode, appended, resumable.

Schema "rhythm-trajectory-1" (one object per line):

    schema, env_version, condition, seed,
    teacher: {backend, model, id},
    protocol: {system_prompt_sha256, prompt_format?, structured_output?},
    steps: [{step, observation, prompt, raw_answer, parsed: {valid, action, belief, reasoning, error},
             action, invalid, attempts, meters_after,
             usage: {prompt_tokens, cached_prompt_tokens?, completion_tokens, reasoning_tokens?, requests, retries,
                     length_reasks?}}] x 28,
    actions: [28 names], beliefs: [28 x ({social, morning, work} | null)], invalid: [28 bools],
    meters: [29 x 5],
    usage: {prompt_tokens, cached_prompt_tokens?, completion_tokens, reasoning_tokens?, requests, retries,
            length_reasks?, cost_usd},
    request?: {token_param, temperature, reasoning_effort, max_tokens}   (openai/azure teachers)
    purpose?: "evaluation"   (the teacher's play on evaluation seeds: never training data)

Keys marked ? are optional when reading (files written before they existed stay readable; read
them with `usage.get(key, 0)`). `cached_prompt_tokens` is part of `prompt_tokens` and
`reasoning_tokens` part of `completion_tokens`, as the API reports and bills them; `cost_usd` is
the billed cost at the run's prices (cached prompt tokens at their own rate).

A crash can only leave a final line without its newline (each line goes out in one write followed
by fsync); on resume that tail is cut off and its episode redone. Any other bad line is an error
naming the file and line: nothing already written is discarded silently.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from rhythm_env.sim import VectorRhythmEnv
from rhythm_env.sim.conditions import CONDITIONS, check_seed
from rhythm_env.sim.episode import EpisodeBatch
from rhythm_env.sim.spec import ACTION_INDEX, ACTIONS, BELIEF_DIMS, ENV_VERSION, METERS, STEPS_PER_EPISODE

from ..errors import UserError
from ..store import jsonl_line

SCHEMA = "rhythm-trajectory-1"
_REQUIRED = ("schema", "env_version", "condition", "seed", "teacher", "steps", "actions", "beliefs", "invalid", "meters")


class TrajectoryError(UserError, ValueError):
    """A trajectory file or line is malformed; the message names the file and line."""


@dataclass
class TrajectoryFile:
    """Records read from a file, with the byte offset where the complete lines end."""

    path: Path
    records: list[dict]
    complete_bytes: int
    truncated_tail: bool  # the last line had no newline (a crash mid-write)


def _fail(path, line_no, message) -> TrajectoryError:
    return TrajectoryError(f"{path}:{line_no}: {message}")


def validate_record(record, path="<record>", line_no=0) -> dict:
    """Check one episode record's schema (not its replay); return it or raise TrajectoryError."""
    if not isinstance(record, dict):
        raise _fail(path, line_no, f"expected a JSON object, got {type(record).__name__}")
    missing = [k for k in _REQUIRED if k not in record]
    if missing:
        raise _fail(path, line_no, f"missing field(s): {', '.join(missing)}")
    if record["schema"] != SCHEMA:
        raise _fail(path, line_no, f"schema {record['schema']!r}, expected {SCHEMA!r}")
    if record["env_version"] != ENV_VERSION:
        raise _fail(path, line_no, f"env_version {record['env_version']!r}, this code simulates {ENV_VERSION!r}")
    if record["condition"] not in CONDITIONS:
        raise _fail(path, line_no, f"unknown condition {record['condition']!r}; allowed: {', '.join(CONDITIONS)}")
    try:
        check_seed(record["condition"], record["seed"])
    except (ValueError, TypeError) as exc:
        raise _fail(path, line_no, str(exc)) from None
    for field, length in (("steps", STEPS_PER_EPISODE), ("actions", STEPS_PER_EPISODE),
                          ("beliefs", STEPS_PER_EPISODE), ("invalid", STEPS_PER_EPISODE),
                          ("meters", STEPS_PER_EPISODE + 1)):
        if not isinstance(record[field], list) or len(record[field]) != length:
            raise _fail(path, line_no, f"field {field!r} must be a list of {length} entries")
    for t, action in enumerate(record["actions"]):
        if action not in ACTIONS:
            raise _fail(path, line_no, f"step {t}: unknown action {action!r}; allowed actions: {', '.join(ACTIONS)}")
    for t, belief in enumerate(record["beliefs"]):
        if belief is None:
            continue
        if not isinstance(belief, dict) or set(belief) != set(BELIEF_DIMS) or not all(
            isinstance(belief[d], int | float) and 0.0 <= belief[d] <= 1.0 for d in BELIEF_DIMS
        ):
            raise _fail(path, line_no, f"step {t}: belief must map {', '.join(BELIEF_DIMS)} to numbers in [0, 1]")
    meters = np.asarray(record["meters"], dtype=object)
    if meters.shape != (STEPS_PER_EPISODE + 1, len(METERS)):
        raise _fail(path, line_no, f"field 'meters' must be {STEPS_PER_EPISODE + 1} x {len(METERS)} numbers")
    return record


def read_trajectories(path, *, allow_truncated_tail: bool = True) -> TrajectoryFile:
    """Read and schema-check every line. A final line without a newline is treated as a crash
    leftover (dropped, flagged) when allow_truncated_tail, else it is an error."""
    path = Path(path)
    if not path.exists():
        raise TrajectoryError(f"{path}: no such trajectory file")
    data = path.read_bytes()
    records, offset, seen = [], 0, {}
    lines = data.split(b"\n")
    truncated = bool(lines and lines[-1])  # text after the last newline
    for line_no, raw in enumerate(lines[:-1], start=1):
        offset += len(raw) + 1
        if not raw.strip():
            raise _fail(path, line_no, "empty line")
        try:
            record = orjson.loads(raw)  # faster than json.loads on these large files
        except orjson.JSONDecodeError as exc:
            raise _fail(path, line_no, f"not valid JSON ({exc})") from None
        validate_record(record, path, line_no)
        key = (record["condition"], record["seed"])
        if key in seen:
            raise _fail(path, line_no, f"seed {record['seed']} already written on line {seen[key]}")
        seen[key] = line_no
        records.append(record)
    if truncated and not allow_truncated_tail:
        raise _fail(path, len(lines), "incomplete last line (no newline): the file was cut mid-write")
    return TrajectoryFile(path, records, offset, truncated)


def replay(condition: str, records: list[dict], on_step=None) -> list[tuple[int, int]]:
    """Re-simulate `records` (episodes of `condition`) from their seeds and actions in one vector env,
    calling `on_step(t, env)` before step t's actions. Returns (episode index, first differing step)
    for every episode whose recorded meters do not match the replay."""
    env = VectorRhythmEnv(condition)
    env.reset(np.array([r["seed"] for r in records], dtype=np.int64))
    actions = np.array([[ACTION_INDEX[a] for a in r["actions"]] for r in records], dtype=np.int64)
    for t in range(STEPS_PER_EPISODE):
        if on_step is not None:
            on_step(t, env)
        env.step(actions[:, t])
    recorded = np.array([r["meters"] for r in records], dtype=np.float64)
    close = np.isclose(recorded, env.meters_history, atol=1e-9).all(axis=2)  # (episodes, steps + 1)
    return [(int(i), int(np.argmin(close[i]))) for i in np.flatnonzero(~close.all(axis=1))]


def replay_check(records: list[dict], path="<records>") -> None:
    """Re-simulate every episode from its seed and actions; the recorded meters must match exactly."""
    by_condition: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        by_condition.setdefault(r["condition"], []).append(i)
    for condition, index in by_condition.items():
        bad = replay(condition, [records[i] for i in index])
        if bad:
            first = index[bad[0][0]]
            raise TrajectoryError(
                f"{path}: episode {first + 1} (seed {records[first]['seed']}): recorded meters do not match a replay "
                f"of its actions in {ENV_VERSION}; {len(bad)} episode(s) differ"
            )


def to_episode_batch(records: list[dict], condition: str, agent: str = "teacher") -> EpisodeBatch:
    return EpisodeBatch.from_records(condition, [r for r in records if r["condition"] == condition], agent)


def check_resumable(path, *, teacher_id: str | None = None, purpose: str | None = None) -> TrajectoryFile:
    """Read an existing trajectory file that a run is about to extend, refusing one it must not touch:
    a file that is not trajectory records (a cut last line is a crash's leftover only if it starts a
    record), or records of another teacher or purpose (evaluation play never mixes with training data)."""
    existing = read_trajectories(path)
    if existing.truncated_tail:
        with open(path, "rb") as fh:
            fh.seek(existing.complete_bytes)
            head = fh.read(2)
        if head != b'{"':
            raise TrajectoryError(f"{path}: the last line is not a trajectory record; this is not a teacher "
                                  "trajectory file (refusing to change it)")
    check_purpose = purpose is not None or teacher_id is not None
    for line_no, record in enumerate(existing.records, start=1):
        if check_purpose:
            found = record.get("purpose") or "training"
            if found != (purpose or "training"):
                raise TrajectoryError(f"{path}, line {line_no}: holds {found} records; this run writes "
                                      f"{purpose or 'training'} records (use another file)")
        played_by = (record.get("teacher") or {}).get("id")
        if teacher_id is not None and played_by != teacher_id:
            raise TrajectoryError(f"{path}, line {line_no}: was played by teacher {played_by!r}, not {teacher_id!r} "
                                  "(use another file)")
    return existing


class TrajectoryWriter:
    """Appends complete episodes to a JSONL file, resuming what is already there.

    Opening checks that an existing file is a trajectory file of the same kind (every record's
    teacher id and purpose equal `teacher_id` and `purpose`, when given), cuts an incomplete tail left
    by a crash (reported in `dropped_tail`), keeps every complete line, and refuses a seed that is
    already written. A new file is created at the first write, so a run that writes nothing leaves none.
    """

    def __init__(self, path, *, teacher_id: str | None = None, purpose: str | None = None):
        self.path = Path(path)
        self.dropped_tail = False
        self._fh = None
        self._written = set()
        if self.path.exists():
            existing = check_resumable(self.path, teacher_id=teacher_id, purpose=purpose)
            if existing.truncated_tail:
                with open(self.path, "r+b") as fh:
                    fh.truncate(existing.complete_bytes)
                self.dropped_tail = True
            self._written = {(r["condition"], r["seed"]) for r in existing.records}

    def has(self, condition: str, seed: int) -> bool:
        return (condition, int(seed)) in self._written

    def write(self, record: dict) -> None:
        self.write_many([record])

    def write_many(self, records: list[dict]) -> None:
        """Append `records`, then fsync once: a crash leaves at most a cut tail, which the next open drops."""
        keys = set()
        for record in records:
            validate_record(record, self.path, "new")
            key = (record["condition"], record["seed"])
            if key in self._written or key in keys:
                raise TrajectoryError(f"{self.path}: seed {record['seed']} ({record['condition']}) is already written")
            keys.add(key)
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "ab")
        for record in records:
            self._fh.write(jsonl_line(record).encode())  # one write per line
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._written.update(keys)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

