"""TRL's fused LM head, projecting only the positions that carry a label on CPU as well.

TRL's SFT and GRPO trainers replace the model's output layer during training with a chunked
log-probability function that never materializes the (batch, length, vocabulary) logits. On Triton
devices it projects only the positions whose label is not -100; on every other device it projects
all positions, so that compiled tile shapes stay fixed (Neuron recompiles when they change). On CPU,
in eager mode, nothing recompiles, and the positions without a label are most of a batch: an SFT
batch of whole weeks carries loss only on its answers (~28% of the tokens), a GRPO batch only on the
completions. Projecting only the labelled positions gives the same loss, gradients and metrics with
a quarter of the output layer's work: the demo's SFT steps run ~25% faster (benchmarks/README.md,
"The output layer on answers only").
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def labelled_positions_only() -> Iterator[bool]:
    """While open, TRL's fused LM head projects only labelled positions on CPU too. Yields whether the
    TRL installed has that head (older releases compute full logits; then this changes nothing)."""
    try:
        from trl.trainer import utils
    except ImportError:  # pragma: no cover - TRL is a dependency
        yield False
        return
    choose = getattr(utils, "_use_triton", None)  # TRL's "compact" choice is made by this function
    if choose is None:
        yield False
        return
    utils._use_triton = lambda device: device.type == "cpu" or choose(device)
    try:
        yield True
    finally:
        utils._use_triton = choose
