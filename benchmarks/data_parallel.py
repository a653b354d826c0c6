"""SFT of the tiny student on 1 and on 2 data-parallel processes (torchrun, gloo), alternating, with
the same global batch: what the collective costs on this CPU, and whether the losses agree. Then, as
arithmetic (not a measurement), what 8 GPUs would give the published 3B LoRA student.

    python benchmarks/data_parallel.py [--steps 30] [--reps 2] [--weeks 200]

Two cores give 2 processes no speed-up (each rank gets one torch thread where one process had two);
the figure is the ratio of seconds per step, 2 processes over 1. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from results_file import write_result

# The published student's shape and adapter (rhythm_core.training.qwen2_standin.QWEN25_3B_SHAPE and
# the published preset's LoRA on q, k, v, o with r = 16).
QWEN25_3B = {"hidden": 2048, "layers": 36, "heads": 16, "kv_heads": 2}
LORA_R = 16
# The published recipe's SFT step on one H200 (transcribed in benchmarks/results/gpu_check_h200.json,
# not measured by this script): 8 conversations a step in micro-batches of 2, and one at a time.
H200_STEP_S = 2.74
H200_ONE_CONVERSATION_S = (4.07 / 8, 4.77 / 8)
CONVERSATIONS_PER_STEP = 8
# Ring all-reduce bus bandwidth, bytes/s: NVLink of an 8-GPU H100/H200 board (NCCL's all_reduce_perf
# reaches ~ 350-450 GB/s there), and PCIe Gen4 x16 between GPUs without NVLink (~ 20 GB/s).
LINKS = {"NVLink": 350e9, "PCIe Gen4": 20e9}


def lora_parameters(shape: dict, r: int) -> int:
    """Trainable parameters of LoRA on q, k, v, o: r × (in + out) per projection and layer."""
    hidden, head_dim = shape["hidden"], shape["hidden"] // shape["heads"]
    kv = shape["kv_heads"] * head_dim
    per_layer = r * ((hidden + hidden) * 2 + (hidden + kv) * 2)
    return per_layer * shape["layers"]


def eight_gpu_arithmetic() -> dict:
    """Seconds per SFT step of the published student on 8 GPUs from the one-GPU step and the gradient
    all-reduce: the global batch of 8 leaves each GPU one conversation."""
    params = lora_parameters(QWEN25_3B, LORA_R)
    grad_bytes = params * 4  # LoRA weights and their gradients stay fp32 under bf16 autocast
    gpus = 8
    traffic = 2 * (gpus - 1) / gpus * grad_bytes  # what each GPU sends in a ring all-reduce
    comm = {name: traffic / bandwidth for name, bandwidth in LINKS.items()}
    step = [t + comm["NVLink"] for t in H200_ONE_CONVERSATION_S]
    return {"trainable_parameters": params, "gradient_mb": round(grad_bytes / 1e6, 1),
            "allreduce_ms": {name: round(1e3 * s, 2) for name, s in comm.items()},
            "one_gpu_step_s": H200_STEP_S, "eight_gpu_step_s": [round(s, 2) for s in step],
            "speedup": [round(H200_STEP_S / s, 1) for s in reversed(step)],
            "conversations_per_gpu": CONVERSATIONS_PER_STEP // gpus}


def build_dataset(root: Path, weeks: int) -> Path:
    from rhythm_core.data.sft_dataset import build_sft_dataset, save_sft_dataset
    from rhythm_core.teacher.run import run_teacher
    from rhythm_core.teacher.settings import TeacherSettings
    from rhythm_core.teacher.trajectories import read_trajectories

    run_teacher(TeacherSettings(backend="bayes"), "continuous", range(1000, 1000 + weeks), root / "teacher.jsonl")
    data = build_sft_dataset(read_trajectories(root / "teacher.jsonl").records, validation_fraction=0.1)
    save_sft_dataset(data, root / "sft", {"note": "benchmarks/data_parallel.py"})
    return root / "sft"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--weeks", type=int, default=200)
    args = parser.parse_args()

    from safetensors.torch import load_file

    from rhythm_core.training.entry import run_stage_launched

    config = {"max_steps": args.steps, "short_context_steps": 0, "per_device_train_batch_size": 8,
              "logging_steps": 1, "report_to": "none", "eval_examples": 8}
    rows, losses, weights = [], {}, {}
    with tempfile.TemporaryDirectory(prefix="rhythm-ddp-bench-") as scratch:
        dataset = build_dataset(Path(scratch), args.weeks)
        for rep in range(args.reps):
            for processes in (1, 2):
                out = Path(scratch) / f"run-{rep}-{processes}"
                result = run_stage_launched("sft", config, str(dataset), out, None, {}, processes)
                history = json.loads((out / "metrics.json").read_text())["log_history"]
                losses[processes] = [e["loss"] for e in history if "loss" in e]
                weights[processes] = load_file(str(out / "model" / "model.safetensors"))
                rows.append({"rep": rep, "processes": processes, "s_per_step": round(result["train_s"] / args.steps, 4),
                             "final_train_loss": result["final_train_loss"]})
                print(rows[-1], flush=True)
    per_step = {p: sorted(r["s_per_step"] for r in rows if r["processes"] == p) for p in (1, 2)}
    median = {p: values[len(values) // 2] for p, values in per_step.items()}
    gaps = [abs(a - b) / abs(a) for a, b in zip(losses[1], losses[2])]
    agree = max(gaps)
    weight_gap = max((weights[1][k] - weights[2][k]).abs().max().item() for k in weights[1])
    figures = {"steps": args.steps, "global_batch": 8, "weeks": args.weeks, "rows": rows,
               "ratio_2_over_1": round(median[2] / median[1], 2),
               "max_relative_loss_difference": float(f"{agree:.2g}"),
               "relative_loss_difference_by_step": [float(f"{g:.2g}") for g in gaps],
               "max_abs_weight_difference": float(f"{weight_gap:.2g}"), "eight_gpus": eight_gpu_arithmetic()}
    print(json.dumps(figures, indent=1))
    write_result("data_parallel", figures,
                 question="What does training on 2 data-parallel processes cost on this CPU, and what would 8 GPUs give?")


if __name__ == "__main__":
    main()
