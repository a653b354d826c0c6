"""GRPO on RhythmEnv with TRL's `environment_factory`: the model plays a week by calling one action tool per
slot with its belief about the person; the reward is the grade of the week.

    python examples/grpo_rhythm_env.py --offline                                   # CPU, two steps, no download
    python examples/grpo_rhythm_env.py --offline --max_steps 40 --result curve.json
    python examples/grpo_rhythm_env.py --max_steps 200 --learning_rate 1e-6 --use_peft \\
        --use_vllm --vllm_mode colocate --report_to trackio                        # CUDA, Qwen2.5-3B-Instruct

The flags are TRL's own (`TrlParser` over `GRPOConfig` and `ModelConfig`: --max_steps, --learning_rate,
--num_generations, --gradient_accumulation_steps, --report_to, --output_dir, --use_peft and --lora_r,
--use_vllm --vllm_mode colocate, --config run.yaml) plus this script's (--offline, --dataset, --result, ...).
It imports only the environment package (the slim install of envs/rhythm_env) and TRL.

--offline builds a small Qwen2-shaped stand-in (random weights, a tokenizer trained on the task's text) and
first teaches it the tool-call format on a few demonstration weeks, so that its rollouts call tools and differ
from each other: GRPO then has something to compare. A random-weight model calls no tool, every rollout is
the fallback, and no group has any reward spread, so nothing could be learned.

Without --dataset, `WeekGroups` picks the weeks: the generations of one prompt play the same week (GRPO
compares them with each other), the prompts of a batch different weeks, all drawn from --seed.
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from rhythm_env.sim.spec import ACTIONS, METERS
from rhythm_env.text.standin import REPO_ID, build_tool_standin
from rhythm_env.text.tool_env import RhythmToolEnv, WeekGroups

# What --offline starts from: a few tokens a completion on CPU, the stand-in, a learning rate its few
# steps move it at. Any flag given on the command line still wins.
OFFLINE_DEFAULTS = dict(
    use_cpu=True, bf16=False, max_steps=2, learning_rate=1e-4, num_generations=4, per_device_train_batch_size=8,
    max_completion_length=192, max_tool_calling_iterations=3, logging_steps=1, save_strategy="no", report_to="none",
    temperature=0.7,
)
DEFAULTS = dict(output_dir="runs/grpo_rhythm_env", report_to="none", logging_steps=1, save_strategy="no",
                max_completion_length=4096, max_tool_calling_iterations=28)


@dataclass
class RhythmArguments:
    offline: bool = field(default=False, metadata={"help": "CPU: build the stand-in, teach it the tool-call format, "
                                                           "then GRPO (no download)"})
    dataset: str | None = field(default=None, metadata={"help": "a folder written by `rhythm env-dataset` (default: "
                                                                "weeks drawn by WeekGroups)"})
    teach_weeks: int = field(default=12, metadata={"help": "--offline: demonstration weeks the stand-in is taught on"})
    teach_steps: int = field(default=300, metadata={"help": "--offline: optimizer steps of that teaching"})
    teach_turns: int = field(default=3, metadata={"help": "--offline: tool calls per demonstration"})
    result: str | None = field(default=None, metadata={"help": "write the run's reward curve and summary (JSON) here"})


def parse(argv=None):
    from trl import GRPOConfig, ModelConfig, TrlParser

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = TrlParser((RhythmArguments, GRPOConfig, ModelConfig))
    parser.set_defaults(model_name_or_path=REPO_ID, **{**DEFAULTS, **(OFFLINE_DEFAULTS if "--offline" in argv else {})})
    script, config, model_args = parser.parse_args_and_config(argv)
    if config.use_vllm:
        import torch

        if not torch.cuda.is_available():
            parser.error("--use_vllm needs CUDA (vLLM colocate shares the GPU with training); this machine has none")
        if config.vllm_mode != "colocate":
            parser.error(f"--vllm_mode {config.vllm_mode}: this example runs vLLM colocated (--vllm_mode colocate)")
    return script, config, model_args


# ---- the offline stand-in, taught the tool-call format --------------------------------------------------------
def demonstration(week_seed: int, turns: int, rng) -> list[dict]:
    """A week's first `turns` slots as TRL's conversation holds them: the prompt `reset` gives, then tool calls
    and their answers. The action restores the lowest meter; the belief is drawn anew each week, so the taught
    model states varied beliefs (and its rollouts differ in grade)."""
    restore = {"vitality": "SLEEP", "cognition": "NAP", "progress": "DEEP_WORK", "serenity": "MEDITATE",
               "connection": "SOCIALIZE"}
    env = RhythmToolEnv()
    messages = [{"role": "user", "content": env.reset(seed=week_seed)}]
    # Near the middle: v3 scores a belief against the prior's error, so a wild one scores below stating none
    # (the fallback's week) and GRPO would learn to stop calling tools.
    belief = {name: round(float(rng.integers(3, 8)) / 10, 1) for name in ("social", "morning", "work")}
    for _ in range(turns):
        meters = env.week.history[-1].meters
        action = restore[METERS[int(meters.argmin())]]
        call = {"type": "function", "function": {"name": action.lower(), "arguments": belief}}
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        messages.append({"role": "tool", "name": action.lower(), "content": getattr(env, action.lower())(**belief)})
    return messages


def tools_of(env) -> list:
    # The tools as TRL offers them: the environment's public methods but reset and get_reward, by name.
    return [getattr(env, name) for name in sorted(a.lower() for a in ACTIONS)]


def teach(model, tokenizer, script: RhythmArguments, seed: int) -> dict:
    """Supervised steps on the demonstrations' tool calls (the loss on the assistant's tokens only)."""
    import numpy as np
    import torch

    rng = np.random.default_rng(seed)
    groups = WeekGroups(1, seed=seed + 1)  # demonstration weeks: training weeks drawn apart from the run's
    tools = tools_of(RhythmToolEnv())
    examples = []
    for k in range(script.teach_weeks):
        messages = demonstration(groups.week(k, 0), script.teach_turns, rng)
        text = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
        spans = []
        for i, message in enumerate(messages):
            if message["role"] == "assistant":
                start = len(tokenizer.apply_chat_template(messages[:i], tools=tools, tokenize=False,
                                                          add_generation_prompt=True))
                end = len(tokenizer.apply_chat_template(messages[: i + 1], tools=tools, tokenize=False))
                spans.append((start, end))
        encoded = tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
        labels = [t if any(s <= a < e for s, e in spans) else -100
                  for t, (a, _) in zip(encoded["input_ids"], encoded["offset_mapping"])]
        examples.append((torch.tensor([encoded["input_ids"]]), torch.tensor([labels])))
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    # Decayed to zero: the last steps settle the format the sampled rollouts must reproduce.
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / script.teach_steps)
    losses = []
    for step in range(script.teach_steps):
        ids, labels = examples[step % len(examples)]
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return {"weeks": script.teach_weeks, "steps": script.teach_steps, "first_loss": losses[0],
            "last_loss": sum(losses[-10:]) / len(losses[-10:])}


def load(script: RhythmArguments, config, model_args):
    """(model, tokenizer, teaching summary): --offline the taught stand-in, else the model named."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.chat_template_utils import add_response_schema

    if script.offline:
        folder = build_tool_standin(Path(config.output_dir) / "standin", seed=config.seed)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        tokenizer = add_response_schema(AutoTokenizer.from_pretrained(folder))
        torch.manual_seed(config.seed)
        return model, tokenizer, teach(model, tokenizer, script, config.seed)
    dtype = model_args.dtype if model_args.dtype in (None, "auto") else getattr(torch, model_args.dtype)
    model = AutoModelForCausalLM.from_pretrained(model_args.model_name_or_path, revision=model_args.model_revision,
                                                 dtype=dtype or "auto",
                                                 attn_implementation=model_args.attn_implementation)
    return model, add_response_schema(AutoTokenizer.from_pretrained(model_args.model_name_or_path)), None


