"""`rhythm gpu-check` (`make gpu-check`) in its CPU form: every stage of the GPU check at tiny shapes,
each in a child process, with figures in a strict JSON file, the exit statuses a user scripts
against, a play whose token check can fail, and nothing left behind: neither the temporary work
folder nor, when the check is stopped, any process it started."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rhythm_core.gpu_check.stages import (
    PlayVariant,
    StepClock,
    compare_tokens,
    play_check,
    play_failures,
    training_rates,
)

ROOT = Path(__file__).resolve().parents[1]
WORK_GLOB = "rhythm-gpu-check-*"  # the default work folder, under TMPDIR


def _command(*args) -> list[str]:
    return [sys.executable, "-m", "rhythm_core.cli", "gpu-check", *args]


def _env(tmp_path) -> dict:
    return {**os.environ, "TMPDIR": str(tmp_path)}  # the default work folder goes under tmp_path


def _run(*args, tmp_path):
    return subprocess.run(_command(*args), capture_output=True, text=True, timeout=1500, cwd=ROOT,
                          env=_env(tmp_path))


@pytest.mark.slow  # five child processes, each loading torch and training or playing: a minute and more
def test_the_gpu_checks_cpu_form_runs_every_stage_records_its_figures_and_removes_its_work(tmp_path):
    out = tmp_path / "gpu_check.json"
    done = _run("--smoke", "--out", str(out), tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads(out.read_text(), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    stages = record["stages"]
    assert list(stages) == ["prepare", "lora_sft", "grpo", "play", "tiny"]
    assert all(stage["status"] == "ok" and stage["peak_rss_gib"] > 0 for stage in stages.values())
    assert stages["lora_sft"]["s_per_step"] > 0 and stages["lora_sft"]["tokens_per_s"] > 0
    assert stages["lora_sft"]["s_per_step_after_first"] > 0  # two steps: one gap between their logs
    profiled = stages["lora_sft"]["profiled_step"]  # the second step, under torch's profiler
    assert 0 < profiled["busy_s"] and 0 < profiled["wall_s"] and profiled["top_ops_ms"][0][1] > 0
    assert profiled["summary_s"] >= 0  # the profiler's own cost, reported beside the step
    assert stages["grpo"]["completions_per_step"] == 4 and stages["grpo"]["micro_batch"] == 2
    assert stages["grpo"]["gate_weeks"] >= 1 and stages["grpo"]["s_per_step"] > 0
    play = stages["play"]
    assert play["dtype"] == "float32" and play["token_check"].startswith("exact")
    assert play["default"]["prompt_cache"] and not play["prompt cache off"]["prompt_cache"]
    assert play["default"]["cache_budget_mib"] is None  # the CPU's cache is unbounded
    capped = play["prompt cache within 1 MiB"]  # a GPU's budget, shrunk until the week overflows it
    assert capped["cache_overflowed"] and capped["cache_budget_mib"] == 1.0
    assert 0 < capped["prompt_tokens_reused"] < play["default"]["prompt_tokens_reused"]
    for variant in ("default", "prompt cache off", "prompt cache within 1 MiB"):
        figures = play[variant]
        assert figures["generate_calls"] == 28  # one batched call per turn of the week
        assert 0 <= figures["outside_generate_s"] <= figures["wall_s"]
        # the same token ids as the default's, every turn of every week (a random-weight student's
        # answers are all invalid: its actions, all the fallback, would say nothing)
        assert figures["same_tokens_as_default"] and figures["answers_same_as_default"] == 1.0
        assert figures["first_different_turn"] is None
        assert 0 <= figures["invalid_rate"] <= 1
    tiny = stages["tiny"]
    assert tiny["sft_steps"] == 6 and tiny["gate_weeks"] >= 1
    assert tiny["play"]["weeks"] == 2 and {"s", "v3", "belief_mae"} <= set(tiny["play"]["sum"])
    assert "sum_minus_no_sum" in tiny["play"] and "no_sum" in tiny["play"]
    assert "every stage finished" in done.stdout and "work folder removed" in done.stdout
    assert not list(tmp_path.glob(WORK_GLOB))  # gigabytes on a GPU: gone


def test_keep_keeps_the_temporary_work_folder_and_a_named_one_is_kept(tmp_path):
    # a stage whose needs are missing is skipped: the check fails (1) without any work
    done = _run("--smoke", "--stages", "play", "--keep", "--out", str(tmp_path / "x.json"), tmp_path=tmp_path)
    assert done.returncode == 1 and "FAILED" in done.stdout, done.stdout + done.stderr
    kept = list(tmp_path.glob(WORK_GLOB))
    assert len(kept) == 1 and (kept[0] / "logs").is_dir() and f"work in {kept[0]}" in done.stdout
    named = tmp_path / "named"
    done = _run("--smoke", "--stages", "play", "--work", str(named), "--out", str(tmp_path / "y.json"),
                tmp_path=tmp_path)
    assert done.returncode == 1 and named.is_dir() and len(list(tmp_path.glob(WORK_GLOB))) == 1
    stages = json.loads((tmp_path / "y.json").read_text())["stages"]
    assert stages["play"]["status"] == "skipped: needs lora_sft"


def test_a_stage_past_its_budget_fails_the_check_and_skips_what_needs_it(tmp_path):
    out = tmp_path / "gpu_check.json"
    done = _run("--smoke", "--stages", "prepare,lora_sft", "--budget-scale", "0.0002", "--out", str(out),
                "--work", str(tmp_path / "work"), tmp_path=tmp_path)
    assert done.returncode == 1 and "FAILED" in done.stdout
    stages = json.loads(out.read_text())["stages"]
    assert stages["prepare"]["status"].startswith("timed out after")
    assert isinstance(stages["prepare"]["log_tail"], list)  # the log's end, kept when the work folder is not
    assert stages["lora_sft"]["status"] == "skipped: needs prepare"


def test_mistakes_are_refused_before_any_work(tmp_path):
    unknown = _run("--smoke", "--stages", "prepare,sfft", "--out", str(tmp_path / "x.json"), tmp_path=tmp_path)
    assert unknown.returncode == 2 and "unknown stage sfft" in unknown.stderr
    assert unknown.stderr.count("\n") == 1 and unknown.stderr.startswith("rhythm gpu-check: error:")
    scale = _run("--smoke", "--budget-scale", "-1", "--out", str(tmp_path / "x.json"), tmp_path=tmp_path)
    assert scale.returncode == 2 and "--budget-scale must be above 0" in scale.stderr
    (tmp_path / "afile").write_text("")
    work = _run("--smoke", "--work", str(tmp_path / "afile"), "--out", str(tmp_path / "x.json"), tmp_path=tmp_path)
    assert work.returncode == 2 and "--work" in work.stderr and "is a file" in work.stderr
    no_folder = _run("--smoke", "--out", str(tmp_path / "nowhere" / "x.json"), tmp_path=tmp_path)
    assert no_folder.returncode == 2 and "--out" in no_folder.stderr
    no_gpu = _run("--out", str(tmp_path / "x.json"), tmp_path=tmp_path)  # this machine has no CUDA GPU
    assert no_gpu.returncode == 2 and "no CUDA GPU" in no_gpu.stderr and "--smoke" in no_gpu.stderr
    assert not (tmp_path / "x.json").exists() and not list(tmp_path.glob(WORK_GLOB))


def test_the_token_comparison_finds_the_first_turn_where_a_variant_differs():
    default = [[1, 2, 9], [3, 9], [4, 5, 9], [6, 9]]  # 2 weeks x 2 turns: turn 1's weeks, then turn 2's
    assert compare_tokens(default, [list(r) for r in default], weeks=2) == {
        "same_tokens_as_default": True, "answers_same_as_default": 1.0, "first_different_turn": None}
    broken = [[1, 2, 9], [3, 9], [4, 5, 9], [6, 7, 9]]  # week 2's second answer
    assert compare_tokens(default, broken, weeks=2) == {
        "same_tokens_as_default": False, "answers_same_as_default": 0.75, "first_different_turn": 2}
    short = default[:3]  # an answer missing is a difference too
    assert compare_tokens(default, short, weeks=2)["same_tokens_as_default"] is False


def test_a_variant_that_generates_other_tokens_fails_the_play(tmp_path):
    """The play's comparison on real generated ids: a variant sampling at temperature 1 (a public
    setting of the variant) in place of a broken cache; an exact check fails the stage on it."""
    from rhythm_core.training.qwen2_standin import build_qwen2_standin
    from rhythm_env.protocol import system_prompt

    texts = [system_prompt("full"), "Now day 1 morning, vita 0.73 cogn 0.70", '{"action": "DEEP_WORK"}'] * 20
    model_dir = str(build_qwen2_standin(tmp_path / "standin", texts))
    figures = play_check(model_dir, weeks=1, new_tokens=3, device="cpu",
                         variants=[PlayVariant("default"), PlayVariant("sampled", temperature=1.0)])
    assert figures["token_check"].startswith("exact")
    assert figures["default"]["same_tokens_as_default"] and figures["default"]["invalid_rate"] == 1.0  # noise
    sampled = figures["sampled"]
    assert sampled["same_tokens_as_default"] is False and sampled["answers_same_as_default"] < 1
    assert sampled["first_different_turn"] >= 1 and sampled["generate_calls"] == 28
    failures = play_failures(figures)
    assert len(failures) == 1 and failures[0].startswith("sampled generated other token ids")
    # where the comparison is recorded only (bf16 on CUDA), it fails nothing
    assert play_failures({**figures, "token_check": "recorded: ..."}) == []


def _proc_stat(pid: int) -> tuple[int, int, str] | None:
    """(parent pid, session id, state) of a live process, None where it is gone (or a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after the command's name, which may hold spaces
    return None if fields[0] in ("Z", "X") else (int(fields[1]), int(fields[3]), fields[0])


def _processes() -> dict[int, tuple[int, int, str]]:
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _proc_stat(int(entry.name))) is not None:
            found[int(entry.name)] = stat
    return found


