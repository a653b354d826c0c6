"""Reuse of each conversation's prompt KV cache from one lockstep step to the next.

In an episode the prompt at step t+1 repeats the prompt at step t up to the last history row (the
week's table only grows), so most of its tokens were already run through the model one step earlier.
`PromptCache` keeps, per conversation, the token ids and key/value states of its last prompt; the
next `generate` call starts from the longest shared token prefix and runs only the rest. Prefill,
which dominates evaluation cost for long prompts and short answers, then shrinks to the new rows.

Rows of a batch share one cache length, as `generate` requires: each row's reused prefix is
right-aligned in the cached positions and its uncached tail right-aligned after them, with padding
before each that the attention mask hides (zeros in the cache). `generate` derives position ids from
the mask, so every token keeps its own position whatever the padding, and the reused keys carry
exactly the rotary positions they were computed with.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field


def _shared_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def supports_prompt_cache(model) -> bool:
    """True where the model generates with a plain growing key/value cache on every layer (no
    sliding windows, no recurrent state, no static cache configured), the only layout whose prefix
    can be cut and reused. Other models generate without reuse."""
    try:
        from transformers import DynamicCache
        from transformers.cache_utils import DynamicLayer

        layers = DynamicCache(config=model.config).layers
    except Exception:  # a model family without a Cache config: generate without reuse
        return False
    configured = getattr(getattr(model, "generation_config", None), "cache_implementation", None)
    return configured in (None, "dynamic") and bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


def prompt_cache_budget(model, share: float = 0.25) -> int | None:
    """The bytes of prompt states a `PromptCache` may hold for `model`: on a CUDA GPU `share` of its
    free memory (a 3B student's states for a hundred week-long conversations are more than a 24 GB
    GPU holds beside its weights); None (no bound) on the CPU.
    On an H200 a 3B student's play is faster with the cache (benchmarks/README.md, D35)."""
    if getattr(getattr(model, "device", None), "type", "cpu") != "cuda":
        return None
    import torch

    free, _ = torch.cuda.mem_get_info(model.device)
    return int(share * free)


# Shorter shared prefixes (the system prompt every week starts with) are not worth a forward pass.
SHARED_PREFIX_MIN = 64


def _prefix_groups(rows: list[list[int]], min_tokens: int) -> list[tuple[int, list[int]]]:
    """Groups of `rows` (sorted) to run a shared prefix for once: (prefix length, member indices),
    chosen to save the most tokens, (members - 1) x prefix, each prefix at least `min_tokens`. Rows
    sorted by tokens put each group next to each other; a run of rows shares the smallest common
    prefix of its neighbours, and splitting a run where that prefix is shortest may save more."""
    common = [_shared_prefix(a, b) for a, b in zip(rows, rows[1:])]

    def best(lo: int, hi: int) -> tuple[int, list[tuple[int, list[int]]]]:  # rows lo..hi inclusive
        if lo == hi:
            return 0, []
        cut = min(range(lo, hi), key=common.__getitem__)
        together = (hi - lo) * common[cut] if common[cut] >= min_tokens else 0
        left, right = best(lo, cut), best(cut + 1, hi)
        if left[0] + right[0] >= together:
            return left[0] + right[0], left[1] + right[1]
        return together, [(common[cut], list(range(lo, hi + 1)))]

    return best(0, len(rows) - 1)[1] if rows else []


@dataclass
class Layout:
    """Where each row of one `generate` call sits: its reused prefix is right-aligned in the first
    `width` (cached) positions and its remaining `tail` tokens are right-aligned after them."""

    width: int
    tail: int
    reuse: list[int]
    lengths: list[int]


