"""A training stage on many data-parallel processes: where this process stands, its process group,
and what only rank 0 does.

torchrun (rhythm_core.compute.launch) starts the ranks and sets RANK / WORLD_SIZE / LOCAL_RANK; the
stage opens the process group itself so that every collective has a bounded timeout (transformers
passes none on CPU), and the Trainer then uses that group. The recipe means the same on 1 or N
processes: `split_batch` keeps the global batch (per device × processes × accumulation) the config's.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from datetime import timedelta

# How long a collective waits for a rank that stopped answering before the stage fails.
TIMEOUT_VAR = "RHYTHM_COLLECTIVE_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 600


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def rank() -> int:
    return int(os.environ.get("RANK", "0") or 0)


def is_main() -> bool:
    return rank() == 0


def collective_timeout_s() -> int:
    value = os.environ.get(TIMEOUT_VAR, "")
    if value and (not value.isdigit() or int(value) <= 0):
        raise ValueError(f"{TIMEOUT_VAR}={value!r}: expected a whole number of seconds > 0")
    return int(value) if value else DEFAULT_TIMEOUT_S


@contextlib.contextmanager
def process_group() -> Iterator[None]:
    """The ranks' process group for the block (gloo on CPU, NCCL on CUDA); nothing on one process."""
    import torch
    import torch.distributed as dist

    if world_size() == 1 or dist.is_initialized():
        yield
        return
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(seconds=collective_timeout_s()))
    try:
        yield
    finally:
        dist.destroy_process_group()


def barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def split_batch(per_device: int, accumulation: int, processes: int, *, what: str = "per_device_train_batch_size") -> tuple[int, int]:
    """(per-device batch, accumulation steps) on `processes` ranks that give the global batch one
    process gets from (`per_device`, `accumulation`): the batch split over the ranks where it divides,
    else the accumulation steps."""
    if processes == 1:
        return per_device, accumulation
    if per_device % processes == 0:
        return per_device // processes, accumulation
    if accumulation % processes == 0:
        return per_device, accumulation // processes
    raise ValueError(f"{what} {per_device} × gradient_accumulation_steps {accumulation} = {per_device * accumulation} "
                     f"sequences a step cannot be split evenly over {processes} processes; choose a process count "
                     "that divides one of them")


# How the ranks hold the model (set by whoever launches them: ComputeResource.sharding): "" each a
# whole copy (DDP); "full_shard" FSDP2, parameters, gradients and optimizer state split over the ranks,
# for a student one device cannot hold. Both keep the recipe's global batch.
SHARDING_VAR = "RHYTHM_SHARDING"
SHARDINGS = ("", "full_shard")


def check_sharding(sharding: str, processes: int) -> None:
    if sharding not in SHARDINGS:
        raise ValueError(f"sharding={sharding!r}: allowed: {', '.join(repr(s) for s in SHARDINGS)}")
    if sharding and processes < 2:
        raise ValueError(f"sharding={sharding!r} splits the model over processes: it needs processes ≥ 2, not {processes}")


def sharding_args() -> dict:
    """The TrainingArguments fields of this launch's sharding (none for DDP or one process)."""
    sharding = os.environ.get(SHARDING_VAR, "")
    check_sharding(sharding, world_size())
    if not sharding:
        return {}
    # FSDP2 wraps each decoder layer (the model's _no_split_modules); its own activation checkpointing
    # replaces the Trainer's (which would add an all-gather to the backward pass).
    return {"fsdp": "full_shard auto_wrap",
            "fsdp_config": {"version": 2, "reshard_after_forward": True, "state_dict_type": "FULL_STATE_DICT"}}
