"""Supervised fine-tuning of the student on the teacher's answers (algorithm distillation), with TRL.

A config dataclass, the dataset, a trainer: the loss covers the assistant turn only. The offline
tiny model is trained in full; real models get PEFT LoRA by default (bf16 on CUDA). Templates that
lack `{% generation %}` markers are trained in TRL's prompt/completion form instead, which also
restricts the loss to the answer.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rhythm_env.protocol import DEFAULT_PROMPT_VARIANT, SCRATCH_PROMPT_VARIANT, system_prompt

from ..data.sft_dataset import dataset_format, evidence_readout
from ..store import verify_artifact
from ..tracking.callback import attach_tracking
from ..tracking.store import report_to_list
from .distributed import SHARDING_VAR, barrier, is_main, rank, sharding_args, split_batch, world_size
from .fused_head import labelled_positions_only, speedups
from .generation import SamplingConfig, valid_answer_rate
from .last_layer import last_layer_on_read_positions
from .models import TINY, device_name, load_model_and_tokenizer, save_tokenizer
from .plots import plot_curves
from .tiny import TinyModelConfig, build_tiny_base

logger = logging.getLogger(__name__)


@dataclass
class SFTRunConfig:
    base_model: str = TINY  # "tiny" (offline) or a Hugging Face model id / local path
    max_steps: int = 240  # > 0 overrides num_train_epochs
    num_train_epochs: float = 1.0
    learning_rate: float = 1e-3  # for the tiny model; ~2e-4 suits LoRA on a real model
    per_device_train_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    # Tokens per training example; longer ones lose their last answers (whole weeks are cut, and a
    # per-turn example whose answer is cut is dropped). None: 4096 for the tiny model (room for the demo's
    # longest week in its tokens), else the longest conversation, so nothing is lost (Qwen2's tokenizer
    # gives every digit a token, so its weeks run past 4096: benchmarks/README.md, D34).
    max_length: int | None = None
    # The recipe's two phases: `short_context_steps` steps on the first `short_context_length` tokens
    # of every conversation (the first days of the week) at `short_context_learning_rate`, then
    # `max_steps` on whole weeks at `learning_rate`. Short sequences are much cheaper per step, and a
    # model trained from scratch forms the circuits that read numbers from its context (the anomalies,
    # its own previous belief) there; whole weeks then teach the rest of the week. Windows of a few
    # turns from anywhere in the week, with the student reading only its window, learned less in
    # more time (benchmarks/README.md, D6). None: 600 for the tiny model, 0 for a pretrained one, which
    # already reads numbers and would only be shaken by 600 steps at the from-scratch rate.
    short_context_steps: int | None = None
    short_context_length: int = 512
    short_context_learning_rate: float = 3e-3
    use_lora: bool | None = None  # None: LoRA for real models, full training for the tiny one
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    lora_target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    merge_lora: bool = False  # also save a merged copy of the adapter
    logging_steps: int = 5
    eval_examples: int = 64  # validation examples scored for loss/accuracy and answer validity
    seed: int = 0
    prompt_variant: str | None = None  # None: SCRATCH_PROMPT_VARIANT for the tiny model, DEFAULT_PROMPT_VARIANT otherwise
    tiny: dict[str, int] = field(default_factory=dict)  # overrides of TinyModelConfig fields
    report_to: str = "mlflow"  # trainer integrations: mlflow (the run its owner opened), tensorboard, none, "a,b"

    @property
    def lora(self) -> bool:
        return self.base_model != TINY if self.use_lora is None else self.use_lora

    @property
    def short_steps(self) -> int:
        if self.short_context_steps is not None:
            return self.short_context_steps
        return 600 if self.base_model == TINY else 0

    def length_for(self, longest: int) -> int:
        """The max_length training uses, given the longest conversation's tokens."""
        if self.max_length is not None:
            return self.max_length
        return 4096 if self.base_model == TINY else longest

    @property
    def variant(self) -> str:
        return self.prompt_variant or (SCRATCH_PROMPT_VARIANT if self.base_model == TINY else DEFAULT_PROMPT_VARIANT)


def with_system_prompt(ds, variant: str):
    """The dataset's conversations with the system message of `variant` (protocol.system_prompt)."""
    text = system_prompt(variant)

    def swap(row):
        messages = row["messages"]
        if messages and messages[0]["role"] == "system":
            messages = [{**messages[0], "content": text}, *messages[1:]]
        return {"messages": messages}

    return ds.map(swap)


