"""Batched answer generation for chat models: one left-padded `generate` call for many prompts."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .prompt_cache import PromptCache

DEFAULT_MAX_NEW_TOKENS = 160
# 1: let torch choose cuDNN's attention for generation on CUDA too (see generation_attention).
CUDNN_ATTENTION_ENV = "RHYTHM_CUDNN_ATTENTION"


@dataclass
class SamplingConfig:
    max_new_tokens: int | None = None  # None: the checkpoint's recommendation, else DEFAULT_MAX_NEW_TOKENS
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    seed: int = 0


def generate_answers(model, tokenizer, conversations: list[list[dict]], sampling: SamplingConfig,
                     batch_size: int = 64, prompt_cache: PromptCache | None = None,
                     prompt_ids: list[list[int]] | None = None, sum_beliefs: bool = False) -> list[str]:
    """Answers (decoded assistant text, special tokens stripped) for each conversation's next turn.
    `sum_beliefs`: greedy decoding writes each belief as the previous one plus the answer's increment
    (a student of the linear evidence chain; number_decoding.py).

    With a `prompt_cache` (conversation i is key i), each conversation's prompt reuses the key/value
    states of the prefix it shares with its previous prompt; see `prompt_cache.py`. `prompt_ids`, the
    prompts already tokenized (generation prompt included, e.g. by `ConversationTokens`), saves
    rendering and tokenizing the conversations."""
    import torch

    from .prompt_tokens import conversation_ids

    answers: list[str] = []
    model.eval()
    config = decoding_config(sampling, tokenizer)
    processors = number_processors(sampling, tokenizer, sum_beliefs)
    if prompt_cache is not None:  # generate hands back the cache it extended
        config.update(use_cache=True, return_dict_in_generate=True)
    all_rows = prompt_ids if prompt_ids is not None else conversation_ids(tokenizer, conversations)
    for batch in call_batches([len(ids) for ids in all_rows], batch_size, token_budget(model),
                              config.max_new_tokens):
        start, rows = batch.start, all_rows[batch.start : batch.stop]
        if sampling.temperature > 0:
            torch.manual_seed(sampling.seed + start)
        with torch.no_grad(), generation_attention(model.device):
            if prompt_cache is None:
                input_ids, attention_mask = _left_padded(rows, tokenizer.pad_token_id)
                out = model.generate(input_ids=input_ids.to(model.device),
                                     attention_mask=attention_mask.to(model.device), generation_config=config,
                                     logits_processor=processors)
                new = out[:, input_ids.shape[1] :]
            else:
                new = _generate_reusing_prefixes(model, rows, list(batch), prompt_cache, tokenizer.pad_token_id, config,
                                                 processors)
        answers.extend(tokenizer.batch_decode(new, skip_special_tokens=True))
    return answers


def call_batches(lengths: list[int], batch_size: int, budget: int | None, new_tokens: int) -> list[range]:
    """Consecutive prompts (their token counts `lengths`) grouped into generate calls of at most
    `batch_size` rows and, with a `budget`, at most `budget` tokens of rows x (longest prompt +
    `new_tokens`), the size of the call's padded batch; a prompt alone over the budget is a call of
    its own."""
    batches, start = [], 0
    while start < len(lengths):
        end, longest = start + 1, lengths[start] + new_tokens
        while end < len(lengths) and end - start < batch_size:
            wider = max(longest, lengths[end] + new_tokens)
            if budget is not None and wider * (end - start + 1) > budget:
                break
            end, longest = end + 1, wider
        batches.append(range(start, end))
        start = end
    return batches


def token_budget(model, share: float = 0.5) -> int | None:
    """On CUDA, the tokens one generate call may hold: `share` of the GPU's free memory over what a
    token costs (its keys and values in every layer, and one layer's activations while the prompt
    is run). Without it a 3B student's 64 week-long prompts at once can need more memory than the GPU
    has free. None on the CPU, where `batch_size` alone decides."""
    device = getattr(model, "device", None)
    if getattr(device, "type", "cpu") != "cuda":
        return None
    import torch

    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    hidden, layers = config.hidden_size, config.num_hidden_layers
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    intermediate = getattr(config, "intermediate_size", None) or 4 * hidden
    per_token = model.dtype.itemsize * (layers * 2 * kv_heads * head_dim + 4 * hidden + 3 * intermediate)
    free, _ = torch.cuda.mem_get_info(device)
    return max(1, int(share * free / per_token))


def attention_backend(device) -> str:
    """The scaled-dot-product attention kernels generation may use on `device`, as results record it."""
    if getattr(device, "type", device) != "cuda":
        return "sdpa: torch's choice"
    if os.environ.get(CUDNN_ATTENTION_ENV) == "1":
        return f"sdpa: torch's choice, cuDNN included ({CUDNN_ATTENTION_ENV}=1)"
    return "sdpa: flash, memory-efficient or math; cuDNN off"


def generation_attention(device):
    """A context in which generation on a CUDA `device` runs without cuDNN's attention. cuDNN builds
    an execution plan per new shape, and a week's turns never repeat one (every prompt is longer, every
    decode step's keys one longer): on an H200, transformers' generate of a 3B model decodes faster
    without it (benchmarks/README.md, D35)."""
    if getattr(device, "type", device) != "cuda" or os.environ.get(CUDNN_ATTENTION_ENV) == "1":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def decoding_config(sampling: SamplingConfig, tokenizer):
    """The GenerationConfig of `sampling`, every other value at transformers' global default.

    `generate` fills each value a config leaves unset from the checkpoint's generation_config.json, and
    real checkpoints recommend their own decoding (Qwen2.5-Instruct: sampling at 0.7, top-k 20, a 1.05
    repetition penalty, which a fine-tuned student inherits); the protocol decodes as `sampling` says."""
    from transformers import GenerationConfig

    config = GenerationConfig(**GenerationConfig()._get_default_generation_params())
    config.update(max_new_tokens=sampling.max_new_tokens or DEFAULT_MAX_NEW_TOKENS, max_length=None,
                  pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    if sampling.temperature > 0:
        config.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p)
    return config


def number_processors(sampling: SamplingConfig, tokenizer, sum_beliefs: bool = False):
    """The logits processors `generate` gets: greedy decoding writes a number token as the median of the
    model's distribution over numbers; with `sum_beliefs`, greedy or sampled, a belief is written as the
    previous one plus the increment (number_decoding.py; `belief_sum_decoding` decides). None: none."""
    from transformers import LogitsProcessorList

    from .number_decoding import number_median_processor

    found = [number_median_processor(tokenizer) if sampling.temperature == 0 else None,
             belief_sum_decoding(sampling, tokenizer, sum_beliefs)]
    found = [p for p in found if p is not None]
    return LogitsProcessorList(found) if found else None


def belief_sum_decoding(sampling: SamplingConfig, tokenizer, sum_beliefs: bool):
    """The belief-sum processor (number_decoding.belief_sum_processor) that generation with these
    arguments runs, or None where it runs none: `sum_beliefs` off, or a tokenizer without whole-number
    belief tokens (Qwen2's gives each digit its own). Sampling draws the reasoning and the action and
    writes the sum as greedy play does. The one rule for `number_processors` and for what a record
    says of how a player wrote its beliefs."""
    from .number_decoding import belief_sum_processor

    if not sum_beliefs:
        return None
    return belief_sum_processor(tokenizer, sampled=sampling.temperature != 0)


def _left_padded(rows: list[list[int]], pad_id: int):
    """(input_ids, attention_mask) with every row right-aligned, as a left-padding tokenizer gives them."""
    import torch

    width = max(len(ids) for ids in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for row, ids in enumerate(rows):
        if ids:
            input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            mask[row, width - len(ids) :] = 1
    return input_ids, mask


def _generate_reusing_prefixes(model, rows: list[list[int]], keys: list[int], cache: PromptCache, pad_id: int, config,
                               processors=None):
    cache.share_prefixes(model, keys, rows)
    layout = cache.plan(keys, rows)
    input_ids, attention_mask = cache.inputs(rows, pad_id, layout)
    past = cache.past_key_values(keys, layout, input_ids.shape[1] + config.max_new_tokens)
    out = model.generate(input_ids=input_ids.to(model.device), attention_mask=attention_mask.to(model.device),
                         generation_config=config, logits_processor=processors,
                         **({} if past is None else {"cache": past}))
    cache.store(keys, rows, out.cache, layout)
    return out.sequences[:, input_ids.shape[1] :]


def valid_answer_rate(model, tokenizer, conversations: list[list[dict]], sampling: SamplingConfig) -> float:
    """Fraction of generated answers that parse as protocol answers with a legal action."""
    from rhythm_env.protocol import parse_answer

    answers = generate_answers(model, tokenizer, conversations, sampling)
    return sum(parse_answer(a).valid for a in answers) / max(len(answers), 1)
