"""Greedy decoding of numbers as the median of the model's distribution over them.

The tiny student writes every belief and evidence increment as one whole-number token (`0.84`,
` +0.20`). Greedy decoding takes the single likeliest token, and where the model spreads its mass
over neighbouring values (0.33, 0.34, 0.35 ...) a frequent value elsewhere wins: the student states
large moves too small. Where the greedy token is a number, `NumberMedian` writes the median of the
distribution over that kind's numbers instead (the value minimising the expected absolute error, the
way beliefs are graded). Tokenizers without whole-number tokens (Qwen2 gives each digit its own) have
no kinds, and decoding is left as it is.
"""

from __future__ import annotations

import re
from functools import lru_cache

# Kinds of whole-number tokens: a stated increment (" +0.20", " -0.05") and a stated belief ("0.84").
_KINDS = (re.compile(r"^ [+-]0\.\d\d$"), re.compile(r"^(0\.\d{1,2}|1\.0)$"))


@lru_cache(maxsize=8)
def number_kinds(tokenizer) -> tuple:
    """Per kind, (token ids, values) sorted by value; kinds without tokens left out."""
    vocab = [tokenizer.decode([i]) for i in range(len(tokenizer))]
    kinds = []
    for pattern in _KINDS:
        found = sorted((float(text.strip()), i) for i, text in enumerate(vocab) if pattern.match(text))
        if found:
            kinds.append(([i for _, i in found], [v for v, _ in found]))
    return tuple(kinds)


@lru_cache(maxsize=8)
def number_median_processor(tokenizer):
    """A transformers LogitsProcessor for greedy decoding, or None when the tokenizer has no whole-number
    tokens. Built once per tokenizer: generation asks for it every step of a week."""
    import torch
    from transformers import LogitsProcessor

    kinds = number_kinds(tokenizer)
    if not kinds:
        return None
    kind_of = torch.full((len(tokenizer),), -1, dtype=torch.long)
    for k, (ids, _) in enumerate(kinds):
        kind_of[ids] = k
    on_device: dict = {}  # device -> (kind_of, ids per kind), copied there once

    def tables(device):
        if device not in on_device:
            on_device[device] = (kind_of.to(device), [torch.tensor(ids, device=device) for ids, _ in kinds])
        return on_device[device]

    class NumberMedian(LogitsProcessor):
        def __call__(self, input_ids, scores):
            kind_table, id_tensors = tables(scores.device)
            top = scores.argmax(dim=1)
            # a model's output layer may be wider than its tokenizer (padded): those ids are no numbers
            kind = kind_table[top.clamp(max=len(kind_table) - 1)].masked_fill(top >= len(kind_table), -1)
            for k, ids in enumerate(id_tensors):
                rows = (kind == k).nonzero().flatten()
                if not len(rows):
                    continue
                mass = torch.softmax(scores[rows][:, ids].float(), dim=1).cumsum(dim=1)
                chosen = ids[(mass >= 0.5).float().argmax(dim=1)]  # the first value holding half the mass
                scores[rows, chosen] = scores[rows].max(dim=1).values + 1.0
            return scores

    return NumberMedian()