class StreamLogs:
    """A TrainerCallback that forwards every log dict (loss, lr, token accuracy...) to `on_log`."""

    def __init__(self, on_log):
        from transformers import TrainerCallback

        class Callback(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kwargs):
                if logs:
                    on_log({"step": state.global_step, **logs})

        self.callback = Callback()


def _has_generation_markers(tokenizer) -> bool:
    return "{% generation %}" in (tokenizer.chat_template or "")


def _to_prompt_completion(ds):
    """TRL's prompt/completion form, for chat templates without generation markers: one pair per
    assistant turn (a chat-format episode gives 28 pairs, each prompt the conversation before it),
    so the loss still covers every answer and nothing else."""

    def split(batch):
        out = {"prompt": [], "completion": []}
        for messages in batch["messages"]:
            for k, message in enumerate(messages):
                if message["role"] == "assistant":
                    out["prompt"].append([{"role": m["role"], "content": m["content"]} for m in messages[:k]])
                    out["completion"].append([{"role": "assistant", "content": message["content"]}])
        return out

    return ds.map(split, batched=True, remove_columns=ds.column_names)


def conversation_lengths(ds, tokenizer) -> list[int]:
    """Each conversation's tokens as the chat template renders it whole (its longest training example)."""
    lengths: list[int] = []
    for start in range(0, len(ds), 256):
        batch = ds[start : start + 256]["messages"]
        lengths += [len(ids) for ids in tokenizer.apply_chat_template(batch, tokenize=True, return_dict=True)["input_ids"]]
    return lengths


def tokenized_weeks(ds, tokenizer):
    """Whole conversations as TRL's SFT preparation makes them for a template with generation markers:
    `input_ids`, and `labels` that keep the assistant turns' tokens only (-100 elsewhere). Both phases
    get them tokenized once; each trainer then only truncates to its `max_length`."""

    def tokenize(batch):  # batched: one encode_batch call for many weeks (faster than row by row)
        out = tokenizer.apply_chat_template(batch["messages"], tokenize=True, return_dict=True,
                                            return_assistant_tokens_mask=True)
        return {"input_ids": out["input_ids"],
                "labels": [[t if m else -100 for t, m in zip(ids, mask)]
                           for ids, mask in zip(out["input_ids"], out["assistant_masks"])]}

    return ds.map(tokenize, batched=True, batch_size=256, remove_columns=ds.column_names)


