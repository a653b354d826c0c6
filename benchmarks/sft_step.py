"""Seconds per SFT step of the tiny student, TRL's fused LM head projecting every position (its
default off Triton devices), against only the labelled ones (`labelled_positions_only`), against that
and the last layer at the positions the loss reads (`last_layer_on_read_positions`; both are what
`run_sft` and `run_grpo` do), at the short-context and the whole-week length, alternating.

    python benchmarks/sft_step.py                                  # 1,000 Bayesian-teacher weeks
    python benchmarks/sft_step.py --dataset /path/to/sft_dataset   # a saved sft_dataset

Each variant trains a fresh copy of the same base model for the same steps on the same batches, so
the losses must agree; the first repetition includes warm-up. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from pathlib import Path

from results_file import write_result

VARIANTS = ("every position", "answers only", "answers + last layer at read positions")


def time_steps(base: Path, train, max_length: int, steps: int, variant: str) -> tuple[float, list[float]]:
    from trl import SFTConfig, SFTTrainer

    from rhythm_core.training.fused_head import labelled_positions_only
    from rhythm_core.training.last_layer import last_layer_on_read_positions
    from rhythm_core.training.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(str(base), for_training=True)
    args = SFTConfig(output_dir=str(base.parent / "trainer"), max_steps=steps, learning_rate=1e-3,
                     per_device_train_batch_size=8, max_length=max_length, assistant_only_loss=True,
                     logging_steps=max(1, steps // 3), eval_strategy="no", save_strategy="no", report_to=[],
                     use_cpu=True, activation_checkpointing=False, seed=0, disable_tqdm=True)
    trainer = SFTTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer)
    with (labelled_positions_only() if variant != VARIANTS[0] else contextlib.nullcontext(),
          last_layer_on_read_positions(model) if variant == VARIANTS[2] else contextlib.nullcontext()):
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
    return seconds / steps, [round(e["loss"], 5) for e in trainer.state.log_history if "loss" in e]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dataset", help="a saved sft_dataset (default: build one from --weeks teacher weeks)")
    parser.add_argument("--weeks", type=int, default=1000)
    parser.add_argument("--short-steps", type=int, default=30)
    parser.add_argument("--week-steps", type=int, default=12)
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()

    import datasets
    import torch

    from rhythm_core.data.sft_dataset import build_sft_dataset, save_sft_dataset
    from rhythm_core.teacher.run import run_teacher
    from rhythm_core.teacher.settings import TeacherSettings
    from rhythm_core.teacher.trajectories import read_trajectories
    from rhythm_core.training.sft import with_system_prompt
    from rhythm_core.training.tiny import TinyModelConfig, build_tiny_base

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        dataset_dir = args.dataset
        if dataset_dir is None:
            run_teacher(TeacherSettings(backend="bayes"), "continuous", range(1000, 1000 + args.weeks), tmp / "t.jsonl")
            save_sft_dataset(build_sft_dataset(read_trajectories(tmp / "t.jsonl").records), tmp / "sft", {})
            dataset_dir = tmp / "sft"
        data = datasets.load_from_disk(str(dataset_dir), keep_in_memory=True)  # maps write no cache into the artifact
        train = with_system_prompt(data["train"].select_columns(["messages"]), "compact")
        base = Path(build_tiny_base(data["train"], tmp / "base", TinyModelConfig())["path"])
        print(f"torch threads {torch.get_num_threads()}; {len(train)} training weeks; batches of 8")
        print(f"| rep | length | steps | {' s/step | '.join(VARIANTS)} s/step | ratios to the first | losses agree |")
        print("|---" * (len(VARIANTS) + 5) + "|")
        rows = []
        for rep in range(args.reps):
            for length, steps in ((512, args.short_steps), (4096, args.week_steps)):
                timed = [time_steps(base, train, length, steps, variant) for variant in VARIANTS]
                first, first_losses = timed[0]
                agree = all(abs(a - b) < 1e-3 for _, losses in timed[1:] for a, b in zip(first_losses, losses))
                ratios = " / ".join(f"{seconds / first:.2f}" for seconds, _ in timed[1:])
                print(f"| {rep} | {length} | {steps} | {' | '.join(f'{seconds:.3f}' for seconds, _ in timed)} | "
                      f"{ratios} | {agree} |", flush=True)
                rows.append({"rep": rep, "max_length": length, "steps": steps,
                             "s_per_step": {variant: round(seconds, 4) for variant, (seconds, _) in zip(VARIANTS, timed)},
                             "losses_agree": agree})
    write_result("sft_step", {"batch": 8, "rows": rows},
                 question="What do the SFT step's two hooks (the LM head and the last layer only where the loss reads) save?")


if __name__ == "__main__":
    main()