# ---- the run ----------------------------------------------------------------------------------------------------
def step_printer():
    from transformers import TrainerCallback

    class PrintSteps(TrainerCallback):
        """Prints per step what says whether GRPO had anything to learn from."""

        def __init__(self):
            self.steps = []
            self.trainer = None

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs or "reward" not in logs:
                return
            # The last batch's rollouts: a slot the model did not play by a tool call was played by the fallback
            # when the week was graded (TextWeek marks those slots).
            called = [int((~env.week.invalid).sum()) for env in self.trainer.environments]
            row = {"step": state.global_step, "reward": logs["reward"], "reward_std": logs.get("reward_std"),
                   "rollouts_with_a_tool_call": f"{sum(c > 0 for c in called)}/{len(called)}",
                   "tool_call_frequency": logs.get("tools/call_frequency"),
                   "tool_failure_frequency": logs.get("tools/failure_frequency"),
                   "frac_reward_zero_std": logs.get("frac_reward_zero_std"), "loss": logs.get("loss"),
                   "grad_norm": logs.get("grad_norm")}
            self.steps.append(row)
            print(f"step {row['step']}: mean grade {row['reward']:.4f}, rollouts with a tool call "
                  f"{row['rollouts_with_a_tool_call']}, tool calls per rollout {_fmt(row['tool_call_frequency'])}, groups without reward spread {_fmt(row['frac_reward_zero_std'])}, "
                  f"loss {_fmt(row['loss'])}, grad_norm {_fmt(row['grad_norm'])}", flush=True)

    return PrintSteps()


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def verdict(steps: list[dict]) -> tuple[bool, str]:
    """Whether any step could move the model: a group with reward spread and a nonzero gradient."""
    useful = [s for s in steps if (s["frac_reward_zero_std"] or 0) < 1 and (s["grad_norm"] or 0) > 0]
    if useful:
        return True, (f"learnable: {len(useful)} of {len(steps)} steps had groups with reward spread and a nonzero "
                      "gradient")
    no_tools = all((s["tool_call_frequency"] or 0) == 0 for s in steps)
    why = "no rollout called a tool (every week was the fallback)" if no_tools else "no group had reward spread"
    return False, f"nothing to learn: {why} in {len(steps)} steps"


