"""What a change costs its author and CI: the seconds of each stage of `.ci/run` (a fresh install,
lint, the default suite, the slow set), the default suite on 1 and on 2 pytest-xdist workers side by
side, and the slowest tests of each set, in benchmarks/results/test_suite.json (the README's figure).
A stage that fails is recorded as it ran and the script exits 1 naming it (`make results` refuses to show
a failing run's times). The result file is written once, after the last stage, so the suite it times
never sees it change (a test compares the README with it); a run stopped part way leaves its stages in
a scratch file it names.

    python benchmarks/test_suite.py                    # install into a scratch venv, then every stage
    python benchmarks/test_suite.py --workers 2 --no-install --no-slow
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_file import REPO, write_result

SUMMARY = re.compile(r"^=*\s*(?P<counts>(?:\d+ \w+(?:, )?)+) in (?P<seconds>[\d.]+)s")
DURATION = re.compile(r"^(?P<seconds>[\d.]+)s (?P<phase>call|setup|teardown)\s+(?P<test>\S+)")


def timed(command: list[str], env: dict | None = None) -> tuple[float, str, int]:
    start = time.monotonic()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    return time.monotonic() - start, done.stdout + done.stderr, done.returncode


def pytest_figures(seconds: float, output: str, returncode: int, slowest: int) -> dict:
    """The wall seconds, pytest's own count line and its slowest tests, from one run's output."""
    counts, durations = None, []
    for line in output.splitlines():
        if found := SUMMARY.match(line.strip()):
            counts = dict((name, int(n)) for n, name in (c.split() for c in found["counts"].split(", ")))
        elif found := DURATION.match(line.strip()):
            durations.append([found["test"], found["phase"], float(found["seconds"])])
    return {"seconds": round(seconds, 1), "returncode": returncode, "counts": counts,
            "slowest": durations[:slowest]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="2,1", help="the default suite on each of these worker counts")
    parser.add_argument("--no-install", action="store_true", help="skip the fresh install into a scratch venv")
    parser.add_argument("--no-slow", action="store_true", help="skip the slow set")
    parser.add_argument("--slowest", type=int, default=25)
    args = parser.parse_args(argv)
    python = str(REPO / ".venv" / "bin" / "python")
    if not Path(python).exists():
        raise SystemExit(f"{python} is missing: run `make install` first")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RHYTHM_", "PYTEST_"))}
    stages = {}

    partial = Path(tempfile.gettempdir()) / "rhythm-test_suite.partial.json"

    def save(final: bool = False) -> Path:  # after every stage: a run stopped part way keeps what it measured
        return write_result("test_suite", {"stages": stages, "load_average_at_end": [round(x, 2) for x in os.getloadavg()]},
                     question="How long do `make test` and CI's stages take on this machine, and which tests "
                              "dominate?", argv=sys.argv, out=None if final else partial)
    if not args.no_install:
        scratch = Path(tempfile.mkdtemp(prefix="rhythm-install-"))
        try:
            seconds, output, rc = timed(["make", "-s", "install", f"VENV={scratch / 'venv'}"], env)
            stages["install"] = {"seconds": round(seconds, 1), "returncode": rc}
            if rc:
                print(output[-3000:], file=sys.stderr)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    seconds, output, rc = timed([python, "-m", "ruff", "check", "."], env)
    stages["lint"] = {"seconds": round(seconds, 1), "returncode": rc}
    save()
    default = stages["default"] = {}

    def default_suite(workers: int):
        command = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow",
                   f"--durations={args.slowest}"]
        if workers > 1:
            command += ["-n", str(workers), "--dist", "loadscope"]
        print(f"default suite on {workers} worker(s)…", file=sys.stderr)
        default[str(workers)] = pytest_figures(*timed(command, env), args.slowest)
        print(f"  {default[str(workers)]['seconds']} s, {default[str(workers)]['counts']}", file=sys.stderr)
        save()

    first, *others = [int(w) for w in args.workers.split(",")]
    default_suite(first)  # CI's setting first, then the slow set, then the variants beside it
    if not args.no_slow:
        print("slow set on 2 workers…", file=sys.stderr)
        command = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "slow", "-n", "2", "--dist",
                   "loadscope", f"--durations={args.slowest}"]
        stages["slow"] = pytest_figures(*timed(command, env), args.slowest)
        print(f"  {stages['slow']['seconds']} s, {stages['slow']['counts']}", file=sys.stderr)
        save()
    for workers in others:
        default_suite(workers)
    result = save(final=True)
    partial.unlink(missing_ok=True)
    failed = [name for name, stage in stages.items() if stage.get("returncode")]
    failed += [f"default on {w} worker(s)" for w, run in default.items() if run["returncode"]]
    if failed:
        print(f"FAILED: {', '.join(failed)} (recorded in {result}; `make results` refuses it until a passing run "
              "replaces it)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
