"""A stopped run stops everything it started: SIGTERM to `rhythm distill` or to the demo leaves no
process running and no staging folder behind (the teacher's forked workers, training in the command's
own process, the students' play subprocesses and their workers)."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TAG = "RHYTHM_STOP_TEST"


def _tagged(tag: str) -> list[int]:
    """Processes whose environment carries the test's tag (every descendant inherits it)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if f"{TAG}={tag}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def _stop_and_check(process: subprocess.Popen, tag: str, root: Path) -> int:
    process.send_signal(signal.SIGTERM)
    code = process.wait(timeout=90)
    _wait_for(lambda: not _tagged(tag), 20, "every process of the run to end")
    assert not list(root.rglob(".staging-*")), list(root.rglob(".staging-*"))
    return code


_KILL_ME = """
import os, signal, sys, time
from rhythm_core.processes import sigterm_interrupts
signal.signal(signal.SIGINT, getattr(signal, sys.argv[1]))
try:
    with sigterm_interrupts():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
except KeyboardInterrupt:
    print("interrupted")
"""


@pytest.mark.parametrize("sigint", ["SIG_IGN", "SIG_DFL", "default_int_handler"])
def test_sigterm_interrupts_a_process_whose_sigint_is_ignored_too(sigint):
    # `nohup rhythm distill ... &` starts with SIGINT ignored; a `kill` must still stop it cleanly
    done = subprocess.run([sys.executable, "-c", _KILL_ME, sigint], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "interrupted"), done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["teacher", "sft", "sft on 2 processes"])
def test_sigterm_to_rhythm_distill_stops_every_process_and_leaves_no_staging(tmp_path, stage):
    tag, out = uuid.uuid4().hex, tmp_path / "run"
    processes = ["--processes", "2"] if "2 processes" in stage else []
    process = subprocess.Popen([sys.executable, "-m", "rhythm_core.cli", "distill", "--preset", "demo", "--out", str(out),
                                *processes], cwd=REPO, env={**os.environ, TAG: tag}, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    if stage == "teacher":  # the Bayesian teacher plays in forked workers
        _wait_for(lambda: len(_tagged(tag)) > 1, 120, "the teacher's workers")
    else:  # SFT trains in the command's own process (or its ranks under torchrun), into a staging folder
        _wait_for(lambda: list((out / "sft_checkpoint").glob(".staging-*")), 240, "SFT to start")
        if processes:  # the command, the launcher and its two ranks
            _wait_for(lambda: len(_tagged(tag)) >= 4, 120, "both ranks")
        time.sleep(3)
    assert _stop_and_check(process, tag, out) == 130
    assert "interrupted; what was finished is kept" in process.stderr.read()


@pytest.mark.slow
def test_sigterm_to_the_demo_while_the_students_play_stops_the_play_subprocesses(tmp_path):
    from tests.test_pipeline_training import SMALL

    tag, home = uuid.uuid4().hex, tmp_path / "dagster_home"
    home.mkdir()
    config = tmp_path / "small.json"
    config.write_text(json.dumps(SMALL))
    env = {**os.environ, TAG: tag, "DAGSTER_HOME": str(home), "RHYTHM_DEMO_RUN_CONFIG": str(config),
           "RHYTHM_DEMO_SHARD": "1000-1015", "RHYTHM_ARTIFACTS": str(tmp_path / "artifacts")}
    process = subprocess.Popen([sys.executable, "-m", "rhythm_pipeline.demo"], cwd=REPO, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def playing() -> bool:
        for pid in _tagged(tag):
            try:
                if b"rhythm_pipeline.play_entry" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return True
            except OSError:
                continue
        return False

    _wait_for(playing, 600, "the students' play subprocess")
    time.sleep(2)
    assert _stop_and_check(process, tag, tmp_path / "artifacts") != 0
    assert "FAILURE" in process.stdout.read()