def run_sft(config: SFTRunConfig, dataset_dir, out_dir, *, on_log: Callable[[dict], None] | None = None,
            provenance: dict | None = None) -> dict:
    """Train on `dataset_dir` (a saved sft_dataset) into `out_dir`; returns metrics and paths.

    out_dir/model holds the checkpoint (the adapter for LoRA; merged/ too when asked), with a
    model card, rhythm_checkpoint.json, metrics.json and training_loss.png beside it.
    """
    import datasets
    import torch
    from trl import SFTConfig, SFTTrainer

    start = time.perf_counter()
    on_log = on_log or (lambda entry: None)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # In memory: every map below (ours and TRL's) would otherwise write its cache files into the
    # published dataset's folder on every run, changing an artifact that is read-only by contract.
    verify_artifact(dataset_dir)  # the dataset as it was published
    data = datasets.load_from_disk(str(dataset_dir), keep_in_memory=True)
    data_format = dataset_format(data)  # the checkpoint records it: GRPO and evaluation prompt the same way
    readout = evidence_readout(data)  # the chain its answers were written with: decoding follows its form
    data = datasets.DatasetDict({name: with_system_prompt(split.select_columns(["messages"]), config.variant)
                                 for name, split in data.items()})
    train, validation = data["train"], data["validation"]
    if len(validation) > config.eval_examples:
        validation = validation.shuffle(seed=config.seed).select(range(config.eval_examples))

    if config.base_model == TINY:  # built once, by rank 0; the other ranks load it
        if is_main():
            build_tiny_base(data["train"], out / "base", TinyModelConfig(**{**config.tiny, "seed": config.seed}),
                            provenance={"trained_on": str(dataset_dir)})
        barrier()
        base_path = str(out / "base")
    else:
        base_path = config.base_model
    model, tokenizer = load_model_and_tokenizer(base_path, for_training=True, full_parameters=not config.lora)
    if _has_generation_markers(tokenizer):
        train, validation = tokenized_weeks(train, tokenizer), tokenized_weeks(validation, tokenizer)
        lengths = [len(ids) for ids in train["input_ids"]]
    else:
        lengths = conversation_lengths(train, tokenizer)
        train, validation = _to_prompt_completion(train), _to_prompt_completion(validation)
    longest = max(lengths)
    max_length = config.length_for(longest)
    cut = sum(n > max_length for n in lengths)
    if cut:
        logger.warning(f"SFT: {cut} of {len(lengths)} training conversations are longer than max_length "
                       f"{max_length} tokens (the longest {longest}): their last answers are not trained on; "
                       "raise max_length (None: the longest) to keep them")
    truncation = {"max_length": max_length, "longest_conversation_tokens": longest, "conversations_over_max_length": cut}
    conversations = [row["messages"][:-1] for row in data["validation"].select(range(min(16, len(data["validation"]))))]
    # The teacher's answers bound how long a valid answer is; twice the longest is room enough and
    # keeps the untrained model's rambling short (it never stops on its own).
    answers = [m["content"] for row in data["train"].select(range(min(2000, len(data["train"]))))
               for m in row["messages"] if m["role"] == "assistant"]
    answer_tokens = [len(ids) + 1 for ids in tokenizer(answers, add_special_tokens=False)["input_ids"]]
    sampling = SamplingConfig(max_new_tokens=min(200, 2 * max(answer_tokens)))
    valid_before = valid_answer_rate(model, tokenizer, conversations, sampling) if conversations and is_main() else None
    # The global batch is the config's on any number of processes (distributed.py).
    per_device, accumulation = split_batch(config.per_device_train_batch_size, config.gradient_accumulation_steps,
                                           world_size())

    peft_config = None
    if config.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                                 target_modules=config.lora_target_modules, task_type="CAUSAL_LM")
    cuda = torch.cuda.is_available()

    def student_record(**extra) -> dict:  # what GRPO and evaluation read to prompt the student
        return {"stage": "sft", "config": asdict(config), "prompt_variant": config.variant, **data_format.as_dict(),
                "max_answer_tokens": max(answer_tokens), **({"readout_form": readout.form} if readout else {}),
                **extra}

    def trainer_for(model, max_steps: int, max_length: int, learning_rate: float, peft_config, step_offset: int):
        args = SFTConfig(
            output_dir=str(out / "trainer"), max_steps=max_steps if max_steps > 0 else -1,
            num_train_epochs=config.num_train_epochs, learning_rate=learning_rate,
            per_device_train_batch_size=per_device, per_device_eval_batch_size=per_device,
            gradient_accumulation_steps=accumulation, max_length=max_length,
            # The loss is on the answers either way: tokenized_weeks' labels, or TRL's completion mask.
            assistant_only_loss=False, logging_steps=config.logging_steps,
            eval_strategy="no", save_strategy="no", report_to=report_to_list(config.report_to), use_cpu=not cuda,
            bf16=cuda and torch.cuda.is_bf16_supported(), seed=config.seed, data_seed=config.seed,
            lr_scheduler_type="cosine", warmup_steps=max(1, max_steps // 20) if max_steps > 0 else 0,
            disable_tqdm=True,
            # Recomputing activations saves memory real models need; the tiny model only pays its compute.
            activation_checkpointing=config.base_model != TINY and not sharding_args(),
            **sharding_args(),
        )
        log = on_log if not step_offset else (lambda e: on_log({**e, "step": e["step"] + step_offset}))
        callbacks = [StreamLogs(log).callback]
        trainer = SFTTrainer(model=model, args=args, train_dataset=train,
                             eval_dataset=validation if len(validation) else None, processing_class=tokenizer,
                             peft_config=peft_config, callbacks=callbacks)
        return attach_tracking(trainer, step_offset)  # report_to's MLflow callback, steps counted through phases

    def output_positions_only(model):
        # The tiny model's last layer at the positions the loss reads (last_layer.py); real models
        # (LoRA, gradient checkpointing, other architectures) train as they are.
        return last_layer_on_read_positions(model) if config.base_model == TINY and not config.lora else nullcontext()

    on_log({"step": 0, "total_steps": config.short_steps + config.max_steps})  # progress has its end
    clock = {"train_s": 0.0}  # training seconds of the finished phases
    log_history: list[dict] = []  # both phases, steps counted through
    short_steps = 0
    if config.short_steps > 0:
        short = trainer_for(model, config.short_steps, config.short_context_length,
                            config.short_context_learning_rate, peft_config, 0)
        started = time.perf_counter()
        with labelled_positions_only(), output_positions_only(model):
            short.train()
        clock["train_s"] += time.perf_counter() - started
        short_steps = short.state.global_step
        log_history += [{**e, "phase": "short_context"} for e in short.state.log_history]
        model, peft_config = short.model, None  # the whole-week phase continues the same weights (or adapter)
    trainer = trainer_for(model, config.max_steps, max_length, config.learning_rate, peft_config, short_steps)
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in trainer.model.parameters())
    started = time.perf_counter()
    with labelled_positions_only(), output_positions_only(model):
        trainer.train()
        clock["train_s"] += time.perf_counter() - started
        evaluation = trainer.evaluate() if len(validation) else {}
    log_history += [{**e, "step": e["step"] + short_steps} for e in trainer.state.log_history]
    steps_done = short_steps + trainer.state.global_step
    on_log({"step": steps_done, **evaluation})

    model_dir = out / "model"
    trainer.save_model(str(model_dir))  # every rank takes part (a sharded model is gathered); rank 0 writes
    if not is_main():  # the checkpoint, its card and metrics are rank 0's
        return {"rank": rank(), "steps": short_steps + trainer.state.global_step}
    save_tokenizer(tokenizer, model_dir)
    merged_dir = None
    if config.lora and config.merge_lora:
        merged_dir = out / "merged"
        trainer.model.merge_and_unload().save_pretrained(str(merged_dir))
        save_tokenizer(tokenizer, merged_dir)

    trained, trained_tok = load_model_and_tokenizer(str(model_dir))
    valid_after = valid_answer_rate(trained, trained_tok, conversations, sampling) if conversations else None
    history = [e for e in log_history if "loss" in e]
    losses = [e["loss"] for e in history]
    metrics = {
        "base_model": config.base_model, "prompt_variant": config.variant, "base_path": str(base_path), "device": device_name(),
        "steps": steps_done, "short_context_steps": short_steps, "trainable_parameters": trainable, "total_parameters": total,
        "first_train_loss": losses[0] if losses else None, "final_train_loss": losses[-1] if losses else None,
        "eval_loss": evaluation.get("eval_loss"), "eval_mean_token_accuracy": evaluation.get("eval_mean_token_accuracy"),
        "final_mean_token_accuracy": history[-1].get("mean_token_accuracy") if history else None,
        "valid_answer_rate_before": valid_before, "valid_answer_rate_after": valid_after,
        **data_format.as_dict(), "speedups": speedups(model, config.base_model == TINY and not config.lora),
        "train_examples": len(train), **truncation, "processes": world_size(),
        "sharding": os.environ.get(SHARDING_VAR, ""), "per_device_train_batch_size": per_device, "gradient_accumulation_steps": accumulation, "train_s": round(clock["train_s"], 3), "wall_s": round(time.perf_counter() - start, 2),
    }
    plot_curves({"train loss": [(e["step"], e["loss"]) for e in history]}, out / "training_loss.png",
                title=f"SFT of {config.base_model}", ylabel="loss")
    record = student_record(metrics=metrics, provenance=provenance or {}, model_dir=str(model_dir),
                            merged_dir=str(merged_dir) if merged_dir else None)
    (model_dir / "rhythm_checkpoint.json").write_text(json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")
    (out / "metrics.json").write_text(json.dumps({**metrics, "log_history": log_history}, indent=2,
                                                 default=str) + "\n")
    (model_dir / "README.md").write_text(model_card("sft", config.base_model, provenance or {}, asdict(config), metrics))
    return {"path": str(out), "model_dir": str(model_dir), "merged_dir": str(merged_dir) if merged_dir else None,
            "loss_plot": str(out / "training_loss.png"), **metrics}


def model_card(stage: str, base_model: str, provenance: dict, config: dict, metrics: dict) -> str:
    lines = [
        "---", "library_name: transformers", "tags: [rhythm, rhythm-env, trl, " + stage + "]", "---", "",
        f"# RhythmEnv student ({stage.upper()})", "",
        f"Base model: `{base_model}`. Trained by the rhythm pipeline ({stage} stage, TRL).", "",
        "## Data", "", "```json", json.dumps(provenance, indent=2, sort_keys=True, default=str), "```", "",
        "## Config", "", "```json", json.dumps(config, indent=2, sort_keys=True, default=str), "```", "",
        "## Final metrics", "", "| metric | value |", "|---|---|",
    ]
    lines += [f"| {k} | {v} |" for k, v in metrics.items()]
    return "\n".join(lines) + "\n"
