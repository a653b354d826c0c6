"""The GPU check to run before paying for GPU time: the published recipe's stages on a random-weight
Qwen2.5-3B-shaped student and the demo's tiny student, offline (nothing is downloaded), each stage
in a process of its own under a time budget. Figures go to a JSON file as each stage ends.

    make gpu-check                                    # one CUDA GPU, ~8 minutes: gpu_check.json
    python benchmarks/gpu_check.py --smoke            # the CPU form: tiny shapes, about a minute

Stages (each needs the ones before it that it names):
  prepare   Bayesian-teacher weeks and their SFT datasets (48 weeks for the 3B student, the demo's 2,000
            for the tiny one); the 3B-shaped model (Qwen2's tokenizer class trained offline on the weeks)
  lora_sft  LoRA SFT at the published settings (r=16, micro-batches of 2, 4 accumulated): s/step, tokens/s,
            and a profile of its second step (device busy time against wall time, kernel launches)
  grpo      GRPO at the published settings (8 completions in micro-batches of 2, 2 steps, 12-token
            completions) and its gate on 4 held-out weeks: s/step, the gate's time
  play      the SFT student on 8 weeks x 28 turns at 12 new tokens, as evaluation plays it, then with the
            prompt cache off, with it held within 0.5 GiB and (CUDA) with cuDNN's attention: seconds,
            seconds outside generate, peak memory per variant
  tiny      the demo's tiny SFT (600 + 240 steps) and GRPO with its gate (64 weeks), then the SFT student's play
            of 64 weeks with the belief's sum and without
Every stage records its peak memory (CUDA: allocated and reserved; CPU: the process's peak RSS; the
play's is its default variant's, each variant's beside it) and, on CUDA, whether it fits an A10G
(24 GB: 21.5 GiB reserved leaves room for the CUDA context).
Exit status 0 when every stage finished, 1 when any crashed or ran past its budget, 2 for a mistake.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # rhythm_core, and the Qwen2 stand-in under tests/
sys.path.insert(0, str(ROOT / "benchmarks"))  # number_decoding's play

# stage -> (the stages it needs, budget in seconds on CUDA, budget in the CPU smoke form). The smoke
# form's budgets only catch a hang: a stage of ~10 s took 90 s on this 2-core CPU under other load.
STAGES = {
    "prepare": ((), 150, 600),
    "lora_sft": (("prepare",), 240, 600),  # 127 s on an H200 with the step profile, 62-67 s without
    "grpo": (("lora_sft",), 300, 600),  # 177 s on an H200, 123 s of it the gate
    "play": (("lora_sft",), 150, 600),
    "tiny": (("prepare",), 150, 600),
}
A10G_RESERVED_GIB = 21.5  # 24 GB is 22.35 GiB; the CUDA context and the allocator's slack take the rest


def sizes(smoke: bool) -> dict:
    """The check's sizes: the CUDA check, or the CPU smoke form's tiny ones."""
    if smoke:
        return {"weeks": "1000-1005", "tiny_weeks": "1000-1011", "sft_steps": 2, "grpo_steps": 1, "gate_weeks": 2,
                "play_weeks": 2, "new_tokens": 4, "tiny_sft": {"max_steps": 4, "short_context_steps": 2, "logging_steps": 1},
                "tiny_grpo": {"max_steps": 1, "validation_weeks": 2, "student_episodes": 1, "max_completion_length": 8},
                "tiny_play_weeks": 2}
    return {"weeks": "1000-1047", "tiny_weeks": "1000-2999", "sft_steps": 8, "grpo_steps": 2, "gate_weeks": 4,
            "play_weeks": 8, "new_tokens": 12, "tiny_sft": {}, "tiny_grpo": {}, "tiny_play_weeks": 64}


# ---------------------------------------------------------------------------------------------
# stages: each runs in its own process and returns its figures
def stage_prepare(work: Path, smoke: bool, device: str) -> dict:
    import datasets

    from rhythm_core.data.stages import dataset_stage
    from rhythm_core.protocol import system_prompt
    from rhythm_core.teacher.settings import TeacherSettings
    from rhythm_core.teacher.stage import teacher_stage
    from tests.qwen2_standin import QWEN25_3B_SHAPE, build_qwen2_standin

    size = sizes(smoke)
    figures = {}
    for name, weeks in (("qwen", size["weeks"]), ("tiny", size["tiny_weeks"])):
        started = time.perf_counter()
        trajectories = teacher_stage(TeacherSettings(backend="bayes"), "continuous", weeks, work / name)  # as measured
        data = dataset_stage(trajectories, work / name)
        figures[f"{name}_dataset"] = data["path"]
        figures[f"{name}_teacher_weeks"] = trajectories["n_episodes"]
        figures[f"{name}_data_s"] = round(time.perf_counter() - started, 1)
    train = datasets.load_from_disk(figures["qwen_dataset"])["train"]
    texts = [system_prompt("full")] + [m["content"] for row in train for m in row["messages"]]
    started = time.perf_counter()
    base = build_qwen2_standin(work / "base", texts, shape=None if smoke else QWEN25_3B_SHAPE, device=device)
    figures.update(base=str(base), base_build_s=round(time.perf_counter() - started, 1))
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(base)
    figures["shape"] = {k: getattr(config, k) for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                                         "num_attention_heads", "num_key_value_heads", "vocab_size")}
    return figures


class StepClock:
    """`on_log` for a run logging every step: the seconds between successive training logs, i.e. each
    step's time after the first (whose time holds the warm-up: kernel choice, compilation). With
    `profile_on` (the device), torch's profiler runs over the second step and `figures` summarizes it:
    wall seconds, the device's busy seconds (its kernels' own time; on the CPU the operators'), kernel
    launches and the costliest operators; a step whose wall time is far above its busy time waits on
    the host (launches, Python), not on the GPU. The profiled step leaves the median when others remain."""

    def __init__(self, profile_on: str | None = None):
        self.last, self.gaps = None, []  # (seconds, whether profiled) per step after the first
        self.device, self.profiler, self.profile = profile_on, None, None

    def __call__(self, entry: dict) -> None:
        if "loss" not in entry:
            return
        profiled = self.profiler is not None and self.profile is None
        if profiled and self.device == "cuda":
            import torch

            torch.cuda.synchronize()
        if self.last is not None:
            self.gaps.append((time.perf_counter() - self.last, profiled))
        if profiled:
            stopped = time.perf_counter()  # stopping collects the step's events: part of the profiler's cost
            self.profiler.stop()
            self.profile = self._summarize(self.gaps[-1][0], stopped)
        elif self.device and self.last is None:
            from torch.profiler import ProfilerActivity, profile

            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device == "cuda" else [])
            self.profiler = profile(activities=activities)
            self.profiler.start()
        self.last = time.perf_counter()  # the next step starts after this callback's own work

    def _summarize(self, wall: float, stopped: float) -> dict:
        events = self.profiler.key_averages()

        def own(e) -> float:  # microseconds of the operator itself, on the device (CUDA) or the CPU
            if self.device == "cuda":
                return getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
            return e.self_cpu_time_total

        top = sorted(events, key=own, reverse=True)[:12]
        return {"wall_s": round(wall, 3), "busy_s": round(sum(own(e) for e in events) / 1e6, 3),
                "kernel_launches": sum(e.count for e in events if e.key in ("cudaLaunchKernel", "cuLaunchKernel",
                                                                             "cudaLaunchKernelExC")),
                "top_ops_ms": [[e.key[:80], round(own(e) / 1e3, 1), e.count] for e in top],
                "summary_s": round(time.perf_counter() - stopped, 1)}  # the profiler's own cost, outside any step

    def figures(self) -> dict:
        gaps = sorted(g for g, profiled in self.gaps if not profiled) or [g for g, _ in self.gaps]
        figures = {"s_per_step_after_first": round(gaps[len(gaps) // 2], 3) if gaps else None}
        return figures | ({"profiled_step": self.profile} if self.device else {})


def training_rates(train_s: float, steps: int, tokens: float, profiler_s: float = 0.0) -> dict:
    """Seconds of training, a step and tokens a second, without the profiler's own seconds (collecting
    and summarizing a step's events inside the run's clock: not training)."""
    train_s -= profiler_s
    return {"train_s": round(train_s, 3), "s_per_step": round(train_s / max(steps, 1), 3),
            "tokens_per_s": round(tokens / train_s, 1) if tokens else None}


def _log_history(out: Path) -> list[dict]:
    return json.loads((out / "metrics.json").read_text()).get("log_history", [])


def stage_lora_sft(work: Path, smoke: bool, device: str) -> dict:
    from rhythm_core.distill import PRESETS
    from rhythm_core.training.sft import SFTRunConfig, run_sft

    prepared = _read(work, "prepare")
    config = SFTRunConfig(**{**PRESETS["published"]["sft"], "base_model": prepared["base"],
                             "max_steps": sizes(smoke)["sft_steps"], "eval_examples": 8, "logging_steps": 1,
                             "report_to": "none"})
    out, clock = work / "lora_sft", StepClock(profile_on=device)
    result = run_sft(config, prepared["qwen_dataset"], out, on_log=clock)
    tokens = max((e.get("num_tokens", 0) for e in _log_history(out)), default=0)
    figures = clock.figures()
    rates = training_rates(result["train_s"], result["steps"], tokens,
                           figures.get("profiled_step", {}).get("summary_s", 0.0))
    return {"model_dir": result["model_dir"], "steps": result["steps"], **rates, **figures,
            "sequences_per_step": config.per_device_train_batch_size * config.gradient_accumulation_steps,
            "micro_batch": config.per_device_train_batch_size,
            "longest_conversation_tokens": result["longest_conversation_tokens"],
            "trainable_parameters": result["trainable_parameters"], "total_parameters": result["total_parameters"],
            "valid_answer_rate_after": result["valid_answer_rate_after"], "wall_s": result["wall_s"]}


def stage_grpo(work: Path, smoke: bool, device: str) -> dict:
    from rhythm_core.distill import PRESETS
    from rhythm_core.training.grpo import GRPORunConfig, run_grpo

    size = sizes(smoke)
    overrides = {"max_steps": size["grpo_steps"], "max_completion_length": size["new_tokens"],
                 "validation_weeks": size["gate_weeks"], "student_episodes": 2, "report_to": "none"}
    if smoke:  # 4 completions a step in micro-batches of 2
        overrides.update(per_device_train_batch_size=2, gradient_accumulation_steps=2, num_generations=2)
    config = GRPORunConfig(**{**PRESETS["published"]["grpo"], **overrides})
    out, clock = work / "grpo", StepClock()
    result = run_grpo(config, _read(work, "prepare")["qwen_dataset"], _read(work, "lora_sft")["model_dir"], out,
                      on_log=clock)
    runtime = next((e["train_runtime"] for e in _log_history(out) if "train_runtime" in e), None)
    gate = result.get("validation", {})
    return {"steps": result["steps"], "completions_per_step": config.completions_per_step,
            "micro_batch": config.per_device_train_batch_size, "max_completion_length": config.max_completion_length,
            "train_s": runtime, "s_per_step": round(runtime / max(result["steps"], 1), 3) if runtime else None,
            **clock.figures(),
            "gate_weeks": gate.get("weeks"), "gate_s": gate.get("wall_s"), "gate_difference": gate.get("difference"),
            "generation_attention": result["speedups"].get("generation_attention"), "wall_s": result["wall_s"]}


def _timed_generate(model, clock: dict):
    """Count the seconds `model.generate` takes (the GPU's work included) into clock["generate_s"]."""
    import torch

    generate = model.generate

    def timed(*args, **kwargs):
        started = time.perf_counter()
        out = generate(*args, **kwargs)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        clock["generate_s"] += time.perf_counter() - started
        clock["calls"] += 1
        return out

    model.generate = timed


def stage_play(work: Path, smoke: bool, device: str) -> dict:
    from unittest import mock

    import numpy as np

    from rhythm_core.evaluation.rollouts import play_records
    from rhythm_core.training import policy
    from rhythm_core.training.generation import CUDNN_ATTENTION_ENV, SamplingConfig, attention_backend
    from rhythm_core.training.models import load_model_and_tokenizer
    from rhythm_core.training.policy import LLMPolicyAgent

    size = sizes(smoke)
    model_dir = _read(work, "lora_sft")["model_dir"]
    model, tokenizer = load_model_and_tokenizer(model_dir)
    clock = {"generate_s": 0.0, "calls": 0}
    _timed_generate(model, clock)
    # (name, prompt cache, its byte budget where not the product's, cuDNN's attention)
    variants = [("default", True, None, False), ("prompt cache off", False, None, False),
                ("prompt cache within 1 MiB" if smoke else "prompt cache within 0.5 GiB", True,
                 2**20 if smoke else 2**29, False)]
    if device == "cuda":
        variants.append(("cuDNN attention on", True, None, True))
    seeds = np.arange(size["play_weeks"])
    figures, first_actions = {"weeks": len(seeds), "turns": 28, "new_tokens": size["new_tokens"]}, None
    for name, cache, budget, cudnn in variants:
        os.environ.pop(CUDNN_ATTENTION_ENV, None)
        if cudnn:
            os.environ[CUDNN_ATTENTION_ENV] = "1"
        _reset_peak_memory(device)
        agent = LLMPolicyAgent.from_checkpoint(model_dir, loaded=(model, tokenizer), reuse_prompt_cache=cache,
                                               sampling=SamplingConfig(max_new_tokens=size["new_tokens"]))
        clock.update(generate_s=0.0, calls=0)
        started = time.perf_counter()
        with mock.patch.object(policy, "prompt_cache_budget", lambda model, b=budget: b) if budget else nullcontext():
            records = play_records(agent, "continuous", seeds, {"backend": "checkpoint", "model": model_dir, "id": name})
        wall = time.perf_counter() - started
        actions = [step["action"] for record in records for step in record["steps"]]
        first_actions = first_actions or actions
        figures[name] = {"prompt_cache": bool(agent.prompt_cache is not None),
                         "attention": attention_backend(device), "wall_s": round(wall, 2),
                         "generate_s": round(clock["generate_s"], 2), "generate_calls": clock["calls"],
                         "outside_generate_s": round(wall - clock["generate_s"], 2),
                         "same_actions_as_default": actions == first_actions, **peak_memory(device)}
        if agent.prompt_cache is not None:
            figures[name].update(prompt_tokens_reused=round(agent.prompt_cache.reused_fraction, 3),
                                 cache_budget_mib=None if agent.prompt_cache.max_bytes is None
                                 else round(agent.prompt_cache.max_bytes / 2**20, 1),
                                 cache_overflowed=agent.prompt_cache.overflowed)
        del agent
    os.environ.pop(CUDNN_ATTENTION_ENV, None)
    if device == "cuda":  # the stage's peak is what evaluation plays: the default's (the others' beside them)
        figures.update({k: figures["default"][k] for k in ("peak_allocated_gib", "peak_reserved_gib", "fits_a10g_24gb")})
    return figures


def _reset_peak_memory(device: str) -> None:
    """Start a new peak (CUDA: the allocator's cached blocks given back too, so the next peak is its own)."""
    if device == "cuda":
        import gc

        import torch

        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def stage_tiny(work: Path, smoke: bool, device: str) -> dict:
    from rhythm_core.training.grpo import GRPORunConfig, run_grpo
    from rhythm_core.training.sft import SFTRunConfig, run_sft

    size = sizes(smoke)
    dataset = _read(work, "prepare")["tiny_dataset"]
    sft = run_sft(SFTRunConfig(**size["tiny_sft"], report_to="none"), dataset, work / "tiny_sft")
    grpo = run_grpo(GRPORunConfig(**size["tiny_grpo"], report_to="none"), dataset, sft["model_dir"], work / "tiny_grpo")
    runtime = next((e["train_runtime"] for e in _log_history(work / "tiny_grpo") if "train_runtime" in e), None)
    gate = grpo.get("validation", {})
    return {"sft_steps": sft["steps"], "sft_train_s": sft["train_s"],
            "sft_s_per_step": round(sft["train_s"] / max(sft["steps"], 1), 4), "sft_final_loss": sft["final_train_loss"],
            "sft_valid_answer_rate": sft["valid_answer_rate_after"], "grpo_steps": grpo["steps"],
            "grpo_s_per_step": round(runtime / max(grpo["steps"], 1), 3) if runtime else None,
            "gate_weeks": gate.get("weeks"), "gate_s": gate.get("wall_s"), "gate_difference": gate.get("difference"),
            "gate_difference_se": gate.get("difference_se"), "play": tiny_play(sft["model_dir"], size["tiny_play_weeks"])}


def tiny_play(model_dir: str, weeks: int) -> dict:
    """The tiny SFT student's greedy play (benchmarks/number_decoding.py) with the belief's sum (its
    default on a linear chain) and without, in that order in this process: seconds, v3, belief MAE, and
    the paired v3 difference. The sum's processor reads tokens back on the host at each decode step."""
    import numpy as np
    from number_decoding import play

    from rhythm_core.training.models import checkpoint_info

    seeds = np.arange(9500, 9500 + weeks)  # continuous training seeds no recipe trains on
    figures, scores = {"readout_form": checkpoint_info(model_dir).get("readout_form"), "weeks": weeks}, {}
    for label, mode in (("sum", "median_sum"), ("no_sum", "median_nosum")):
        scores[label], mae, wall = play(model_dir, seeds, mode)  # its last step reads the answers back: synchronized
        figures[label] = {"s": round(wall, 2), "v3": round(float(scores[label].mean()), 4),
                          "belief_mae": round(float(np.nanmean(mae)), 4)}
    diff = scores["sum"] - scores["no_sum"]
    figures["sum_minus_no_sum"] = round(float(diff.mean()), 4)
    figures["sum_minus_no_sum_se"] = round(float(diff.std(ddof=1) / np.sqrt(len(diff))), 4) if len(diff) > 1 else None
    return figures


def _read(work: Path, stage: str) -> dict:
    return json.loads((work / f"{stage}.json").read_text())


def peak_memory(device: str) -> dict:
    """This process's peak memory so far."""
    if device == "cuda":
        import torch

        allocated = torch.cuda.max_memory_allocated() / 2**30
        reserved = torch.cuda.max_memory_reserved() / 2**30
        return {"peak_allocated_gib": round(allocated, 2), "peak_reserved_gib": round(reserved, 2),
                "fits_a10g_24gb": reserved <= A10G_RESERVED_GIB}
    import resource

    return {"peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)}


def run_one_stage(name: str, work: Path, smoke: bool) -> None:
    """The child's side: run `name` and write its figures to <work>/<name>.json."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    started = time.perf_counter()
    figures = globals()[f"stage_{name}"](work, smoke, device)
    figures = {**peak_memory(device), **figures, "stage_s": round(time.perf_counter() - started, 1)}
    (work / f"{name}.json").write_text(json.dumps(_finite(figures), indent=2, default=str) + "\n")


def _finite(value):
    """`value` with every infinite or NaN float as None (strict JSON; a one-week gate has no error bar)."""
    import math

    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return None if isinstance(value, float) and not math.isfinite(value) else value


# ---------------------------------------------------------------------------------------------
def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for package in ("torch", "transformers", "trl", "peft"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = None
    return out


def _device() -> tuple[str, str]:
    """("cuda" or "cpu", its name), without initializing CUDA in this process."""
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available() and "
                            "torch.cuda.get_device_name(0) or '')"], capture_output=True, text=True)
    name = probe.stdout.strip()
    return ("cuda", name) if name else ("cpu", "CPU")


def run_check(out: Path, work: Path, smoke: bool, stages: list[str], budget_scale: float = 1.0,
              say=print) -> dict:
    """Run `stages` in order, each in a process of its own under its budget; the record is rewritten
    to `out` after every stage. Returns the record."""
    device, device_name = _device()
    record = {"started": datetime.now(UTC).isoformat(timespec="seconds"), "smoke": smoke,
              "device": device_name, "versions": _versions(), "stages": {}, "ok": True}
    work.mkdir(parents=True, exist_ok=True)
    (work / "logs").mkdir(exist_ok=True)
    for name in stages:
        needs, cuda_budget, cpu_budget = STAGES[name]
        budget = round((cpu_budget if smoke else cuda_budget) * budget_scale, 1)
        missing = [n for n in needs if not (work / f"{n}.json").exists()]
        if missing:
            entry = {"status": f"skipped: needs {', '.join(missing)}"}
        else:
            entry = _run_stage_process(name, work, smoke, budget)
        entry["budget_s"] = budget
        record["stages"][name] = entry
        record["ok"] = record["ok"] and entry["status"] == "ok"
        out.write_text(json.dumps(record, indent=2, default=str) + "\n")
        say(f"gpu-check {name:9s} {entry['status']}" + (f" in {entry['wall_s']} s" if "wall_s" in entry else "")
            + "".join(f", {k} {v}" for k, v in entry.items() if k in ("peak_reserved_gib", "peak_rss_gib",
                                                                         "s_per_step", "s_per_step_after_first",
                                                                         "fits_a10g_24gb")))
    return record


def _run_stage_process(name: str, work: Path, smoke: bool, budget: float) -> dict:
    (work / f"{name}.json").unlink(missing_ok=True)
    command = [sys.executable, str(Path(__file__).resolve()), "--stage", name, "--work", str(work)]
    log = work / "logs" / f"{name}.log"
    started = time.perf_counter()
    with open(log, "w") as stream:
        process = subprocess.Popen(command + (["--smoke"] if smoke else []), stdout=stream, stderr=subprocess.STDOUT,
                                   start_new_session=True)  # its own group: a timeout stops all it started
        try:
            code = process.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            code = None
    wall = round(time.perf_counter() - started, 1)
    if code is None:
        return {"status": f"timed out after {budget} s", "wall_s": wall, "log": str(log)}
    if code != 0 or not (work / f"{name}.json").exists():
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        return {"status": f"crashed (exit {code})", "wall_s": wall, "log": str(log), "error": " | ".join(tail)}
    return {"status": "ok", "wall_s": wall, **_read(work, name)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="the CPU form: tiny shapes (also runs on a GPU)")
    parser.add_argument("--out", default="gpu_check.json", help="the JSON file the figures go to")
    parser.add_argument("--work", default=None, help="folder for the stages' data and models (default: a temporary one)")
    parser.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated, in order (default: {','.join(STAGES)})")
    parser.add_argument("--budget-scale", type=float, default=1.0, help="multiply every stage's time budget (a slower GPU)")
    parser.add_argument("--stage", default=None, help=argparse.SUPPRESS)  # a child process runs one stage
    args = parser.parse_args(argv)
    if args.stage:
        run_one_stage(args.stage, Path(args.work), args.smoke)
        return 0
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    unknown = [s for s in stages if s not in STAGES]
    if unknown or args.budget_scale <= 0:
        print(f"gpu_check: unknown stage {', '.join(unknown)}; allowed: {', '.join(STAGES)}" if unknown
              else "gpu_check: --budget-scale must be above 0", file=sys.stderr)
        return 2
    if not args.smoke and _device()[0] != "cuda":
        print("gpu_check: no CUDA GPU is visible to torch here (a CPU build of torch, or no GPU): install a CUDA "
              "build (`make TORCH_SPEC=torch install`) on a GPU machine, or run the CPU form with --smoke",
              file=sys.stderr)
        return 2
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="rhythm-gpu-check-"))
    record = run_check(Path(args.out), work, args.smoke, stages, args.budget_scale)
    print(f"gpu-check: {'every stage finished' if record['ok'] else 'FAILED'}; figures in {args.out}, work in {work}")
    return 0 if record["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
