"""Batched answer generation for chat models: one left-padded `generate` call for many prompts."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_NEW_TOKENS = 160


@dataclass
class SamplingConfig:
    max_new_tokens: int | None = None  # None: the checkpoint's recommendation, else DEFAULT_MAX_NEW_TOKENS
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    seed: int = 0


def generate_answers(model, tokenizer, conversations: list[list[dict]], sampling: SamplingConfig,
                     batch_size: int = 64) -> list[str]:
    """Answers (decoded assistant text, special tokens stripped) for each conversation's next turn."""
    import torch

    answers: list[str] = []
    model.eval()
    for start in range(0, len(conversations), batch_size):
        chunk = conversations[start : start + batch_size]
        texts = [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chunk]
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
        kwargs = {"max_new_tokens": sampling.max_new_tokens or DEFAULT_MAX_NEW_TOKENS,
                  "pad_token_id": tokenizer.pad_token_id,
                  "eos_token_id": tokenizer.eos_token_id}
        if sampling.temperature > 0:
            torch.manual_seed(sampling.seed + start)
            kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p)
        else:
            kwargs.update(do_sample=False)
        with torch.no_grad():
            out = model.generate(**enc, **kwargs)
        new = out[:, enc["input_ids"].shape[1] :]
        answers.extend(tokenizer.batch_decode(new, skip_special_tokens=True))
    return answers


def valid_answer_rate(model, tokenizer, conversations: list[list[dict]], sampling: SamplingConfig) -> float:
    """Fraction of generated answers that parse as protocol answers with a legal action."""
    from ..protocol import parse_answer

    answers = generate_answers(model, tokenizer, conversations, sampling)
    return sum(parse_answer(a).valid for a in answers) / max(len(answers), 1)
