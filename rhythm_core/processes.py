"""Child processes: independent CPU work in forked worker processes (the one rule for when they are
used, and the pool), and the rules that stop every process a run started when the run stops.

Fork, not spawn: a spawned worker would import the package (and torch) again, seconds of what it
saves. Where fork is not the platform's safe default (macOS, Windows) the work runs in the calling
process. Used by the offline teachers' chunks (teacher/offline.py) and by students played side by
side (training/side_by_side.py).

Stopping: a worker or a stage's process (training, the students' play) dies with the process that
started it (`die_with_parent`), so a killed run leaves nothing running on; `sigterm_interrupts` makes
SIGTERM mean what Ctrl-C means in a command, so its clean-up (staging folders, worker pools) runs.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def forked_workers(jobs: int, cores: int) -> int:
    """How many forked worker processes `jobs` independent calls get on `cores`: one per core, at
    most one per call; 1 means run them in this process."""
    if sys.platform != "linux" or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, min(jobs, cores))


@contextlib.contextmanager
def forked_pool(workers: int, initializer: Callable | None = None, initargs: tuple = ()) -> Iterator[ProcessPoolExecutor]:
    """A pool of `workers` forked processes (`forked_workers` decides whether to use one), each dying
    with this process. Leaving the block on an exception (an interrupt included) kills the workers
    instead of waiting for their calls to finish."""
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork"),
                               initializer=_worker_start, initargs=(os.getpid(), initializer, initargs))
    try:
        yield pool
    except BaseException:
        for process in list((getattr(pool, "_processes", None) or {}).values()):
            process.kill()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _worker_start(parent: int, initializer: Callable | None, initargs: tuple) -> None:
    die_with_parent(parent)
    if initializer is not None:
        initializer(*initargs)


def die_with_parent(parent: int | None = None) -> None:
    """Have the kernel send this process SIGTERM when the process that started it exits (Linux;
    nothing elsewhere); if `parent` (its pid) is already gone, exit now."""
    if sys.platform != "linux":
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):  # no prctl in this libc: the process lives as it did
        return
    if parent is not None and os.getppid() != parent:
        os._exit(143)


# Set by whatever starts a stage's process to its own pid (a wrapper may stand between them).
PARENT_PID_ENV = "RHYTHM_PARENT_PID"


def parent_pid() -> int:
    """The pid of the process whose stop this one must follow: PARENT_PID_ENV, else the parent's."""
    value = os.environ.get(PARENT_PID_ENV, "")
    return int(value) if value.isdigit() else os.getppid()


def child_env() -> dict[str, str]:
    """The environment entry a process gives a stage's process it starts (`parent_pid`)."""
    return {PARENT_PID_ENV: str(os.getpid())}


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """While open, SIGTERM (and SIGHUP) interrupt this process as Ctrl-C does: KeyboardInterrupt, or
    whatever SIGINT handler is installed then (Dagster's, during a run), so clean-up code runs; also
    when SIGINT itself is ignored, as in a process a shell started in the background. The
    handlers before are restored after; outside the main thread nothing changes."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, _frame):
        if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL):
            # started in the background (`nohup ... &`) SIGINT is ignored: a SIGINT would do nothing
            raise KeyboardInterrupt
        os.kill(os.getpid(), signal.SIGINT)

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
