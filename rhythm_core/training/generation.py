"""Batched answer generation for chat models: one left-padded `generate` call for many prompts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .prompt_cache import PromptCache

DEFAULT_MAX_NEW_TOKENS = 160


@dataclass
class SamplingConfig:
    max_new_tokens: int | None = None  # None: the checkpoint's recommendation, else DEFAULT_MAX_NEW_TOKENS
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    seed: int = 0


def generate_answers(model, tokenizer, conversations: list[list[dict]], sampling: SamplingConfig,
                     batch_size: int = 64, prompt_cache: PromptCache | None = None) -> list[str]:
    """Answers (decoded assistant text, special tokens stripped) for each conversation's next turn.

    With a `prompt_cache` (conversation i is key i), each conversation's prompt reuses the key/value
    states of the prefix it shares with its previous prompt; see `prompt_cache.py`."""
    import torch

    answers: list[str] = []
    model.eval()
    for start in range(0, len(conversations), batch_size):
        chunk = conversations[start : start + batch_size]
        texts = [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chunk]
        kwargs = {"max_new_tokens": sampling.max_new_tokens or DEFAULT_MAX_NEW_TOKENS,
                  "pad_token_id": tokenizer.pad_token_id,
                  "eos_token_id": tokenizer.eos_token_id}
        if sampling.temperature > 0:
            torch.manual_seed(sampling.seed + start)
            kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p)
        else:
            kwargs.update(do_sample=False)
        with torch.no_grad():
            if prompt_cache is None:
                enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
                out = model.generate(**enc, **kwargs)
                new = out[:, enc["input_ids"].shape[1] :]
            else:
                new = _generate_reusing_prefixes(model, tokenizer, texts, list(range(start, start + len(chunk))),
                                                 prompt_cache, kwargs)
        answers.extend(tokenizer.batch_decode(new, skip_special_tokens=True))
    return answers


def _generate_reusing_prefixes(model, tokenizer, texts: list[str], keys: list[int], cache: PromptCache, kwargs):
    rows = tokenizer(texts, add_special_tokens=False)["input_ids"]
    cache.share_prefixes(model, keys, rows)
    layout = cache.plan(keys, rows)
    input_ids, attention_mask = cache.inputs(rows, tokenizer.pad_token_id, layout)
    past = cache.past_key_values(keys, layout, input_ids.shape[1] + kwargs["max_new_tokens"])
    out = model.generate(input_ids=input_ids.to(model.device), attention_mask=attention_mask.to(model.device),
                         use_cache=True, return_dict_in_generate=True,
                         **({} if past is None else {"past_key_values": past}), **kwargs)
    cache.store(keys, rows, out.past_key_values, layout)
    return out.sequences[:, input_ids.shape[1] :]


def valid_answer_rate(model, tokenizer, conversations: list[list[dict]], sampling: SamplingConfig) -> float:
    """Fraction of generated answers that parse as protocol answers with a legal action."""
    from ..protocol import parse_answer

    answers = generate_answers(model, tokenizer, conversations, sampling)
    return sum(parse_answer(a).valid for a in answers) / max(len(answers), 1)
