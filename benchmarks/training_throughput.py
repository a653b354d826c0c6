"""SFT tokens/s and one GRPO step's time for random-init students of real shapes (no download).

    python benchmarks/training_throughput.py --shape tiny                 # CPU, seconds
    python benchmarks/training_throughput.py --shape qwen2.5-0.5b         # GPU
    python benchmarks/training_throughput.py --shape qwen2.5-3b --lora    # GPU

Builds a teacher dataset with the Bayesian teacher, trains the offline tokenizer on it, then
instantiates a random-init model with the named architecture (Qwen2 shapes) and times TRL's
SFTTrainer and GRPOTrainer (our env/grader rewards). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

SHAPES = {
    "tiny": None,
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, vocab_size=151936),
    "qwen2.5-3b": dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                       num_key_value_heads=2, vocab_size=151936),
}


def build_model_dir(shape: str, dataset_dir: Path, out: Path) -> Path:
    import datasets
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from rhythm_core.training.tiny import build_tiny_base

    base = build_tiny_base(datasets.load_from_disk(str(dataset_dir))["train"], out / "tiny")
    if SHAPES[shape] is None:
        return Path(base["path"])
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base["path"])
    config = Qwen2Config(**SHAPES[shape], max_position_embeddings=32768, tie_word_embeddings=shape != "qwen2.5-3b",
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16 if torch.cuda.is_available() else torch.float32)
    path = out / shape
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)  # the tiny tokenizer's ids fit in the larger vocabulary
    return path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", choices=list(SHAPES), default="tiny")
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--sft-steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--grpo-steps", type=int, default=3)
    parser.add_argument("--lora", action="store_true")
    args = parser.parse_args()

    import torch

    from rhythm_core.data.sft_dataset import build_sft_dataset, save_sft_dataset
    from rhythm_core.teacher.run import run_teacher
    from rhythm_core.teacher.settings import TeacherSettings
    from rhythm_core.teacher.trajectories import read_trajectories
    from rhythm_core.training.grpo import GRPORunConfig, run_grpo
    from rhythm_core.training.sft import SFTRunConfig, run_sft

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        run_teacher(TeacherSettings(), "continuous", range(1000, 1000 + args.episodes), tmp / "t.jsonl")
        save_sft_dataset(build_sft_dataset(read_trajectories(tmp / "t.jsonl").records), tmp / "sft", {})
        model_dir = build_model_dir(args.shape, tmp / "sft", tmp / "models")
        tokens = []
        config = SFTRunConfig(base_model=str(model_dir) if args.shape != "tiny" else "tiny", max_steps=args.sft_steps,
                              per_device_train_batch_size=args.batch, use_lora=args.lora or None,
                              learning_rate=2e-4 if args.shape != "tiny" else 5e-3, prompt_variant="compact",
                              logging_steps=1, eval_examples=8)
        result = run_sft(config, tmp / "sft", tmp / "sft_out", on_log=lambda e: tokens.append(e.get("num_tokens")))
        seen = max(t for t in tokens if t)
        train_s = result["wall_s"]
        print(f"[{device}] {args.shape}{' +LoRA' if config.lora else ''}: SFT {result['steps']} steps, "
              f"{seen:,.0f} tokens, {result['trainable_parameters']:,} trainable of {result['total_parameters']:,} "
              f"parameters; {seen / train_s:,.0f} tokens/s over the whole stage ({train_s:.1f} s incl. eval)")
        start = time.perf_counter()
        grpo = run_grpo(GRPORunConfig(max_steps=args.grpo_steps, teacher_prompts=32, student_episodes=0),
                        tmp / "sft", result["model_dir"], tmp / "grpo_out")
        elapsed = time.perf_counter() - start
        print(f"[{device}] {args.shape}: GRPO {grpo['steps']} steps of {GRPORunConfig().per_device_train_batch_size} "
              f"completions in {elapsed:.1f} s = {elapsed / max(grpo['steps'], 1):.2f} s/step (incl. model load)")


if __name__ == "__main__":
    main()
