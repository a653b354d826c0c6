"""In training, the tiny student's last layer runs only at the positions the loss reads.

The loss of an SFT batch reads the final hidden state at the positions before each labelled token
(the answers: a minority of a week's tokens, whole or cut to 512 tokens); a GRPO batch, at the two completion
tokens after a prompt of up to a week. Every other layer feeds later positions
through attention, but the last layer's output at a position feeds nothing except the output layer
there. So the last layer needs its keys and values at every position, and its queries, attention,
output projection and MLP only at the read positions; elsewhere its output is left at zero, which the
output layer never reads (`fused_head.labelled_positions_only` projects the labelled positions only).
The loss and every gradient are those of the full computation (tests/test_training.py); SFT and GRPO
steps of the two-layer tiny model take less time (benchmarks/README.md, D18).

Only for a Llama decoder (the embedded tiny model) trained in full: other architectures and PEFT
models train as they are. Outside a labelled forward (generation, a cache, no labels) the layer runs
as usual.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


def _last_llama_layer(model):
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    layers = getattr(getattr(model, "model", None), "layers", None)
    if not layers or not isinstance(layers[-1], LlamaDecoderLayer):
        return None
    return layers[-1]


def read_positions(labels=None, shift_labels=None):
    """(batch, length) bool: the positions whose final hidden state the loss reads — those followed
    by a labelled token (or, with `shift_labels`, already aligned to the positions, labelled)."""
    import torch

    if shift_labels is not None:
        return shift_labels != -100
    read = torch.zeros_like(labels, dtype=torch.bool)
    read[:, :-1] = labels[:, 1:] != -100
    return read


def last_layer_status(model) -> str | None:
    """None when `last_layer_on_read_positions` applies to `model`, else why not. It re-implements
    transformers' Llama decoder layer (private to transformers: `repeat_kv`, `rotate_half`, the
    layer's attribute names, the rotary embedding's call), so before any training step it checks that
    on this transformers release its output at the read positions equals the layer's own, on a small
    random batch."""
    import torch
    import transformers

    version = f"transformers {transformers.__version__}"
    layer = _last_llama_layer(model)
    if layer is None:
        return "not a Llama decoder trained in full"
    try:
        weight = next(layer.parameters())
        generator = torch.Generator().manual_seed(0)
        hidden = torch.randn(2, 7, weight.shape[-1], generator=generator).to(weight)
        positions = torch.arange(7, device=weight.device)[None].expand(2, -1)
        embeddings = model.model.rotary_emb(hidden, positions)
        read = torch.tensor([[0, 0, 1, 0, 1, 1, 0], [0, 1, 0, 0, 0, 0, 1]], dtype=torch.bool, device=weight.device)
        keys = torch.tensor([[1] * 7, [0, 1, 1, 1, 1, 1, 1]], device=weight.device)
        with torch.no_grad():
            full = layer(hidden, position_embeddings=embeddings, attention_mask=_causal_mask(keys, hidden.dtype))
            full = full[0] if isinstance(full, tuple) else full
            ours = _at_read_positions(layer, hidden, embeddings, read, keys)
        if not torch.allclose(full[read], ours[read], atol=1e-5, rtol=1e-4):
            return f"{version}: the Llama layer no longer matches its re-implementation at the read positions"
    except Exception as exc:  # any change of the private pieces it uses
        return f"{version}: the Llama layer's internals changed ({type(exc).__name__}: {exc})"
    return None


def _causal_mask(keys, dtype):
    """The 4-d additive mask a Llama model passes its layers: causal, padding keys excluded."""
    import torch

    length = keys.shape[1]
    allowed = torch.ones(length, length, dtype=torch.bool, device=keys.device).tril()[None] & keys.bool()[:, None, :]
    allowed = allowed | torch.eye(length, dtype=torch.bool, device=keys.device)[None]  # padding rows see themselves
    return torch.zeros(allowed.shape, dtype=dtype, device=keys.device).masked_fill(~allowed, torch.finfo(dtype).min)[:, None]


@contextlib.contextmanager
def last_layer_on_read_positions(model) -> Iterator[bool]:
    """While open, `model`'s forwards with labels run its last decoder layer only at the positions
    the loss reads. Yields whether it applies (`last_layer_status`; else the model runs as it is)."""
    if last_layer_status(model) is not None:
        yield False
        return
    layer = _last_llama_layer(model)
    batch: dict = {}

    def capture(module, args, kwargs):  # the labels and padding of the forward about to run
        labels, shift = kwargs.get("labels"), kwargs.get("shift_labels")
        batch["read"] = None if labels is None and shift is None else read_positions(labels, shift)
        batch["keys"] = kwargs.get("attention_mask")

    hook = model.register_forward_pre_hook(capture, with_kwargs=True)
    full = layer.forward

    def forward(hidden_states, attention_mask=None, position_ids=None, cache=None, use_cache=False,
                position_embeddings=None, **kwargs):
        read = batch.get("read")
        if (read is None or cache is not None or position_embeddings is None
                or tuple(read.shape) != tuple(hidden_states.shape[:2])):
            return full(hidden_states, attention_mask=attention_mask, position_ids=position_ids, cache=cache,
                        use_cache=use_cache, position_embeddings=position_embeddings, **kwargs)
        return _at_read_positions(layer, hidden_states, position_embeddings, read, batch.get("keys"))

    layer.forward = forward
    try:
        yield True
    finally:
        hook.remove()
        del layer.forward  # the class's forward again


def _at_read_positions(layer, hidden_states, position_embeddings, read, key_mask):
    import torch
    import torch.nn.functional as F
    from transformers.models.llama.modeling_llama import repeat_kv, rotate_half

    batch, length, width = hidden_states.shape
    attn = layer.self_attn
    counts = read.sum(1)
    queries = int(counts.max())
    if queries == 0:
        return hidden_states * 0  # nothing is read; keep the graph connected
    # each row's read positions first, in order, then padding slots (pointing at position 0, masked)
    order = torch.sort((~read).to(torch.int8), dim=1, stable=True).indices[:, :queries]
    valid = torch.arange(queries, device=read.device)[None, :] < counts[:, None]
    index = torch.where(valid, order, torch.zeros_like(order))

    def gather(t):  # (batch, length, d) -> (batch, queries, d) at the read positions
        return t.gather(1, index[..., None].expand(-1, -1, t.shape[-1]))

    cos, sin = (t.expand(batch, -1, -1) for t in position_embeddings)
    x = layer.input_layernorm(hidden_states)
    keys = attn.k_proj(x).view(batch, length, -1, attn.head_dim).transpose(1, 2)
    values = attn.v_proj(x).view(batch, length, -1, attn.head_dim).transpose(1, 2)
    keys = keys * cos[:, None] + rotate_half(keys) * sin[:, None]
    q = attn.q_proj(gather(x)).view(batch, queries, -1, attn.head_dim).transpose(1, 2)
    q = q * gather(cos)[:, None] + rotate_half(q) * gather(sin)[:, None]
    groups = attn.num_key_value_groups
    keys, values = repeat_kv(keys, groups), repeat_kv(values, groups)
    # causal at each query's own position, padding keys excluded; a padding slot sees position 0
    allowed = torch.arange(length, device=read.device)[None, None, :] <= index[:, :, None]
    if key_mask is not None:
        allowed = allowed & key_mask.bool()[:, None, :]
    allowed = allowed | (~valid)[:, :, None] & (torch.arange(length, device=read.device) == 0)[None, None, :]
    out = F.scaled_dot_product_attention(q, keys, values, attn_mask=allowed[:, None], scale=attn.scaling)
    h = gather(hidden_states) + attn.o_proj(out.transpose(1, 2).reshape(batch, queries, -1))
    h = h + layer.mlp(layer.post_attention_layernorm(h))
    # back in place; padding slots add zeros (scatter_add: they share index 0 with a real position)
    return hidden_states.new_zeros(batch, length, width).scatter_add(
        1, index[..., None].expand(-1, -1, width), h * valid[..., None])
