"""The GPU check's stages (`gpu_check.run` runs each in a child process): what each does, at the sizes
`sizes` gives, and the figures it returns; `run_one_stage` is a child's side. Nothing heavy is
imported until a stage runs.

The play's token check: a random-weight student's answers are never valid (every action is the
fallback), so its actions say nothing; each play variant's generated token ids are compared with the
default's, turn by turn and week by week (`compare_tokens`). Where the student plays in float32 (the
CPU) the variants must generate the same ids and a difference fails the stage (`play_failures`); in
bf16 (CUDA) the cached and uncached paths round differently and a random-weight model's near-ties
turn on that, so there the comparison is recorded, not failed on (`token_check` in the figures).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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

    from rhythm_env.protocol import system_prompt

    from ..data.stages import dataset_stage
    from ..teacher.settings import TeacherSettings
    from ..teacher.stage import teacher_stage
    from ..training.qwen2_standin import QWEN25_3B_SHAPE, build_qwen2_standin

    size = sizes(smoke)
    figures = {}
    for name, weeks in (("qwen", size["weeks"]), ("tiny", size["tiny_weeks"])):
        started = time.perf_counter()
        trajectories = teacher_stage(TeacherSettings(backend="bayes"), "continuous", weeks, work / name)  # the teacher of gpu_check_h200.json
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
    from ..distill import PRESETS
    from ..training.sft import SFTRunConfig, run_sft

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
    from ..distill import PRESETS
    from ..training.grpo import GRPORunConfig, run_grpo

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


# ---------------------------------------------------------------------------------------------
# the play: variants of evaluation's play, their seconds and their token ids against the default's
@dataclass(frozen=True)
class PlayVariant:
    """One way the play stage plays the SFT student, through the core's public settings."""

    name: str
    prompt_cache: bool = True  # LLMPolicyAgent(reuse_prompt_cache=...)
    cache_bytes: int | None = None  # LLMPolicyAgent(prompt_cache_max_bytes=...); None: the product's budget
    cudnn_attention: bool = False  # generation.CUDNN_ATTENTION_ENV=1: torch may choose cuDNN's attention
    temperature: float = 0.0  # the sampling temperature; 0 (greedy) as evaluation plays


def play_variants(smoke: bool, device: str) -> list[PlayVariant]:
    """The play stage's variants, the default (evaluation's play) first: the prompt cache off, held
    within a budget a week overflows (the CPU form's 1 MiB; 0.5 GiB on a GPU) and, on CUDA, cuDNN's
    attention on."""
    variants = [PlayVariant("default"), PlayVariant("prompt cache off", prompt_cache=False),
                PlayVariant("prompt cache within 1 MiB", cache_bytes=2**20) if smoke
                else PlayVariant("prompt cache within 0.5 GiB", cache_bytes=2**29)]
    if device == "cuda":
        variants.append(PlayVariant("cuDNN attention on", cudnn_attention=True))
    return variants


class GenerateRecorder:
    """Wraps one model's `generate` (an attribute of that model object; the core is left alone): the
    seconds its calls take (the GPU's work included), their number, and each generated row's new
    token ids, up to and including the first end-of-answer token (what follows is padding), in the
    order the rows were generated."""

    def __init__(self, model, eos_ids):
        self.generate, self.eos = model.generate, set(eos_ids)
        self.reset()
        model.generate = self

    def reset(self) -> None:
        self.seconds, self.calls, self.rows = 0.0, 0, []

    def __call__(self, *args, **kwargs):
        import torch

        started = time.perf_counter()
        out = self.generate(*args, **kwargs)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.seconds += time.perf_counter() - started
        self.calls += 1
        sequences = out if isinstance(out, torch.Tensor) else out.sequences
        prompt = kwargs["input_ids"] if "input_ids" in kwargs else args[0]
        for row in sequences[:, prompt.shape[1] :].tolist():
            end = next((i + 1 for i, token in enumerate(row) if token in self.eos), len(row))
            self.rows.append(row[:end])
        return out


