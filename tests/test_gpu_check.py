"""`make gpu-check`'s CPU form: every stage of the GPU check at tiny shapes, each in its own process,
with figures in a strict JSON file, and the exit statuses a user scripts against."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


def _run(*args, cwd=None):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=900, cwd=cwd)


def test_the_gpu_checks_cpu_form_runs_every_stage_and_records_its_figures(tmp_path):
    out = tmp_path / "gpu_check.json"
    done = _run("--smoke", "--out", str(out), "--work", str(tmp_path / "work"))
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
    assert play["default"]["prompt_cache"] and not play["prompt cache off"]["prompt_cache"]
    assert play["default"]["cache_budget_mib"] is None  # the CPU's cache is unbounded
    for variant in ("default", "prompt cache off"):
        figures = play[variant]
        assert figures["generate_calls"] == 28  # one batched call per turn of the week
        assert 0 <= figures["outside_generate_s"] <= figures["wall_s"]
        assert figures["same_actions_as_default"]
    capped = play["prompt cache within 1 MiB"]  # a GPU's budget, shrunk until the week overflows it
    assert capped["cache_overflowed"] and capped["same_actions_as_default"]
    assert 0 < capped["prompt_tokens_reused"] < play["default"]["prompt_tokens_reused"]
    assert stages["tiny"]["sft_steps"] == 6 and stages["tiny"]["gate_weeks"] >= 1
    assert "every stage finished" in done.stdout


def test_a_stage_past_its_budget_fails_the_check_and_skips_what_needs_it(tmp_path):
    out = tmp_path / "gpu_check.json"
    done = _run("--smoke", "--stages", "prepare,lora_sft", "--budget-scale", "0.0002", "--out", str(out),
                "--work", str(tmp_path / "work"))
    assert done.returncode == 1 and "FAILED" in done.stdout
    stages = json.loads(out.read_text())["stages"]
    assert stages["prepare"]["status"].startswith("timed out after")
    assert stages["lora_sft"]["status"] == "skipped: needs prepare"


def test_mistakes_are_refused_before_any_work(tmp_path):
    unknown = _run("--smoke", "--stages", "prepare,sfft", "--out", str(tmp_path / "x.json"))
    assert unknown.returncode == 2 and "unknown stage sfft" in unknown.stderr
    no_gpu = _run("--out", str(tmp_path / "x.json"))  # this machine has no CUDA GPU
    assert no_gpu.returncode == 2 and "no CUDA GPU" in no_gpu.stderr and "--smoke" in no_gpu.stderr
    assert not (tmp_path / "x.json").exists()


def test_the_step_clock_profiles_the_second_step_and_leaves_it_out_of_the_median():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    clock = gpu_check.StepClock(profile_on="cpu")
    for step in range(4):
        clock({"loss": 1.0, "step": step})
        clock({"eval_loss": 1.0})  # not a training step's log: ignored
    assert [profiled for _, profiled in clock.gaps] == [True, False, False]
    figures = clock.figures()
    assert figures["s_per_step_after_first"] == round(sorted(g for g, _ in clock.gaps[1:])[1], 3)
    assert figures["profiled_step"]["wall_s"] == round(clock.gaps[0][0], 3)
    assert "profiled_step" not in gpu_check.StepClock().figures()  # GRPO's: timed, not profiled


def test_lora_sft_rates_leave_out_the_profilers_own_seconds(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    from gpu_check import training_rates

    # 10 steps in 80 s of the run's clock, 50 of them the profiler collecting and summarizing a step
    assert training_rates(80.0, 10, 6000, profiler_s=50.0) == {"train_s": 30.0, "s_per_step": 3.0, "tokens_per_s": 200.0}
    assert training_rates(80.0, 10, 0) == {"train_s": 80.0, "s_per_step": 8.0, "tokens_per_s": None}