def _tree(root: int, sessions: set[int]) -> set[int]:
    """`root` and its live descendants, and every live process of `sessions`."""
    processes = _processes()
    tree, grew = {root} if root in processes else set(), True
    while grew:
        more = {pid for pid, (ppid, _, _) in processes.items() if ppid in tree} - tree
        grew, tree = bool(more), tree | more
    return tree | {pid for pid, (_, sid, _) in processes.items() if sid in sessions}


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_stopped_check_leaves_no_process_and_no_work_folder(tmp_path):
    check = subprocess.Popen(_command("--smoke", "--out", str(tmp_path / "x.json")), cwd=ROOT, env=_env(tmp_path),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline, stage = time.monotonic() + 300, None
        while stage is None and time.monotonic() < deadline and check.poll() is None:
            for pid, (ppid, _, _) in _processes().items():
                try:
                    is_stage = "rhythm_core.gpu_check.run" in Path(f"/proc/{pid}/cmdline").read_text()
                except OSError:
                    is_stage = False
                if ppid == check.pid and is_stage:
                    stage = pid
            time.sleep(0.2)
        assert stage is not None, "no stage process started"
        time.sleep(3)  # the stage at work (the teacher's forked workers among its processes)
        assert list(tmp_path.glob(WORK_GLOB))
        started = _tree(check.pid, {stage})
        assert stage in started
        check.send_signal(signal.SIGTERM)
        check.wait(timeout=60)
        deadline = time.monotonic() + 30
        while (left := started & set(_processes())) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not left, f"left running: {left}"
        assert check.returncode == 130, check.stderr.read()
        assert not list(tmp_path.glob(WORK_GLOB))
    finally:
        if check.poll() is None:
            check.kill()
            check.wait()


def test_the_step_clock_profiles_the_second_step_and_leaves_it_out_of_the_median():
    clock = StepClock(profile_on="cpu")
    for step in range(4):
        clock({"loss": 1.0, "step": step})
        clock({"eval_loss": 1.0})  # not a training step's log: ignored
    assert [profiled for _, profiled in clock.gaps] == [True, False, False]
    figures = clock.figures()
    assert figures["s_per_step_after_first"] == round(sorted(g for g, _ in clock.gaps[1:])[1], 3)
    assert figures["profiled_step"]["wall_s"] == round(clock.gaps[0][0], 3)
    assert "profiled_step" not in StepClock().figures()  # GRPO's: timed, not profiled


def test_lora_sft_rates_leave_out_the_profilers_own_seconds():
    # 10 steps in 80 s of the run's clock, 50 of them the profiler collecting and summarizing a step
    assert training_rates(80.0, 10, 6000, profiler_s=50.0) == {"train_s": 30.0, "s_per_step": 3.0, "tokens_per_s": 200.0}
    assert training_rates(80.0, 10, 0) == {"train_s": 80.0, "s_per_step": 8.0, "tokens_per_s": None}