def compare_tokens(default: list[list[int]], rows: list[list[int]], weeks: int) -> dict:
    """A variant's generated token ids (`rows`, one per answer in the order the play generated them:
    every week's turn 1, then turn 2, ...) against the default variant's: whether they are the same
    throughout, the share of (week, turn) answers that are, and the first turn (1-based) where any
    week's differ (None where none does)."""
    answers = max(len(default), len(rows))
    same = [i < len(default) and i < len(rows) and default[i] == rows[i] for i in range(answers)]
    return {"same_tokens_as_default": all(same),
            "answers_same_as_default": round(sum(same) / answers, 4) if answers else None,
            "first_different_turn": next((i // max(weeks, 1) + 1 for i, equal in enumerate(same) if not equal), None)}


def stage_play(work: Path, smoke: bool, device: str) -> dict:
    size = sizes(smoke)
    return play_check(_read(work, "lora_sft")["model_dir"], size["play_weeks"], size["new_tokens"], device,
                      play_variants(smoke, device))


def play_check(model_dir: str, weeks: int, new_tokens: int, device: str, variants: list[PlayVariant]) -> dict:
    """Play the student at `model_dir` on `weeks` continuous weeks x 28 turns at `new_tokens` new tokens
    once per variant, in this process and in order (the first is the default the others are compared
    with): per variant its seconds (and those outside `generate`, the host's work), generate calls,
    peak memory, the invalid-answer rate and its token ids against the default's (`compare_tokens`);
    `token_check` says whether a difference fails the stage (`play_failures`)."""
    import numpy as np
    import torch

    from ..evaluation.rollouts import play_records
    from ..training.generation import CUDNN_ATTENTION_ENV, SamplingConfig, attention_backend
    from ..training.models import load_model_and_tokenizer
    from ..training.policy import LLMPolicyAgent

    model, tokenizer = load_model_and_tokenizer(model_dir)
    eos = tokenizer.eos_token_id
    recorder = GenerateRecorder(model, eos if isinstance(eos, list) else [eos])
    seeds = np.arange(weeks)
    exact = model.dtype == torch.float32
    figures = {"weeks": len(seeds), "turns": 28, "new_tokens": new_tokens, "dtype": str(model.dtype).split(".")[-1],
               "token_check": "exact: a variant with other token ids than the default's fails the stage" if exact
               else "recorded: in this dtype the variants' kernels round differently and a random-weight "
                    "student's near-ties turn on it; not failed on"}
    default_rows = None
    for variant in variants:
        os.environ.pop(CUDNN_ATTENTION_ENV, None)
        if variant.cudnn_attention:
            os.environ[CUDNN_ATTENTION_ENV] = "1"
        _reset_peak_memory(device)
        agent = LLMPolicyAgent.from_checkpoint(
            model_dir, loaded=(model, tokenizer), reuse_prompt_cache=variant.prompt_cache,
            prompt_cache_max_bytes=variant.cache_bytes,
            sampling=SamplingConfig(max_new_tokens=new_tokens, temperature=variant.temperature))
        recorder.reset()
        started = time.perf_counter()
        records = play_records(agent, "continuous", seeds, {"backend": "checkpoint", "model": model_dir,
                                                            "id": variant.name})
        wall = time.perf_counter() - started
        default_rows = recorder.rows if default_rows is None else default_rows
        invalid = [flag for record in records for flag in record["invalid"]]
        figures[variant.name] = {
            "prompt_cache": bool(agent.prompt_cache is not None), "attention": attention_backend(device),
            "wall_s": round(wall, 2), "generate_s": round(recorder.seconds, 2), "generate_calls": recorder.calls,
            "outside_generate_s": round(wall - recorder.seconds, 2),
            "invalid_rate": round(sum(invalid) / max(len(invalid), 1), 4),
            **compare_tokens(default_rows, recorder.rows, len(seeds)), **peak_memory(device)}
        if agent.prompt_cache is not None:
            figures[variant.name].update(prompt_tokens_reused=round(agent.prompt_cache.reused_fraction, 3),
                                         cache_budget_mib=None if agent.prompt_cache.max_bytes is None
                                         else round(agent.prompt_cache.max_bytes / 2**20, 1),
                                         cache_overflowed=agent.prompt_cache.overflowed)
        del agent
    os.environ.pop(CUDNN_ATTENTION_ENV, None)
    default = variants[0].name
    if device == "cuda":  # the stage's peak is what evaluation plays: the default's (the others' beside them)
        figures.update({k: figures[default][k] for k in ("peak_allocated_gib", "peak_reserved_gib", "fits_a10g_24gb")})
    return figures


def play_failures(figures: dict) -> list[str]:
    """What fails a finished play stage: under an exact token check, each variant that generated other
    token ids than the default."""
    if not str(figures.get("token_check", "")).startswith("exact"):
        return []
    return [f"{name} generated other token ids than the default (first at turn {entry.get('first_different_turn')}, "
            f"{entry.get('answers_same_as_default')} of the answers the same)"
            for name, entry in figures.items()
            if isinstance(entry, dict) and entry.get("same_tokens_as_default") is False]


def _reset_peak_memory(device: str) -> None:
    """Start a new peak (CUDA: the allocator's cached blocks given back too, so the next peak is its own)."""
    if device == "cuda":
        import gc

        import torch

        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def stage_tiny(work: Path, smoke: bool, device: str) -> dict:
    from ..training.grpo import GRPORunConfig, run_grpo
    from ..training.sft import SFTRunConfig, run_sft

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
    """The tiny SFT student's greedy play with the belief's sum (its default on a linear chain) and
    without (LLMPolicyAgent's `sum_beliefs`), in that order in this process: seconds, v3, belief MAE,
    and the paired v3 difference. The sum's processor reads tokens back on the host at each decode step."""
    import numpy as np

    from rhythm_env.graders import get_grader
    from rhythm_env.sim.conditions import TUNING_SEEDS

    from ..agents.rollout import rollout
    from ..training.generation import SamplingConfig
    from ..training.models import checkpoint_info
    from ..training.policy import LLMPolicyAgent

    seeds = np.asarray(TUNING_SEEDS["continuous"][:weeks])  # held-out training seeds no recipe trains on
    figures, scores = {"readout_form": checkpoint_info(model_dir).get("readout_form"), "weeks": weeks}, {}
    for label, sum_beliefs in (("sum", True), ("no_sum", False)):
        agent = LLMPolicyAgent.from_checkpoint(model_dir, sampling=SamplingConfig(temperature=0.0),
                                               sum_beliefs=sum_beliefs)
        started = time.perf_counter()
        episodes = rollout(agent, "continuous", seeds)  # its last step reads the answers back: synchronized
        wall = time.perf_counter() - started
        scores[label] = get_grader("v3").grade_batch(episodes)[0]
        mae = np.asarray(episodes.belief_mae(), dtype=float)
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


STAGE_FUNCTIONS: dict[str, Callable[[Path, bool, str], dict]] = {
    "prepare": stage_prepare, "lora_sft": stage_lora_sft, "grpo": stage_grpo, "play": stage_play, "tiny": stage_tiny}
# What fails a stage that finished, beyond crashing or running past its budget.
STAGE_FAILURES: dict[str, Callable[[dict], list[str]]] = {"play": play_failures}


def run_one_stage(name: str, work: Path, smoke: bool) -> None:
    """The child's side: run `name` and write its figures to <work>/<name>.json."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    started = time.perf_counter()
    figures = STAGE_FUNCTIONS[name](work, smoke, device)
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
