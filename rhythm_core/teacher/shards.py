"""Teacher data in shards: a shard is one contiguous range of training seeds (`"1000-2999"`) that the
teacher stage plays, publishes and resumes on its own (`teacher_stage`), so growing the data plays only
the new shards. Readers take the shards they are given, checked and merged in seed order."""

from __future__ import annotations

import hashlib
import re

from rhythm_env.sim.conditions import check_training_seeds

from ..store import verify_artifact
from .trajectories import read_trajectories

SHARD_FORM = re.compile(r"^(\d+)-(\d+)$")


def shard_range(key: str, condition: str = "continuous") -> range:
    """The seeds of shard `key` (`first-last`, inclusive), refused with a message naming the key unless
    it is one contiguous range of `condition`'s training seeds (no evaluation or tuning seed)."""
    match = SHARD_FORM.match(key.strip())
    if not match:
        raise ValueError(f"teacher shard {key!r}: expected one range of training seeds, first-last (e.g. 3000-3499)")
    first, last = int(match.group(1)), int(match.group(2))
    if last < first:
        raise ValueError(f"teacher shard {key!r}: its last seed is before its first")
    seeds = range(first, last + 1)
    try:
        check_training_seeds(condition, seeds)
    except ValueError as exc:
        raise ValueError(f"teacher shard {key!r}: {exc}") from None
    return seeds


def check_disjoint(keys) -> None:
    """Refuse shards that share a seed (their weeks would be trained on twice), naming the first pair."""
    ordered = sorted(((shard_range(k), k) for k in keys), key=lambda pair: (pair[0].start, pair[0].stop))
    for (before, key_before), (after, key_after) in zip(ordered, ordered[1:]):
        if after.start <= before[-1]:
            raise ValueError(f"teacher shards {key_before} and {key_after} overlap (seed {after.start}): "
                             "a seed belongs to one shard; remove one of them")


def split_range(first: int, last: int, size: int) -> list[str]:
    """`first`-`last` as shards of `size` seeds (the last may be shorter)."""
    if size < 1:
        raise ValueError(f"shard size must be at least 1, got {size}")
    return [f"{start}-{min(start + size - 1, last)}" for start in range(first, last + 1, size)]


def compact_seeds(keys) -> str:
    """The shards' seeds as one seed spec, adjacent shards joined (`1000-2999,3000-3099` -> `1000-3099`)."""
    spans: list[list[int]] = []
    for seeds in sorted((shard_range(k) for k in keys), key=lambda r: r.start):
        if spans and seeds.start == spans[-1][1] + 1:
            spans[-1][1] = seeds[-1]
        else:
            spans.append([seeds.start, seeds[-1]])
    return ",".join(f"{a}-{b}" for a, b in spans)


def ordered_shards(shards: dict[str, dict], chosen=None) -> list[dict]:
    """The published shards `chosen` (their keys; None or empty: all of `shards`) in seed order, each the
    teacher stage's result; a chosen shard that is not published, or overlapping shards, are refused."""
    keys = list(chosen) if chosen else list(shards)
    missing = [k for k in keys if k not in shards]
    if missing:
        raise ValueError(f"teacher shard {missing[0]} is not published ({len(missing)} such); published: "
                         + (", ".join(sorted(shards, key=lambda k: shard_range(k).start)) or "none"))
    if not keys:
        raise ValueError("no teacher shard is published: add a shard of training seeds and materialize it first")
    check_disjoint(keys)
    return [shards[k] for k in sorted(keys, key=lambda k: shard_range(k).start)]


def teacher_data(shards: list[dict]) -> dict:
    """One view of several published shards (each a teacher stage result, in seed order): what the readers
    record of their source. One shard is its own result, as the stage published it."""
    if len(shards) == 1:
        return shards[0]
    conditions = {s["condition"] for s in shards}
    if len(conditions) != 1:
        raise ValueError(f"teacher shards of several conditions ({', '.join(sorted(conditions))}): one at a time")
    versions = [s["version"] for s in shards]
    return {"shards": shards, "condition": conditions.pop(), "seeds": compact_seeds(s["seeds"] for s in shards),
            "version": hashlib.sha256("|".join(versions).encode()).hexdigest()[:16],
            "path": [s["path"] for s in shards], "files_digest": [s.get("files_digest") for s in shards]}


def teacher_records(data: dict) -> list[dict]:
    """Every episode of `teacher_data` (one shard or several), each shard checked against its record and
    the digest its materialization recorded first, in seed order."""
    shards = data.get("shards", [data])
    records = []
    for shard in shards:
        verify_artifact(shard["path"], shard.get("files_digest"))
        records.extend(read_trajectories(shard["path"], allow_truncated_tail=False).records)
    if len(shards) > 1:
        records.sort(key=lambda r: r["seed"])
    return records
