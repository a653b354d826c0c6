"""`make ui`: `dg dev` on the repository's Dagster project, stopped cleanly by Ctrl-C or SIGTERM.

`dg dev` (dagster-dg-cli; `dagster dev` is superseded by it) reads the project from pyproject.toml's
`[tool.dg.project]`: the code location `rhythm` from `rhythm_pipeline.definitions`, whatever the
checkout's folder is called. It runs in its own process group with SIGINT at its default (under make
or a background shell it inherits SIGINT ignored, and then ignores SIGTERM too); this launcher turns
Ctrl-C, SIGTERM and SIGHUP into one SIGTERM to that whole group (webserver, daemon, code server, run
workers) and kills what is left after a grace period, so nothing outlives the command.

    python -m rhythm_pipeline.ui [--port 3000] [--host 127.0.0.1]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GRACE_S = 20.0


def _child_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stop(proc: subprocess.Popen, grace_s: float) -> int:
    """SIGTERM to the group, then SIGKILL to whatever is left of it after `grace_s`."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                try:  # the leader is gone; its group may still hold children
                    os.killpg(proc.pid, 0)
                except ProcessLookupError:
                    return proc.returncode
            time.sleep(0.2)
    return proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rhythm_pipeline.ui", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="address the UI listens on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=3000, help="port of the UI (default: 3000)")
    args = parser.parse_args(argv)
    if not os.environ.get("DAGSTER_HOME"):
        print("rhythm ui: error: DAGSTER_HOME is not set (make ui sets ./dagster_home)", file=sys.stderr)
        return 2
    dg = Path(sys.executable).parent / "dg"
    if not dg.exists():
        print(f"rhythm ui: error: {dg} not found: dagster-dg-cli is not installed (make install installs it)",
              file=sys.stderr)
        return 2
    env = dict(os.environ)
    if sys.prefix != sys.base_prefix:  # dg warns unless $VIRTUAL_ENV names the venv it runs in (the project's)
        env["VIRTUAL_ENV"] = sys.prefix
    proc = subprocess.Popen([str(dg), "dev", "--host", args.host, "--port", str(args.port)], cwd=REPO, env=env,
                            start_new_session=True, preexec_fn=_child_signals)
    stopping = []

    def on_signal(signum, _frame):
        stopping.append(signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    while proc.poll() is None and not stopping:
        time.sleep(0.2)
    if stopping:
        print(f"\nrhythm ui: stopping dg dev ({signal.Signals(stopping[0]).name})", file=sys.stderr)
        _stop(proc, GRACE_S)
        return 0
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
