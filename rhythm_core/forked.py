"""Independent CPU work in forked worker processes: the one rule for when they are used, and the pool.

Fork, not spawn: a spawned worker would import the package (and torch) again, seconds of what it
saves. Where fork is not the platform's safe default (macOS, Windows) the work runs in the calling
process. Used by the offline teachers' chunks (teacher/offline.py) and by students played side by
side (training/side_by_side.py).
"""

from __future__ import annotations

import multiprocessing
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor


def forked_workers(jobs: int, cores: int) -> int:
    """How many forked worker processes `jobs` independent calls get on `cores`: one per core, at
    most one per call; 1 means run them in this process."""
    if sys.platform != "linux" or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, min(jobs, cores))


def forked_pool(workers: int, initializer: Callable | None = None, initargs: tuple = ()) -> ProcessPoolExecutor:
    """A pool of `workers` forked processes (`forked_workers` decides whether to use one)."""
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork"),
                               initializer=initializer, initargs=initargs)
