"""What a built dataset holds, read back from it: its episodes per split, any evaluation or tuning
seeds among them (`check_no_eval_seeds`), its `content_hash`, its counts (`dataset_summary`) and
`seed_ranges`."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

import datasets

from rhythm_env.sim.conditions import EVAL_SEEDS, TUNING_SEEDS


def _episode_keys(ds: datasets.Dataset) -> list[tuple[str, int]]:
    if len(ds) == 0:
        return []
    return sorted({(c, int(s)) for c, s in zip(ds["condition"], ds["seed"])})


def check_no_eval_seeds(dataset_dict) -> list[tuple[str, int]]:
    """(condition, seed) pairs of any split that are evaluation or tuning seeds, the seeds training data
    never comes from; [] means the data is clean."""
    episodes = episodes_by_split(dataset_dict)
    return sorted(eval_seed_hits(episodes) + tuning_seed_hits(episodes))


def episodes_by_split(dataset_dict) -> dict[str, list[tuple[str, int]]]:
    """Per split, its sorted (condition, seed) episode keys."""
    return {split: _episode_keys(dataset_dict[split]) for split in dataset_dict}


def eval_seed_hits(episodes: dict[str, list[tuple[str, int]]]) -> list[tuple[str, int]]:
    """The (condition, seed) pairs among `episodes` (as `episodes_by_split` gives them) that are evaluation seeds."""
    return _hits(episodes, EVAL_SEEDS)


def tuning_seed_hits(episodes: dict[str, list[tuple[str, int]]]) -> list[tuple[str, int]]:
    """The (condition, seed) pairs among `episodes` that are tuning seeds (conditions.TUNING_SEEDS)."""
    return _hits(episodes, TUNING_SEEDS)


def _hits(episodes: dict[str, list[tuple[str, int]]], reserved: dict[str, range]) -> list[tuple[str, int]]:
    return sorted({(c, s) for keys in episodes.values() for c, s in keys if s in reserved.get(c, ())})


def content_hash(dataset_dict) -> str:
    """sha256 of the content: per split (sorted by name), the sorted digests of each row's canonical
    JSON (sorted keys, exact floats). Independent of row order, dict order, time and file layout."""
    total = hashlib.sha256()
    for split in sorted(dataset_dict):
        ds = dataset_dict[split]
        digests = sorted(
            hashlib.sha256(
                json.dumps(row, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
            ).digest()
            for row in ds
        )
        total.update(f"split:{split}:{len(digests)}\n".encode())
        for d in digests:
            total.update(d)
    return total.hexdigest()


def dataset_summary(dataset_dict, episodes: dict | None = None) -> dict:
    """Examples and episodes per split (`episodes`: the splits' episode keys, if already read)."""
    episodes = episodes if episodes is not None else episodes_by_split(dataset_dict)
    return {
        "examples": {split: len(dataset_dict[split]) for split in sorted(dataset_dict)},
        "episodes": {split: len(episodes[split]) for split in sorted(dataset_dict)},
    }


def seed_ranges(seeds: Iterable[int]) -> str:
    """[1000, 1001, 1002, 1005] -> "1000-1002, 1005"."""
    seeds = sorted(set(int(s) for s in seeds))
    parts, i = [], 0
    while i < len(seeds):
        j = i
        while j + 1 < len(seeds) and seeds[j + 1] == seeds[j] + 1:
            j += 1
        parts.append(str(seeds[i]) if i == j else f"{seeds[i]}-{seeds[j]}")
        i = j + 1
    return ", ".join(parts) if parts else "none"
