"""One condition's evaluation play sharded over workers (processes on the CPU, one GPU each on CUDA),
and the shards' files merged into what one worker writes.

The seeds (sorted, as `parse_seeds` gives them) are split into contiguous runs, one per worker
(`split_seeds`); each worker plays its run with `entry.play_students` into a folder of its own
(`shard_configs` gives each its config); `merge_played` joins every player's files in shard order,
so a merged file holds the same lines in the same order as one worker's, and its manifest entry is
one worker's entry (episodes, invalid rate and sha256 computed over the merged records).

The records are one worker's only where a week's answers do not depend on which other weeks are
played beside it: greedy decoding, whose batched answers equal the sequential ones (tests/test_eval.py
checks it on the CPU). A sampled play draws each generate call's randomness from the sampling seed
plus the call's first row, which moves with the split, so it is refused (`shard_configs`). The
kernels must agree too: on the CPU a worker's thread count can change a reduction's order, on CUDA
the batch shape can (tests/test_eval_shards.py compares them on the CPU).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from rhythm_env.sim.conditions import eval_seed_list

from ..store import sha256_file


def split_seeds(seeds: list[int], workers: int) -> list[list[int]]:
    """`seeds` in contiguous runs, one per worker, their sizes differing by at most one (the first
    ones larger); fewer runs than `workers` when there are fewer seeds, never an empty one."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    if not seeds:
        raise ValueError("no seeds to split")
    count = min(workers, len(seeds))
    size, larger = divmod(len(seeds), count)
    runs, start = [], 0
    for index in range(count):
        end = start + size + (1 if index < larger else 0)
        runs.append(list(seeds[start:end]))
        start = end
    return runs


def seeds_spec(seeds: list[int]) -> str:
    """The seed spec (`parse_seeds`'s form: "0-49,60,70-72") naming exactly `seeds`."""
    parts: list[str] = []
    ordered = sorted(set(int(s) for s in seeds))
    start = previous = None
    for seed in [*ordered, None]:
        if start is not None and (seed is None or seed != previous + 1):
            parts.append(str(start) if start == previous else f"{start}-{previous}")
            start = None
        if seed is not None and start is None:
            start = seed
        previous = seed
    return ",".join(parts)


def shard_configs(config: dict, workers: int) -> list[dict]:
    """`config` (condition, seeds, sampling, ...) as one config per worker, each naming its run of the
    seeds. Refuses sampled decoding with more than one worker (the answers would move with the split)."""
    temperature = float((config.get("sampling") or {}).get("temperature") or 0.0)
    if workers > 1 and temperature > 0:
        raise ValueError(f"play workers {workers}: sharded play gives one worker's records only under greedy "
                         f"decoding, and sampling.temperature is {temperature}; play on one worker "
                         "(play_workers=1) or decode greedily (temperature 0)")
    runs = split_seeds(eval_seed_list(config["condition"], config["seeds"]), workers)
    return [{**config, "seeds": seeds_spec(run)} for run in runs]


def merge_played(shard_dirs: list, shard_files: list[dict], out_dir) -> dict:
    """Join the shards' played files (shard i: its folder `shard_dirs[i]`, its manifest entries
    `shard_files[i]`, in seed order) into `out_dir`; returns the merged files' manifest entries, in
    the first shard's order. Every shard must have played the same files."""
    if not shard_dirs or len(shard_dirs) != len(shard_files):
        raise ValueError(f"{len(shard_dirs)} shard folders for {len(shard_files)} shard manifests")
    names = list(shard_files[0])
    for index, files in enumerate(shard_files[1:], start=1):
        if sorted(files) != sorted(names):
            raise ValueError(f"shard {index} played {sorted(files)}, shard 0 {sorted(names)}: the shards "
                             "must play the same players")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    merged = {}
    for name in names:
        data = b"".join(_shard_file(Path(folder) / name, files[name]) for folder, files in zip(shard_dirs, shard_files))
        (out / name).write_bytes(data)
        records = [json.loads(line) for line in data.splitlines()]
        entry = {key: value for key, value in shard_files[0][name].items()
                 if key not in ("episodes", "invalid_rate", "sha256")}
        for index, files in enumerate(shard_files):
            others = {key: value for key, value in files[name].items() if key in entry}
            if others != entry:
                raise ValueError(f"{name}: shard {index}'s entry {others} differs from shard 0's {entry}")
        # as rollouts._play_file computes them over one worker's records
        merged[name] = {"player": entry.pop("player"), "condition": entry.pop("condition"), "episodes": len(records),
                        "invalid_rate": float(np.mean([r["invalid"] for r in records])),
                        "sha256": sha256_file(out / name), **entry}
    return merged


def _shard_file(path: Path, entry: dict) -> bytes:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the shard's manifest names it, but it is not there")
    data = path.read_bytes()
    if sha256_file(path) != entry["sha256"]:
        raise ValueError(f"{path} does not match its shard's manifest entry (sha256)")
    if data and not data.endswith(b"\n"):
        raise ValueError(f"{path}: its last line is incomplete")
    return data


def visible_gpus() -> list[str]:
    """The CUDA devices a worker may be given: CUDA_VISIBLE_DEVICES where it is set, else every
    device torch counts (none with a CPU build of torch)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [device.strip() for device in visible.split(",") if device.strip() not in ("", "-1")]
    import torch

    return [str(index) for index in range(torch.cuda.device_count())]


def worker_resources(workers: int, threads: int, gpus: list[str]) -> list[dict]:
    """Each worker's torch threads and environment: `threads` shared out (at least 1 each) and, where
    there are `gpus`, one GPU each (CUDA_VISIBLE_DEVICES). More workers than GPUs are refused."""
    from ..compute.threads import thread_env

    if gpus and workers > len(gpus):
        raise ValueError(f"play workers {workers}: more than the {len(gpus)} visible GPU(s) ({','.join(gpus)}); "
                         "give each worker a GPU of its own (play_workers <= the GPU count)")
    each = max(1, threads // workers)
    return [{"threads": each, "env": {**thread_env(each), **({"CUDA_VISIBLE_DEVICES": gpus[index]} if gpus else {})}}
            for index in range(workers)]