@dataclass
class PromptCache:
    """Token ids and per-layer (key, value) states, shape [heads, tokens, head_dim], of each
    conversation's last prompt, keyed by the conversation's index in the lockstep batch."""

    ids: dict[int, list[int]] = field(default_factory=dict, repr=False)
    states: dict[int, list[tuple]] = field(default_factory=dict, repr=False)
    reused_tokens: int = 0  # prompt tokens served from the cache so far
    computed_tokens: int = 0  # prompt tokens the model had to run (padding excluded)
    # At most this many bytes of states are held (None: no bound). Past it the cache lets go of every
    # conversation for good: on a GPU a call costs its decode steps whatever its rows, so caching some
    # rows (two calls a turn) is slower than caching none (benchmarks/README.md, D35).
    # States shared by several conversations (share_prefixes) count once for each: the safe side.
    max_bytes: int | None = None
    overflowed: bool = False
    _bytes: dict[int, int] = field(default_factory=dict, repr=False)  # each conversation's states, in bytes

    @property
    def held_bytes(self) -> int:
        return sum(self._bytes.values())

    @property
    def reused_fraction(self) -> float:
        """Share of all prompt tokens so far that came from the cache."""
        return self.reused_tokens / max(self.reused_tokens + self.computed_tokens, 1)

    def _keep(self, key: int, ids: list[int], states: list[tuple]) -> None:
        """Hold `states` as conversation `key`'s, unless they take the cache past `max_bytes`: then
        it holds nothing, now and from then on."""
        if self.overflowed:
            return
        size = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in states)
        if self.max_bytes is not None and self.held_bytes - self._bytes.get(key, 0) + size > self.max_bytes:
            for entries in (self.ids, self.states, self._bytes):
                entries.clear()
            self.overflowed = True
            return
        self.ids[key], self.states[key], self._bytes[key] = list(ids), states, size

    def share_prefixes(self, model, keys: list[int], rows: list[list[int]], min_tokens: int = SHARED_PREFIX_MIN) -> int:
        """Rows with nothing cached that begin with the same `min_tokens` or more tokens (the weeks
        GRPO's reward finishes: one prompt's completions, all after the same conversation) get that
        prefix's states computed once and cached under each of them, instead of once per row by
        `generate`. Returns the tokens this saved."""
        import torch

        if self.overflowed:
            return 0
        fresh = sorted((ids, key) for key, ids in zip(keys, rows) if key not in self.ids)
        saved = 0
        for shared, members in _prefix_groups([ids for ids, _ in fresh], min_tokens):
            prefix = fresh[members[0]][0][: min(shared, min(len(fresh[m][0]) for m in members) - 1)]
            with torch.no_grad():
                out = model(input_ids=torch.tensor([prefix], device=model.device), use_cache=True)
            states = [(layer.keys[0], layer.values[0]) for layer in out.cache.layers]
            for m in members:  # shared, read-only: store() replaces an entry, never writes into it
                self._keep(fresh[m][1], prefix, states)
            self.computed_tokens += len(prefix)  # plan() counts it as reused in every member
            saved += (len(members) - 1) * len(prefix)
        return saved

    def plan(self, keys: list[int], rows: list[list[int]]) -> Layout:
        """Each row reuses the longest prefix it shares with its conversation's last prompt (at
        least its last token is run, to give the logits of the first answer token)."""
        reuse = [min(_shared_prefix(ids, self.ids.get(key, [])), len(ids) - 1) for key, ids in zip(keys, rows)]
        lengths = [len(ids) for ids in rows]
        self.reused_tokens += sum(reuse)
        self.computed_tokens += sum(n - r for n, r in zip(lengths, reuse))
        return Layout(max(reuse), max(n - r for n, r in zip(lengths, reuse)), reuse, lengths)

    def inputs(self, rows: list[list[int]], pad_id: int, layout: Layout):
        """(input_ids, attention_mask) of the whole layout; padding sits before each row's reused
        prefix and before its tail, and the mask hides both. Position ids, which `generate` derives
        from the mask, are then each row's own token positions."""
        import torch

        size = (len(rows), layout.width + layout.tail)
        input_ids, mask = torch.full(size, pad_id, dtype=torch.long), torch.zeros(size, dtype=torch.long)
        for row, (ids, r) in enumerate(zip(rows, layout.reuse)):
            ids = torch.tensor(ids, dtype=torch.long)
            input_ids[row, layout.width - r : layout.width], mask[row, layout.width - r : layout.width] = ids[:r], 1
            input_ids[row, size[1] - (len(ids) - r) :], mask[row, size[1] - (len(ids) - r) :] = ids[r:], 1
        return input_ids, mask

    def past_key_values(self, keys: list[int], layout: Layout, capacity: int):
        """A cache holding each row's reused prefix in the layout's first `width` positions, with
        buffers for `capacity` positions so that generation writes in place; None if nothing is reused."""
        from transformers import DynamicCache

        if not layout.width:
            return None
        width = layout.width
        first = self.states[next(k for k, r in zip(keys, layout.reuse) if r)]
        layers = []
        for layer, (k0, v0) in enumerate(first):
            k = k0.new_zeros((len(keys), k0.shape[0], capacity, k0.shape[2]))
            v = v0.new_zeros((len(keys), v0.shape[0], capacity, v0.shape[2]))
            for row, (key, r) in enumerate(zip(keys, layout.reuse)):
                if r:
                    stored_k, stored_v = self.states[key][layer]
                    k[row, :, width - r : width] = stored_k[:, :r]
                    v[row, :, width - r : width] = stored_v[:, :r]
            layers.append(_preallocated_layer_class()(k, v, width))
        cache = DynamicCache()
        cache.layers = layers
        return cache

    def store(self, keys: list[int], rows: list[list[int]], cache, layout: Layout) -> None:
        """Keep each row's prompt states (its reused prefix and its tail) from the cache `generate`
        returns, which holds the layout's positions followed by the answer's."""
        import torch

        if self.overflowed:
            return
        end = layout.width + layout.tail
        for row, (key, ids, r) in enumerate(zip(keys, rows, layout.reuse)):
            prefix, tail = slice(layout.width - r, layout.width), slice(end - (len(ids) - r), end)
            self._keep(key, ids, [(torch.cat([layer.keys[row, :, prefix], layer.keys[row, :, tail]], dim=1),
                                   torch.cat([layer.values[row, :, prefix], layer.values[row, :, tail]], dim=1))
                                  for layer in cache.layers])


@functools.cache
def _preallocated_layer_class():
    import torch
    from transformers.cache_utils import DynamicLayer

    class PreallocatedLayer(DynamicLayer):
        """A DynamicLayer whose buffers are allocated up front: `update` writes new states in place
        where DynamicLayer concatenates, which copies the whole cache for every generated token."""

        def __init__(self, keys, values, length: int):
            super().__init__()
            self.buffer_keys, self.buffer_values, self.length = keys, values, length
            self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
            self.keys, self.values = keys[:, :, :length], values[:, :, :length]

        def update(self, key_states, value_states, *args, **kwargs):
            end = self.length + key_states.shape[-2]
            if end > self.buffer_keys.shape[-2]:  # longer than planned: grow like DynamicLayer
                self.buffer_keys = torch.cat([self.keys, key_states], dim=-2)
                self.buffer_values = torch.cat([self.values, value_states], dim=-2)
            else:
                self.buffer_keys[:, :, self.length : end] = key_states
                self.buffer_values[:, :, self.length : end] = value_states
            self.length = end
            self.keys, self.values = self.buffer_keys[:, :, :end], self.buffer_values[:, :, :end]
            return self.keys, self.values

    return PreallocatedLayer
