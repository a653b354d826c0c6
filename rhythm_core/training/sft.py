"""Supervised fine-tuning of the student on the teacher's answers (algorithm distillation), with TRL.

A config dataclass, the dataset, a trainer: the loss covers the assistant turn only. The offline
tiny model is trained in full; real models get PEFT LoRA by default (bf16 on CUDA). Templates that
lack `{% generation %}` markers are trained in TRL's prompt/completion form instead, which also
restricts the loss to the answer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..data.sft_dataset import dataset_format
from ..env.spec import STEPS_PER_EPISODE
from ..protocol import CHAT_FORMATS, system_prompt
from .generation import SamplingConfig, valid_answer_rate
from .models import TINY, device_name, load_model_and_tokenizer
from .plots import plot_curves
from .tiny import TinyModelConfig, build_tiny_base


@dataclass
class SFTRunConfig:
    base_model: str = TINY  # "tiny" (offline) or a Hugging Face model id / local path
    max_steps: int = 120  # > 0 overrides num_train_epochs
    num_train_epochs: float = 1.0
    learning_rate: float = 3e-3  # for the tiny model; ~2e-4 suits LoRA on a real model
    per_device_train_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    max_length: int = 4096  # a chat-format week with full reasoning is ~3.7k tiny-tokenizer tokens
    # A short-context phase first: `short_context_steps` steps on the first `short_context_length`
    # tokens of every conversation (the first days of the week), then `max_steps` on whole weeks.
    # Short sequences are ~4x cheaper per step, and a model trained from scratch forms the circuits
    # that read numbers from its context (the anomalies, its own previous belief) there, in a few
    # hundred steps; on whole weeks it did not within the same compute (benchmarks/README.md).
    short_context_steps: int = 0
    short_context_length: int = 512
    short_context_learning_rate: float = 3e-3
    # DAgger after the main phase (teacher/dagger.py): each round plays the student on
    # `dagger_episodes` of the dataset's own training weeks, the Bayesian teacher labels every state
    # it reached, and `dagger_steps` more steps train on the teacher data plus all labels so far.
    dagger_rounds: int = 0
    dagger_episodes: int = 64
    dagger_steps: int = 60
    dagger_learning_rate: float = 1e-3
    # "teacher": each labeled week is a conversation of the teacher's labels (the states are the
    # student's). "student": the student's own answers stay in the context (no loss) and
    # `dagger_labels_per_week` seeded turns hold the teacher's label, so copying the previous belief
    # is wrong wherever the student was (data/sft_dataset.build_student_context_conversations).
    dagger_context: str = "teacher"
    dagger_labels_per_week: int = 7
    use_lora: bool | None = None  # None: LoRA for real models, full training for the tiny one
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    lora_target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    merge_lora: bool = False  # also save a merged copy of the adapter
    logging_steps: int = 5
    eval_examples: int = 64  # validation examples scored for loss/accuracy and answer validity
    seed: int = 0
    prompt_variant: str | None = None  # None: "compact" for the tiny model, "full" otherwise
    tiny: dict[str, int] = field(default_factory=dict)  # overrides of TinyModelConfig fields

    @property
    def lora(self) -> bool:
        return self.base_model != TINY if self.use_lora is None else self.use_lora

    @property
    def variant(self) -> str:
        return self.prompt_variant or ("compact" if self.base_model == TINY else "full")


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
                if message["role"] == "assistant" and message.get("train") is not False:  # not the student's own
                    out["prompt"].append([{"role": m["role"], "content": m["content"]} for m in messages[:k]])
                    out["completion"].append([{"role": "assistant", "content": message["content"]}])
        return out

    return ds.map(split, batched=True, remove_columns=ds.column_names)


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
    data = datasets.load_from_disk(str(dataset_dir))
    data_format = dataset_format(data)  # the checkpoint records it: GRPO and evaluation prompt the same way
    train_weeks = sorted(set(zip(data["train"]["condition"], data["train"]["seed"], data["train"]["teacher"])))
    data = datasets.DatasetDict({name: with_system_prompt(split.select_columns(["messages"]), config.variant)
                                 for name, split in data.items()})
    train, validation = data["train"], data["validation"]
    if len(validation) > config.eval_examples:
        validation = validation.shuffle(seed=config.seed).select(range(config.eval_examples))

    if config.base_model == TINY:
        base = build_tiny_base(data["train"], out / "base", TinyModelConfig(**{**config.tiny, "seed": config.seed}),
                               provenance={"trained_on": str(dataset_dir)})
        base_path = base["path"]
    else:
        base_path = config.base_model
    model, tokenizer = load_model_and_tokenizer(base_path, for_training=True)
    if config.dagger_rounds:  # before any training, not after the main phase
        _check_dagger(config, train_weeks, data_format, tokenizer)
    if not _has_generation_markers(tokenizer):
        train, validation = _to_prompt_completion(train), _to_prompt_completion(validation)
    conversations = [row["messages"][:-1] for row in data["validation"].select(range(min(16, len(data["validation"]))))]
    # The teacher's answers bound how long a valid answer is; twice the longest is room enough and
    # keeps the untrained model's rambling short (it never stops on its own).
    answers = [m["content"] for row in data["train"].select(range(min(2000, len(data["train"]))))
               for m in row["messages"] if m["role"] == "assistant"]
    answer_tokens = [len(ids) + 1 for ids in tokenizer(answers, add_special_tokens=False)["input_ids"]]
    sampling = SamplingConfig(max_new_tokens=min(200, 2 * max(answer_tokens)))
    valid_before = valid_answer_rate(model, tokenizer, conversations, sampling) if conversations else None

    peft_config = None
    if config.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                                 target_modules=config.lora_target_modules, task_type="CAUSAL_LM")
    cuda = torch.cuda.is_available()

    def trainer_for(model, max_steps: int, max_length: int, learning_rate: float, peft_config, step_offset: int,
                    train_dataset=None):
        args = SFTConfig(
            output_dir=str(out / "trainer"), max_steps=max_steps if max_steps > 0 else -1,
            num_train_epochs=config.num_train_epochs, learning_rate=learning_rate,
            per_device_train_batch_size=config.per_device_train_batch_size,
            per_device_eval_batch_size=config.per_device_train_batch_size,
            gradient_accumulation_steps=config.gradient_accumulation_steps, max_length=max_length,
            assistant_only_loss=_has_generation_markers(tokenizer), logging_steps=config.logging_steps,
            eval_strategy="no", save_strategy="no", report_to="none", use_cpu=not cuda,
            bf16=cuda and torch.cuda.is_bf16_supported(), seed=config.seed, data_seed=config.seed,
            lr_scheduler_type="cosine", warmup_steps=max(1, max_steps // 20) if max_steps > 0 else 0,
            disable_tqdm=True,
            # Recomputing activations saves memory real models need; the tiny model only pays its compute.
            gradient_checkpointing=config.base_model != TINY,
        )
        log = on_log if not step_offset else (lambda e: on_log({**e, "step": e["step"] + step_offset}))
        return SFTTrainer(model=model, args=args, train_dataset=train if train_dataset is None else train_dataset,
                          eval_dataset=validation if len(validation) else None, processing_class=tokenizer,
                          peft_config=peft_config, callbacks=[StreamLogs(log).callback])

    log_history: list[dict] = []  # both phases, steps counted through
    short_steps = 0
    if config.short_context_steps > 0:
        short = trainer_for(model, config.short_context_steps, config.short_context_length,
                            config.short_context_learning_rate, peft_config, 0)
        short.train()
        short_steps = short.state.global_step
        log_history += [{**e, "phase": "short_context"} for e in short.state.log_history]
        model, peft_config = short.model, None  # the whole-week phase continues the same weights (or adapter)
    trainer = trainer_for(model, config.max_steps, config.max_length, config.learning_rate, peft_config, short_steps)
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in trainer.model.parameters())
    trainer.train()
    log_history += [{**e, "step": e["step"] + short_steps} for e in trainer.state.log_history]
    steps_done = short_steps + trainer.state.global_step
    dagger_rounds, dagger_examples, aggregate = [], 0, train
    if config.dagger_rounds and config.dagger_context == "student" and _has_generation_markers(tokenizer):
        # the teacher's turns all carry the loss, as before; the flag only makes the features match
        aggregate = train.map(lambda row: {"messages": [{**m, "train": True} for m in row["messages"]]})
    for round_no in range(1, config.dagger_rounds + 1):
        labeled, summary = _dagger_round(trainer.model, tokenizer, train_weeks, config, data_format, round_no,
                                         int(1.5 * max(answer_tokens)), out / "dagger" / f"round-{round_no}.jsonl")
        if not _has_generation_markers(tokenizer):
            labeled = _to_prompt_completion(labeled)
        aggregate = datasets.concatenate_datasets([aggregate, labeled])
        dagger_examples += len(labeled)
        on_log({"step": steps_done, **{f"dagger_{k}": v for k, v in summary.items() if v is not None}})
        trainer = trainer_for(trainer.model, config.dagger_steps, config.max_length, config.dagger_learning_rate,
                              None, steps_done, aggregate)
        trainer.train()
        log_history += [{**e, "step": e["step"] + steps_done, "phase": f"dagger_{round_no}"}
                        for e in trainer.state.log_history]
        steps_done += trainer.state.global_step
        dagger_rounds.append({**summary, "train_steps": trainer.state.global_step, "aggregate_examples": len(aggregate)})
    evaluation = trainer.evaluate() if len(validation) else {}
    on_log({"step": steps_done, **evaluation})

    model_dir = out / "model"
    trainer.save_model(str(model_dir))
    tokenizer.save_pretrained(str(model_dir))
    merged_dir = None
    if config.lora and config.merge_lora:
        merged_dir = out / "merged"
        trainer.model.merge_and_unload().save_pretrained(str(merged_dir))
        tokenizer.save_pretrained(str(merged_dir))

    trained, trained_tok = load_model_and_tokenizer(str(model_dir))
    valid_after = valid_answer_rate(trained, trained_tok, conversations, sampling) if conversations else None
    history = [e for e in log_history if "loss" in e]
    losses = [e["loss"] for e in history]
    metrics = {
        "base_model": config.base_model, "prompt_variant": config.variant, "base_path": str(base_path), "device": device_name(),
        "steps": steps_done, "short_context_steps": short_steps, "dagger_rounds": dagger_rounds, "trainable_parameters": trainable, "total_parameters": total,
        "first_train_loss": losses[0] if losses else None, "final_train_loss": losses[-1] if losses else None,
        "eval_loss": evaluation.get("eval_loss"), "eval_mean_token_accuracy": evaluation.get("eval_mean_token_accuracy"),
        "final_mean_token_accuracy": history[-1].get("mean_token_accuracy") if history else None,
        "valid_answer_rate_before": valid_before, "valid_answer_rate_after": valid_after,
        "prompt_format": data_format["prompt_format"], "reasoning": data_format["reasoning"],
        "train_examples": len(train), "dagger_examples": dagger_examples, "wall_s": round(time.perf_counter() - start, 2),
    }
    plot_curves({"train loss": [(e["step"], e["loss"]) for e in history]}, out / "training_loss.png",
                title=f"SFT of {config.base_model}", ylabel="loss")
    record = {"stage": "sft", "config": asdict(config), "prompt_variant": config.variant, **data_format,
              "max_answer_tokens": max(answer_tokens), "metrics": metrics, "provenance": provenance or {},
              "model_dir": str(model_dir), "merged_dir": str(merged_dir) if merged_dir else None}
    (model_dir / "rhythm_checkpoint.json").write_text(json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")
    (out / "metrics.json").write_text(json.dumps({**metrics, "log_history": log_history}, indent=2,
                                                 default=str) + "\n")
    (model_dir / "README.md").write_text(model_card("sft", config.base_model, provenance or {}, asdict(config), metrics))
    return {"path": str(out), "model_dir": str(model_dir), "merged_dir": str(merged_dir) if merged_dir else None,
            "loss_plot": str(out / "training_loss.png"), **metrics}


def _check_dagger(config: SFTRunConfig, train_weeks, data_format: dict, tokenizer) -> None:
    """Refuse a DAgger setting that cannot work, before the main phase spends its time."""
    if config.dagger_context not in ("teacher", "student"):
        raise ValueError(f"dagger_context must be 'teacher' or 'student', got {config.dagger_context!r}")
    teachers = sorted({teacher for _, _, teacher in train_weeks})
    if teachers != ["bayes"]:
        raise ValueError(f"DAgger labels with the offline Bayesian teacher, but this dataset's teacher is "
                         f"{', '.join(teachers)}; mixing teachers is not supported (set dagger_rounds: 0)")
    if config.dagger_context == "student":
        if data_format["prompt_format"] not in CHAT_FORMATS:
            raise ValueError(f"dagger_context 'student' needs a chat prompt format ({', '.join(CHAT_FORMATS)}); "
                             f"this dataset's is {data_format['prompt_format']!r}")
        if data_format["reasoning"] == "evidence":
            raise ValueError("dagger_context 'student' cannot carry the 'evidence' reasoning (its belief is a running "
                             "sum over the conversation, which the student's own answers would break); use "
                             "dagger_context 'teacher'")
        if not 1 <= config.dagger_labels_per_week <= STEPS_PER_EPISODE:
            raise ValueError(f"dagger_labels_per_week must be in 1..{STEPS_PER_EPISODE}, "
                             f"got {config.dagger_labels_per_week}")
        if _has_generation_markers(tokenizer) and "'train'" not in tokenizer.chat_template:
            raise ValueError("dagger_context 'student' needs a chat template that leaves assistant messages with "
                             "train: False out of the loss (the tiny model's does); this one would train on them")


def _dagger_round(model, tokenizer, train_weeks, config: SFTRunConfig, data_format: dict, round_no: int,
                  max_new_tokens: int, records_path: Path):
    """One DAgger round: play the model being trained on a seeded sample of the dataset's training
    weeks, have the Bayesian teacher label every state, keep the records in `records_path`, and
    return the labels as training conversations (the dataset's format) with the round's figures."""
    import datasets

    from ..data.sft_dataset import build_sft_dataset, build_student_context_conversations
    from ..teacher.dagger import label_agreement, label_student_rollouts
    from ..teacher.trajectories import TrajectoryWriter
    from .policy import LLMPolicyAgent

    start = time.perf_counter()
    rng = np.random.default_rng([config.seed, round_no])
    pick = rng.choice(len(train_weeks), size=min(config.dagger_episodes, len(train_weeks)), replace=False)
    chosen = [train_weeks[i] for i in sorted(pick)]
    student = LLMPolicyAgent(model, tokenizer, sampling=SamplingConfig(max_new_tokens=max_new_tokens),
                             variant=config.variant, prompt_format=data_format["prompt_format"],
                             name=f"dagger_round_{round_no}")
    records = []
    for condition in sorted({c for c, _, _ in chosen}):
        records += label_student_rollouts(student, condition, [s for c, s, _ in chosen if c == condition],
                                          student_id=student.name)
    records_path.parent.mkdir(parents=True, exist_ok=True)
    records_path.unlink(missing_ok=True)
    with TrajectoryWriter(records_path) as writer:
        for record in records:
            writer.write(record)
    if config.dagger_context == "student":
        labeled = build_student_context_conversations(
            records, prompt_format=data_format["prompt_format"], reasoning=data_format["reasoning"],
            belief_decimals=data_format["belief_decimals"], labels_per_week=config.dagger_labels_per_week,
            seed=config.seed * 1000 + round_no)
    else:
        built = build_sft_dataset(records, prompt_format=data_format["prompt_format"], reasoning=data_format["reasoning"],
                                  belief_decimals=data_format["belief_decimals"], seed=config.seed)
        labeled = datasets.concatenate_datasets([built["train"], built["validation"]])  # all training weeks
    labeled = with_system_prompt(labeled.select_columns(["messages"]), config.variant)
    summary = {"round": round_no, "episodes": len(records), **label_agreement(records),
               "rollout_s": round(time.perf_counter() - start, 2), "records": str(records_path)}
    return labeled, summary


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
