"""Several Dagster Pipes subprocesses of one step, run side by side: the evaluation play's workers.

`run_pipes_workers` opens one Pipes session per worker (what PipesSubprocessClient opens for one),
starts every worker, and waits for all of them. The first worker that fails stops the others and
fails the step with a Failure naming it, its exit code and its last line of stderr; an interrupted
step (a stopped run) stops every worker too. Each worker's log messages reach the step's log as they
come; its custom messages are returned.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg

STOP_GRACE_S = 10.0  # how long a stopped worker gets between SIGTERM and SIGKILL


@dataclass
class PipesWorker:
    """One worker: its name in logs and errors, its Pipes extras and its environment on top of ours."""

    name: str
    extras: dict
    env: dict = field(default_factory=dict)


def run_pipes_workers(context, command: list[str], workers: list[PipesWorker], *, poll_s: float = 0.2) -> list[list]:
    """Run `command` once per worker, all at once, each in its own Pipes session; returns each worker's
    custom messages, in the workers' order. Raises dg.Failure when a worker exits non-zero."""
    processes: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="rhythm-workers-") as tmp, contextlib.ExitStack() as stack:
        sessions = [stack.enter_context(dg.open_pipes_session(
            context=context, context_injector=dg.PipesTempFileContextInjector(),
            message_reader=dg.PipesTempFileMessageReader(), extras=worker.extras)) for worker in workers]
        stderr = [Path(tmp) / f"worker-{index}.stderr" for index in range(len(workers))]
        try:
            for worker, session, err in zip(workers, sessions, stderr):
                with open(err, "wb") as sink:
                    processes.append(subprocess.Popen(command, stderr=sink, env={
                        **os.environ, **worker.env, **session.get_bootstrap_env_vars()}))
            failed = _wait_for_all(processes, poll_s)
            if failed is not None:
                worker, code = workers[failed], processes[failed].returncode
                _stop(processes)
                raise dg.Failure(description=(
                    f"{worker.name} exited with code {code}: {_last_line(stderr[failed])} "
                    f"(the other {len(workers) - 1} worker(s) were stopped)"))
        except BaseException:
            _stop(processes)
            raise
        finally:
            for err in stderr:  # into the step's own stderr (its compute log), worker by worker
                if err.exists() and err.stat().st_size:
                    sys.stderr.write(err.read_text(errors="replace"))
    return [list(session.get_custom_messages()) for session in sessions]


def _wait_for_all(processes: list[subprocess.Popen], poll_s: float) -> int | None:
    """Wait until every process has ended (None) or one has failed (its index)."""
    while True:
        codes = [process.poll() for process in processes]
        for index, code in enumerate(codes):
            if code not in (None, 0):
                return index
        if all(code == 0 for code in codes):
            return None
        time.sleep(poll_s)


def _stop(processes: list[subprocess.Popen]) -> None:
    """SIGTERM every process still running, then SIGKILL whatever outlives STOP_GRACE_S."""
    running = [process for process in processes if process.poll() is None]
    for process in running:
        process.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for process in running:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _last_line(path: Path) -> str:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()] if path.exists() else []
    return lines[-1].strip() if lines else "(nothing on stderr)"
