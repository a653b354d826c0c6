"""The examples run as a user runs them: examples/grpo_rhythm_env.py --offline trains two GRPO steps with
`environment_factory` on the offline stand-in (one week per prompt), and examples/play_remote.py plays
weeks on a real server and prints the grades the server gave."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rhythm_core.text_env.tool_env import WeekGroups
from rhythm_core.text_env.week import TextWeek

ROOT = Path(__file__).resolve().parents[1]


def run_example(name: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, str(ROOT / "examples" / name), *args], capture_output=True, text=True,
                          timeout=900, cwd=ROOT, env={"TRL_EXPERIMENTAL_SILENCE": "1", "PATH": "/usr/bin:/bin",
                                                      "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_grpo_example_trains_two_steps_offline(tmp_path):
    summary = run_example("grpo_rhythm_env.py", "--offline", "--output-dir", str(tmp_path / "out"))
    assert summary["steps"] == 2 and len(summary["mean_grade_per_step"]) == 2
    groups = WeekGroups(2, seed=0)  # the example's defaults: two prompts of two generations a step, seed 0
    assert summary["weeks"] == sorted({groups.week(g, b) for g in range(2) for b in range(2)})
    assert all(0.0 <= g <= 1.0 for g in summary["mean_grade_per_step"])


def test_the_client_example_plays_weeks_on_a_server():
    from rhythm_core.text_env.openenv_server import create_rhythm_app
    from tests.test_openenv_server import served_in_thread

    with served_in_thread(create_rhythm_app(max_sessions=2)) as url:
        summary = run_example("play_remote.py", "--url", url, "--seeds", "1000-1001")
    for seed in (1000, 1001):
        week = TextWeek()
        week.start("continuous", seed)
        for t in range(28):
            week.act(("SLEEP", "DEEP_WORK", "EXERCISE", "SOCIALIZE")[t % 4], 0.5, 0.5, 0.5)
        assert summary["grades"][str(seed)] == week.grade()
