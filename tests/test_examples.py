"""The examples run as a user runs them: examples/grpo_rhythm_env.py answers --help with TRL's own flags and
imports nothing beyond the environment package (what the slim install of envs/rhythm_env holds) and TRL;
--offline (slow) teaches the stand-in the tool-call format, then trains two GRPO steps in which every rollout
calls a tool and some group has reward spread and a gradient; examples/play_remote.py plays weeks on a real
server and prints the grades the server gave."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rhythm_env.text.tool_env import WeekGroups
from rhythm_env.text.week import TextWeek

ROOT = Path(__file__).resolve().parents[1]
ENV = {"TRL_EXPERIMENTAL_SILENCE": "1", "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1",
       **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {})}


def run_example(name: str, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, str(ROOT / "examples" / name), *args], capture_output=True, text=True,
                          timeout=1800, cwd=ROOT, env=ENV)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


IMPORTED = """
import json, runpy, sys
sys.argv = ["grpo_rhythm_env.py", "--help"]
try:
    runpy.run_path("examples/grpo_rhythm_env.py", run_name="__main__")
except SystemExit as stop:
    assert stop.code == 0, stop.code
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("rhythm", "dagster")))))
"""


def in_the_slim_wheel(module: str) -> bool:
    """What the environment package's wheel ships: `rhythm_env` and its subpackages, nothing of rhythm_core."""
    return module.split(".")[0] == "rhythm_env"


def test_the_grpo_example_answers_help_with_trls_flags_and_imports_only_the_env_package_and_trl():
    helped = subprocess.run([sys.executable, "-c", IMPORTED], capture_output=True, text=True, timeout=300, cwd=ROOT,
                            env=ENV)  # the example run as a script, with --help, in one process
    assert helped.returncode == 0, helped.stderr[-3000:]
    for flag in ("--max_steps", "--learning_rate", "--num_generations", "--gradient_accumulation_steps",
                 "--report_to", "--output_dir", "--use_peft", "--lora_r", "--use_vllm", "--vllm_mode", "--offline"):
        assert flag in helped.stdout, flag
    loaded = json.loads(helped.stdout.strip().splitlines()[-1])
    assert "rhythm_env.text.tool_env" in loaded and [m for m in loaded if not in_the_slim_wheel(m)] == []


@pytest.mark.slow
def test_the_grpo_example_offline_calls_tools_in_every_rollout_and_has_a_gradient(tmp_path):
    done = run_example("grpo_rhythm_env.py", "--offline", "--output_dir", str(tmp_path / "out"))
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["steps"] == 2 and len(summary["per_step"]) == 2
    assert summary["taught"]["last_loss"] < summary["taught"]["first_loss"] / 4
    for step in summary["per_step"]:
        called, rollouts = map(int, step["rollouts_with_a_tool_call"].split("/"))
        assert rollouts == 8 and called == rollouts, step  # the offline defaults: 2 prompts of 4 generations
        assert 0.0 <= step["reward"] <= 1.0
    assert any(s["grad_norm"] > 0 and s["frac_reward_zero_std"] < 1 for s in summary["per_step"])
    assert done.stdout.strip().splitlines()[-1].startswith("learnable: ")
    groups = WeekGroups(4, seed=summary["config"]["seed"])  # one week per prompt, drawn from --seed (TRL's 42)
    assert summary["weeks"] == sorted({groups.week(g, b) for g in range(2) for b in range(2)})
    assert (tmp_path / "out" / "final" / "config.json").is_file()  # the model saved at the end


def test_the_client_example_plays_weeks_on_a_server():
    from rhythm_env.text.openenv_server import create_rhythm_app
    from tests.test_openenv_server import served_in_thread

    with served_in_thread(create_rhythm_app(max_sessions=2)) as url:
        summary = json.loads(run_example("play_remote.py", "--url", url, "--seeds", "1000-1001").stdout.strip()
                             .splitlines()[-1])
    for seed in (1000, 1001):
        week = TextWeek()
        week.start("continuous", seed)
        for t in range(28):
            week.act(("SLEEP", "DEEP_WORK", "EXERCISE", "SOCIALIZE")[t % 4], 0.5, 0.5, 0.5)
        assert summary["grades"][str(seed)] == week.grade()
