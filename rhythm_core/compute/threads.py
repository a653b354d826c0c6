"""How many CPU threads a torch-running step may use, so that steps running at the same time on one
machine share its cores instead of oversubscribing them.

torch (and the OpenMP / BLAS pools under it) sizes its thread pool to the machine's cores, per
process. Three evaluation steps running in parallel processes on 2 cores therefore run 6 spinning
OpenMP threads on 2 cores, and each step runs many times slower than alone. The rule here: a step gets the cores
it may use (CPU affinity and the cgroup CPU quota of a container or Kubernetes pod) divided by how
many torch steps run at once.

    budget = thread_budget(steps_at_once=torch_steps_at_once())
    limit_threads(budget)                  # this process, before it runs torch
    env = thread_env(budget)               # for a child process (OMP_NUM_THREADS & co)
"""

from __future__ import annotations

import math
import os
from pathlib import Path

# Below two threads per step, running steps side by side stops paying on CPU: in
# benchmarks/executor_paths.py (benchmarks/README.md, D31), three single-thread evaluation steps
# two at a time were no faster than one two-thread step at a time.
MIN_THREADS_PER_STEP = 2
# Environment variables read by the thread pools torch, NumPy's BLAS and tokenizers start with.
THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
# Overrides the detected core count everywhere here (e.g. to share a big machine between deployments).
CORES_ENV = "RHYTHM_CPU_CORES"


def _cgroup_quota_cores(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The CPU quota of this process's cgroup in cores (cgroup v2 `cpu.max` or v1 cfs files), or
    None when unlimited or unknown. A Kubernetes CPU limit shows up here, not in the affinity mask."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota <= 0 else quota / period
    except (OSError, ValueError):
        return None


def available_cores(cgroup_root: Path = Path("/sys/fs/cgroup")) -> int:
    """Cores this process may run on: RHYTHM_CPU_CORES if set, else the CPU affinity mask capped
    by the cgroup CPU quota (rounded up: a 1.5-core quota runs 2 threads)."""
    override = os.environ.get(CORES_ENV)
    if override:
        try:
            cores = int(override)
        except ValueError:
            raise ValueError(f"{CORES_ENV}={override!r} is not a whole number of cores") from None
        if cores < 1:
            raise ValueError(f"{CORES_ENV}={override!r}: at least 1 core")
        return cores
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    quota = _cgroup_quota_cores(cgroup_root)
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota)))
    return max(1, cores)


def torch_steps_at_once(cores: int | None = None, min_threads_per_step: int = MIN_THREADS_PER_STEP) -> int:
    """How many torch-running steps a machine with `cores` should run side by side: as many as
    keep at least `min_threads_per_step` threads each, and at least one."""
    cores = available_cores() if cores is None else cores
    return max(1, cores // max(1, min_threads_per_step))


def thread_budget(steps_at_once: int = 1, cores: int | None = None) -> int:
    """Threads for one torch-running step when `steps_at_once` such steps share `cores`."""
    if steps_at_once < 1:
        raise ValueError(f"steps_at_once must be at least 1, got {steps_at_once}")
    cores = available_cores() if cores is None else cores
    return max(1, cores // steps_at_once)


def thread_env(threads: int) -> dict[str, str]:
    """Environment for a child process that should use `threads` threads."""
    return {name: str(threads) for name in THREAD_ENV_VARS}


def limit_threads(threads: int) -> int:
    """Size this process's torch intra-op pool (and the env of any child it starts) to `threads`;
    returns the previous torch setting. Safe to call again with another value."""
    import torch

    if threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    os.environ.update(thread_env(threads))
    return previous
