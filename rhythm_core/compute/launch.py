"""A stage's module on N data-parallel processes of one machine, through torchrun.

    python -m rhythm_core.compute.launch --processes 2 -m rhythm_core.training.entry --stage sft ...

torchrun (the launcher accelerate wraps) starts the ranks with a standalone rendezvous and, when one
rank fails, stops the others. This wrapper runs torchrun in its own process so that the ranks die
with whoever started the stage (a stopped Dagster step, a Ctrl-C), and turns a failed launch into one
line naming the rank and its error, printed and, where RHYTHM_LAUNCH_ERROR names a file, written
there for the caller to raise.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..errors import BadInput
from ..processes import PARENT_PID_ENV, die_with_parent, parent_pid

ERROR_FILE_VAR = "RHYTHM_LAUNCH_ERROR"
# How often torchrun checks its ranks: a dead rank stops the others within about this long.
MONITOR_INTERVAL_S = 0.5


def launch_command(module: str, args: list[str], processes: int, *, python: str = sys.executable) -> list[str]:
    """The command that runs `python -m module *args` on `processes` data-parallel processes (torchrun,
    standalone rendezvous, one node); for one process, the plain `python -m module *args`."""
    if not isinstance(processes, int) or processes < 1:
        raise BadInput(f"processes={processes!r}: expected a whole number ≥ 1")
    if processes == 1:
        return [python, "-m", module, *args]
    return [python, "-m", "rhythm_core.compute.launch", f"--processes={processes}", "-m", module, *args]


class LaunchFailed(RuntimeError):
    """A launched stage failed; the message is the one line naming the rank and its error."""


def run_launched(module: str, args: list[str], processes: int, *, on_line: Callable[[str], None],
                 env: dict | None = None) -> None:
    """Run `module` on `processes` processes (launch_command) with this process's environment and
    `env`, each line it prints to stdout handed to `on_line` as it comes; its stderr goes to this
    process's. A failure raises LaunchFailed naming the rank that caused it."""
    with tempfile.TemporaryDirectory(prefix="rhythm-launch-") as scratch:
        error_file = Path(scratch) / "error.txt"
        process = subprocess.Popen(launch_command(module, args, processes), stdout=subprocess.PIPE, text=True,
                                   env={**os.environ, **(env or {}), ERROR_FILE_VAR: str(error_file),
                                        PARENT_PID_ENV: str(os.getpid())})
        try:
            for line in process.stdout:
                on_line(line.rstrip("\n"))
            code = process.wait()
        except BaseException:  # an interrupt: the launcher and its ranks stop with it
            process.terminate()
            process.wait()
            raise
        if code:
            raise LaunchFailed(error_file.read_text().strip() if error_file.exists()
                               else f"{module} on {processes} process(es) exited with code {code}")


def torchrun_args(module: str, args: list[str], processes: int) -> list[str]:
    """torchrun's arguments for one node: no restarts (a failed rank fails the stage)."""
    return ["--standalone", f"--nproc-per-node={processes}", "--max-restarts=0",
            f"--monitor-interval={MONITOR_INTERVAL_S}", "-m", module, *args]


def failure_line(error, processes: int) -> str:
    """One line for a failed launch (torchrun's ChildFailedError), naming the rank that caused it: a
    rank killed by a signal torchrun did not send (SIGKILL of the OOM killer, a segfault), else one
    that raised an error of its own, else one that failed because a peer did (a broken collective),
    else any; ties go to the earliest, then the lowest rank."""
    rank, failure = min(error.failures.items(), key=lambda item: (_blame(item[1]), item[1].timestamp, item[0]))
    if _raised(failure):
        message = failure.message.get("message", "") if isinstance(failure.message, dict) else str(failure.message)
    elif failure.exitcode < 0:
        message = f"died of {failure.signal_name()}"
    else:
        message = f"exited with code {failure.exitcode}"
    others = len(error.failures) - 1
    tail = f" ({others} other rank(s) failed or were stopped)" if others else ""
    return f"rank {rank} of {processes} failed: {message.splitlines()[0] if message else 'no message'}{tail}"


# What a rank says when another rank's death broke a collective (gloo, NCCL), not a cause of its own.
_PEER_FAILED = ("Connection closed by peer", "Connection reset by peer", "DistBackendError", "NCCL communicator was aborted")


def _blame(failure) -> int:
    if not _raised(failure):
        return 0 if failure.exitcode < 0 and failure.signal_name() != "SIGTERM" else 3
    message = str(failure.message)
    return 2 if any(text in message for text in _PEER_FAILED) else 1


def _raised(failure) -> bool:
    return bool(failure.error_file) and Path(failure.error_file).exists()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rhythm_core.compute.launch")
    parser.add_argument("--processes", type=int, required=True)
    parser.add_argument("-m", dest="module", required=True)
    parsed, rest = parser.parse_known_args(argv)
    die_with_parent(parent_pid())
    os.environ[PARENT_PID_ENV] = str(os.getpid())  # the ranks follow this process
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    try:
        torchrun(torchrun_args(parsed.module, rest, parsed.processes))
    except ChildFailedError as error:
        line = failure_line(error, parsed.processes)
        print(line, file=sys.stderr, flush=True)
        if os.environ.get(ERROR_FILE_VAR):
            Path(os.environ[ERROR_FILE_VAR]).write_text(line + "\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
