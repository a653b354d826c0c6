"""The GPU check to run before paying for GPU time (`rhythm gpu-check`): the published recipe's stages
on a random-weight Qwen2.5-3B-shaped student and the demo's tiny student, offline (nothing is
downloaded), each stage in a child process under a time budget. Figures go to a JSON file as each
stage ends.

    rhythm gpu-check --out gpu_check.json        # one CUDA GPU (`make gpu-check`; a run: gpu_check_h200.json)
    rhythm gpu-check --smoke                     # the CPU form: tiny shapes

Stages (each needs the ones before it that it names):
  prepare   Bayesian-teacher weeks and their SFT datasets (48 weeks for the 3B student, the demo's 2,000
            for the tiny one); the 3B-shaped model (`training/qwen2_standin.py`: Qwen2's tokenizer class
            trained offline on the weeks)
  lora_sft  LoRA SFT at the published settings (r=16, micro-batches of 2, 4 accumulated): s/step, tokens/s,
            and a profile of its second step (device busy time against wall time, kernel launches)
  grpo      GRPO at the published settings (8 completions in micro-batches of 2, 2 steps, 12-token
            completions) and its gate on 4 held-out weeks: s/step, the gate's time
  play      the SFT student on 8 weeks x 28 turns at 12 new tokens, as evaluation plays it, then with the
            prompt cache off, with it held within 0.5 GiB and (CUDA) with cuDNN's attention: seconds,
            seconds outside generate, peak memory, the invalid-answer rate and whether it generated the
            default's token ids, per variant (`stages.play_variants`, `stages.compare_tokens`)
  tiny      the demo's tiny SFT (600 + 240 steps) and GRPO with its gate (64 weeks), then the SFT student's play
            of 64 weeks with the belief's sum and without
Every stage records its peak memory (CUDA: allocated and reserved; CPU: the process's peak RSS; the
play's is its default variant's, each variant's beside it) and, on CUDA, whether it fits an A10G
(24 GB: 21.5 GiB reserved leaves room for the CUDA context).

The play's variants must generate the default's token ids where the student plays in float32 (the
CPU): a difference (a broken prompt cache) fails the stage; in bf16 (CUDA) the difference is recorded,
not failed on (`stages`, "The play's token check").

The stages themselves are in `gpu_check.stages`. Each runs in a child process of its own process group,
which dies with the check (`processes.die_with_parent`) and is killed as a group when the check is
interrupted or a stage runs past its budget. The check's exit status: 0 when every stage finished, 1
when any crashed, ran past its budget or failed its token check (the CLI: 2 for a mistake, 130 when
interrupted). The CLI removes its default work folder at the end, an interrupted check's too.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from .stages import STAGE_FAILURES, run_one_stage

# stage -> (the stages it needs, budget in seconds on CUDA, budget in the CPU smoke form). The smoke
# form's budgets only catch a hang: a small CPU under other load runs a stage many times slower.
STAGES = {
    "prepare": ((), 150, 600),
    "lora_sft": (("prepare",), 240, 600),  # room over the recorded run (gpu_check_h200.json), profile included
    "grpo": (("lora_sft",), 300, 600),  # room over the recorded run (gpu_check_h200.json), the gate included
    "play": (("lora_sft",), 150, 600),
    "tiny": (("prepare",), 150, 600),
}
WORK_PREFIX = "rhythm-gpu-check-"  # the default work folder's name, under the system's temporary folder
CHILD_MODULE = "rhythm_core.gpu_check.run"  # what a stage's child process runs (`_child_main`)
LOG_TAIL_LINES = 30  # of a failed stage's log, kept in the record (the work folder may be removed)


# ---------------------------------------------------------------------------------------------
# the check's side: the stages in order, each in a child process
def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for package in ("torch", "transformers", "trl", "peft"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = None
    return out


def probe_device() -> tuple[str, str]:
    """("cuda" or "cpu", its name), without initializing CUDA in this process."""
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available() and "
                            "torch.cuda.get_device_name(0) or '')"], capture_output=True, text=True, timeout=300)
    name = probe.stdout.strip()
    return ("cuda", name) if name else ("cpu", "CPU")


def run_check(out: Path, work: Path, smoke: bool, stages: list[str], budget_scale: float = 1.0,
              say=print, device: tuple[str, str] | None = None) -> dict:
    """Run `stages` in order, each in a child process under its budget; the record is rewritten to
    `out` after every stage. Returns the record ("ok": every stage finished and passed)."""
    _, device_name = device or probe_device()
    record = {"started": datetime.now(UTC).isoformat(timespec="seconds"), "smoke": smoke,
              "device": device_name, "versions": versions(), "stages": {}, "ok": True}
    work.mkdir(parents=True, exist_ok=True)
    (work / "logs").mkdir(exist_ok=True)
    for name in stages:
        needs, cuda_budget, cpu_budget = STAGES[name]
        budget = round((cpu_budget if smoke else cuda_budget) * budget_scale, 1)
        missing = [n for n in needs if not (work / f"{n}.json").exists()]
        if missing:
            entry = {"status": f"skipped: needs {', '.join(missing)}"}
        else:
            entry = run_stage_process(name, work, smoke, budget)
        entry["budget_s"] = budget
        record["stages"][name] = entry
        record["ok"] = record["ok"] and entry["status"] == "ok"
        out.write_text(json.dumps(record, indent=2, default=str) + "\n")
        say(f"gpu-check {name:9s} {entry['status']}" + (f" in {entry['wall_s']} s" if "wall_s" in entry else "")
            + "".join(f", {k} {v}" for k, v in entry.items() if k in ("peak_reserved_gib", "peak_rss_gib",
                                                                         "s_per_step", "s_per_step_after_first",
                                                                         "fits_a10g_24gb")))
    return record


def run_stage_process(name: str, work: Path, smoke: bool, budget: float) -> dict:
    """Run stage `name` in a child process (its own process group, dying with this process) and wait
    at most `budget` seconds; its entry in the record. The child's whole group is killed when the
    budget runs out and when this process is interrupted (Ctrl-C, or SIGTERM under
    `processes.sigterm_interrupts`), before the interrupt goes on."""
    from ..processes import child_env

    (work / f"{name}.json").unlink(missing_ok=True)
    command = [sys.executable, "-m", CHILD_MODULE, "--stage", name, "--work", str(work)] + (["--smoke"] if smoke else [])
    log = work / "logs" / f"{name}.log"
    started = time.perf_counter()
    with open(log, "w") as stream:
        process = None
        try:
            process = subprocess.Popen(command, stdout=stream, stderr=subprocess.STDOUT, start_new_session=True,
                                       env={**os.environ, **child_env()})
            code = process.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            kill_group(process)
            code = None
        except BaseException:
            if process is not None:
                kill_group(process)
            raise
    wall = round(time.perf_counter() - started, 1)
    if code is None:
        return {"status": f"timed out after {budget} s", "wall_s": wall, **_log_entry(log)}
    if code != 0 or not (work / f"{name}.json").exists():
        return {"status": f"crashed (exit {code})", "wall_s": wall, **_log_entry(log)}
    figures = json.loads((work / f"{name}.json").read_text())
    failures = STAGE_FAILURES.get(name, lambda _figures: [])(figures)
    if failures:
        return {"status": f"failed: {'; '.join(failures)}", "wall_s": wall, **figures}
    return {"status": "ok", "wall_s": wall, **figures}


def kill_group(process: subprocess.Popen) -> None:
    """Kill `process` and every process of its group (what it started), and reap it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()
    process.wait()


def _log_entry(log: Path) -> dict:
    tail = log.read_text(errors="replace").strip().splitlines()
    return {"log": str(log), "error": " | ".join(tail[-3:]), "log_tail": tail[-LOG_TAIL_LINES:]}


def _child_main(argv: list[str] | None = None) -> int:
    """A stage's child process: `python -m rhythm_core.gpu_check.run --stage NAME --work DIR [--smoke]`."""
    from ..processes import die_with_parent, parent_pid

    die_with_parent(parent_pid())  # the check's end (a kill included) ends the stage
    parser = argparse.ArgumentParser(prog="python -m rhythm_core.gpu_check.run")
    parser.add_argument("--stage", required=True, choices=list(STAGES))
    parser.add_argument("--work", required=True)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    run_one_stage(args.stage, Path(args.work), args.smoke)
    return 0


if __name__ == "__main__":
    sys.exit(_child_main())