def main(argv=None) -> dict:
    from trl import GRPOTrainer, get_peft_config

    script, config, model_args = parse(argv)
    out = Path(config.output_dir)
    model, tokenizer, taught = load(script, config, model_args)
    if script.dataset:
        from datasets import load_from_disk

        factory, dataset = RhythmToolEnv, load_from_disk(script.dataset)  # each row's week for its group
    else:
        factory, dataset = WeekGroups(config.num_generations, seed=config.seed), None
    printer = step_printer()
    trainer = GRPOTrainer(model=model, args=config, train_dataset=dataset, processing_class=tokenizer,
                          environment_factory=factory, peft_config=get_peft_config(model_args), callbacks=[printer])
    printer.trainer = trainer
    trainer.train()
    trainer.save_model(str(out / "final"))
    tokenizer.save_pretrained(str(out / "final"))
    learnable, line = verdict(printer.steps)
    curve = [s["reward"] for s in printer.steps]
    head = curve[: max(1, len(curve) // 5)]
    tail = curve[-max(1, len(curve) // 5):]
    import platform
    from datetime import UTC, datetime

    import torch
    import trl

    summary = {
        "command": " ".join(["python", "examples/grpo_rhythm_env.py", *(sys.argv[1:] if argv is None else argv)]),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                    "torch": torch.__version__, "trl": trl.__version__,
                    "device": "cuda" if torch.cuda.is_available() and not config.use_cpu else "cpu"},
        "steps": trainer.state.global_step, "offline": script.offline, "taught": taught, "per_step": printer.steps,
        "mean_grade_per_step": curve, "mean_grade_first_fifth": sum(head) / len(head),
        "mean_grade_last_fifth": sum(tail) / len(tail), "learnable": learnable, "saved": str(out / "final"),
        "weeks": sorted({week for *_, week in factory.played}) if isinstance(factory, WeekGroups) else None,
        "config": {k: getattr(config, k) for k in ("learning_rate", "num_generations", "per_device_train_batch_size",
                                                   "gradient_accumulation_steps", "max_completion_length",
                                                   "max_tool_calling_iterations", "temperature", "beta", "seed")},
    }
    if any(isinstance(v, float) and not math.isfinite(v) for v in curve):
        raise RuntimeError("a step's mean grade is not finite")
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    if script.result:
        Path(script.result).parent.mkdir(parents=True, exist_ok=True)
        Path(script.result).write_text(json.dumps(summary, indent=1) + "\n")
    print(line)
    return summary


if __name__ == "__main__":
    main()
