"""GRPO on RhythmEnv with TRL's `environment_factory`: the model plays whole weeks by calling one action tool
per slot with its belief about the person, and the reward is the grade of the week.

    python examples/grpo_rhythm_env.py --offline             # CPU, the offline Qwen2 stand-in, two steps
    python examples/grpo_rhythm_env.py --max-steps 200       # GPU, the published student's base model
    python examples/grpo_rhythm_env.py --dataset weeks       # the weeks of `rhythm env-dataset --out weeks`

Without --dataset, `WeekGroups` picks the weeks: the generations of one prompt play the same week (GRPO
compares them with each other), the prompts of a batch different weeks, all drawn from --seed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rhythm_core.text_env.tool_env import RhythmToolEnv, WeekGroups
from rhythm_core.training.qwen2_standin import REPO_ID


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--offline", action="store_true",
                        help="the offline Qwen2 stand-in on CPU (random weights: shows the loop, learns nothing)")
    parser.add_argument("--model", default=REPO_ID, help=f"the model to train (default {REPO_ID})")
    parser.add_argument("--dataset", help="a folder written by `rhythm env-dataset` (default: no dataset)")
    parser.add_argument("--output-dir", default="grpo_rhythm_env")
    parser.add_argument("--max-steps", type=int, default=2)
    parser.add_argument("--num-generations", type=int, default=2, help="rollouts per prompt (a GRPO group)")
    parser.add_argument("--prompts-per-step", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0, help="draws the weeks and seeds the trainer")
    return parser.parse_args(argv)


def load_model(args, out: Path):
    """(model, tokenizer): the stand-in built into `out` for --offline, else `args.model` from the Hub."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.chat_template_utils import add_response_schema

    if args.offline:
        from rhythm_core.training.tool_standin import build_tool_standin

        folder = build_tool_standin(out / "standin", seed=args.seed)
        return (AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32),
                add_response_schema(AutoTokenizer.from_pretrained(folder)))
    return (AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16),
            add_response_schema(AutoTokenizer.from_pretrained(args.model)))


def main(argv=None) -> dict:
    from trl import GRPOConfig, GRPOTrainer

    args = parse_args(argv)
    out = Path(args.output_dir)
    model, tokenizer = load_model(args, out)
    # Offline: a few tokens per completion on CPU. On a GPU: a whole week of 28 tool calls per completion.
    lengths = ({"max_completion_length": 16, "max_tool_calling_iterations": 2, "use_cpu": True} if args.offline
               else {"max_completion_length": 4096, "max_tool_calling_iterations": 28, "bf16": True})
    config = GRPOConfig(output_dir=str(out / "run"), max_steps=args.max_steps, num_generations=args.num_generations,
                        per_device_train_batch_size=args.num_generations * args.prompts_per_step,
                        learning_rate=1e-5, logging_steps=1, report_to="none", save_strategy="no", seed=args.seed,
                        **lengths)
    if args.dataset:
        from datasets import load_from_disk

        factory, dataset = RhythmToolEnv, load_from_disk(args.dataset)  # each row's week for its group
    else:
        factory, dataset = WeekGroups(args.num_generations, seed=args.seed), None
    trainer = GRPOTrainer(model=model, args=config, train_dataset=dataset, processing_class=tokenizer,
                          environment_factory=factory)
    trainer.train()
    rewards = [entry["reward"] for entry in trainer.state.log_history if "reward" in entry]
    summary = {"steps": trainer.state.global_step, "mean_grade_per_step": rewards,
               "weeks": sorted({week for *_, week in factory.played}) if isinstance(factory, WeekGroups) else None}
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
