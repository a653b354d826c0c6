"""Greedy decoding of numbers as the median of the model's distribution over them.

The tiny student writes every belief and evidence increment as one whole-number token (`0.84`,
` +0.20`). Greedy decoding takes the single likeliest token, and where the model spreads its mass
over neighbouring values (0.33, 0.34, 0.35 ...) a frequent value elsewhere wins: the student states
large moves too small. Where the greedy token is a number, `NumberMedian` writes the median of the
distribution over that kind's numbers instead (the value minimising the expected absolute error, the
way beliefs are graded). Tokenizers without whole-number tokens (Qwen2 gives each digit its own) have
no kinds, and decoding is left as it is.

A student of the linear evidence chain also writes each belief as the previous answer's belief plus
the increment its reasoning just wrote (every training answer is exactly that sum, clipped to [0, 1]).
Left to itself the tiny student misadds now and then, and its final belief is further from
the person for it; `belief_sum_processor` writes the sum (benchmarks/README.md, D22). The increments, where the inference is, stay the model's own.
"""

from __future__ import annotations

from functools import lru_cache

from rhythm_env.protocol.numbers import (
    ANSWER_START,
    BELIEF_TOKEN,
    DECIMALS,
    INCREMENT_TOKEN,
    add_increment,
    belief_due,
    last_stated_belief,
    stated_increments,
)

# Kinds of whole-number tokens, on the protocol's grid: a stated increment and a stated belief.
_KINDS = (INCREMENT_TOKEN, BELIEF_TOKEN)


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


# Tokens of context read back to find the previous answer: the demo student's previous belief lies
# 30-48 tokens back (a user turn and an answer are ~22 and ~13), and a malformed previous answer sends
# the search further. Decoding is the processor's cost, so the short window is read first.
_SHORT_CONTEXT_TOKENS, _CONTEXT_TOKENS = 128, 256


def belief_sum(context: str) -> tuple[str, float] | None:
    """(dimension, value) the belief number about to be written must take: the previous answer's stated
    belief plus the increment this answer's reasoning wrote for that dimension, clipped to [0, 1], on
    the 2-decimal grid. None where `context` (the text so far, ending just before the number) is not
    at a belief number, or has no previous belief or no increment for it."""
    start = context.rfind(ANSWER_START)
    dim = belief_due(context) if start >= 0 else None
    if dim is None:
        return None
    previous = last_stated_belief(context, start)
    increments = stated_increments(context[start:])
    if previous is None or dim not in increments:
        return None
    return dim, float(add_increment(previous[dim], increments[dim]))


@lru_cache(maxsize=8)
def _belief_tables(tokenizer):
    """(ids of each belief value, belief-token flags, flags of tokens ending in a key's colon) or None
    when the tokenizer has no whole-number belief tokens."""
    import torch

    kinds = number_kinds(tokenizer)
    if len(kinds) < 2:
        return None
    belief_ids, values = kinds[-1]
    ids_of: dict[float, list[int]] = {}
    for i, value in zip(belief_ids, values):
        ids_of.setdefault(round(value, DECIMALS), []).append(i)
    is_belief = torch.zeros(len(tokenizer), dtype=torch.bool)
    is_belief[belief_ids] = True
    ends_key = torch.tensor([tokenizer.decode([i]).rstrip().endswith(":") for i in range(len(tokenizer))])
    return ids_of, is_belief, ends_key


def _summed_value(tokenizer, context: list[int]) -> float | None:
    """The belief sum due after the token ids `context`, or None; the short window is read first and
    the longer one finds what it does whenever it finds anything."""
    found = (belief_sum(tokenizer.decode(context[-_SHORT_CONTEXT_TOKENS:], skip_special_tokens=True))
             or belief_sum(tokenizer.decode(context[-_CONTEXT_TOKENS:], skip_special_tokens=True)))
    return None if found is None else found[1]


@lru_cache(maxsize=16)
def belief_sum_processor(tokenizer, sampled: bool = False):
    """A transformers LogitsProcessor that writes each belief number as `belief_sum` of its context, or
    None when the tokenizer has no whole-number belief tokens. Greedy (`sampled` False) it runs after
    `NumberMedian` and acts only where the chosen token is a belief number. Sampled, it acts wherever
    the text ends at a belief key with a sum due (`belief_due`) and leaves the sum the only token to
    draw: the reasoning and the action stay sampled, the belief is written as play writes it."""
    import torch
    from transformers import LogitsProcessor

    tables = _belief_tables(tokenizer)
    if tables is None:
        return None
    ids_of, is_belief, ends_key = tables
    on_device: dict = {}  # device -> the flags there, copied once

    class BeliefSum(LogitsProcessor):
        # One read from the device and one write per step, whatever the rows: on CUDA each per-row
        # read waits for the device (benchmarks/README.md, D22).
        def __call__(self, input_ids, scores):
            if scores.device not in on_device:
                on_device[scores.device] = (is_belief.to(scores.device), ends_key.to(scores.device))
            flags, after_key = on_device[scores.device]
            if sampled:  # at a key: the previous token ends with its colon
                last = input_ids[:, -1]
                due = (last < len(after_key)) & after_key[last.clamp(max=len(after_key) - 1)]
            else:
                top = scores.argmax(dim=1)
                due = (top < len(flags)) & flags[top.clamp(max=len(flags) - 1)]
            rows = due.nonzero().flatten()
            if not len(rows):
                return scores
            contexts = input_ids[rows, -_CONTEXT_TOKENS:].tolist()
            picked_rows, wanted = [], []
            for k, context in enumerate(contexts):
                value = _summed_value(tokenizer, context)
                if value is not None and value in ids_of:
                    picked_rows.append(k)
                    wanted.append(ids_of[value])
            if not wanted:
                return scores
            picked = rows[picked_rows]
            # "0.5" and "0.50" alike: the one the model prefers
            width = max(len(ids) for ids in wanted)
            candidates = torch.tensor([ids + ids[:1] * (width - len(ids)) for ids in wanted], device=scores.device)
            chosen = candidates.gather(1, scores[picked[:, None], candidates].argmax(dim=1, keepdim=True)).flatten()
            if sampled:
                top_scores = scores[picked, chosen]
                scores[picked] = float("-inf")
                scores[picked, chosen] = top_scores
            else:
                scores[picked, chosen] = scores[picked].max(dim=1).values + 1.0
            return scores

    return BeliefSum()


def summed_belief_positions(tokenizer, ids: list[int], start: int = 0) -> list[int]:
    """Positions p >= `start` of `ids` holding a belief number the sampled `belief_sum_processor` wrote:
    the text before it ends at a belief key with a sum due, and the token is that sum. Training on a
    played week masks them: the decoder chose them, not the model."""
    tables = _belief_tables(tokenizer)
    if tables is None:
        return []
    ids_of, is_belief, ends_key = tables
    found = []
    for p in range(max(start, 1), len(ids)):
        token = ids[p]
        if token < len(is_belief) and is_belief[token] and ends_key[ids[p - 1]]:
            value = _summed_value(tokenizer, ids[max(0, p - _CONTEXT_TOKENS):p])
            if value is not None and token in ids_of.get(value, ()):
                found.append(p)
    return found
