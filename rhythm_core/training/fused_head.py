"""TRL's fused LM head, projecting only the positions that carry a label on CPU as well.

TRL's SFT and GRPO trainers replace the model's output layer during training with a chunked
log-probability function that never materializes the (batch, length, vocabulary) logits. On Triton
devices it projects only the positions whose label is not -100; on every other device it projects
all positions, so that compiled tile shapes stay fixed (Neuron recompiles when they change). On CPU,
in eager mode, nothing recompiles, and the positions without a label are most of a batch: an SFT
batch of whole weeks carries loss only on its answers (a minority of the tokens), a GRPO batch only on the
completions. Projecting only the labelled positions gives the same loss, gradients and metrics with
a fraction of the output layer's work, so the demo's SFT steps run faster (benchmarks/README.md, D17).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator


def _references(function, name: str) -> bool:
    """Whether `function` (or a function defined inside it) looks `name` up as a global."""
    codes = [function.__code__]
    while codes:
        code = codes.pop()
        if name in code.co_names:
            return True
        codes.extend(c for c in code.co_consts if inspect.iscode(c))
    return False


def fused_head_status() -> str | None:
    """None when `labelled_positions_only` applies to the TRL installed, else why not (naming the
    TRL version). What it relies on is private to TRL, so it is checked, not assumed: the module-level
    `trl.trainer.utils._use_triton(device)` makes the compact choice, and a function of that module
    looks it up at call time (so replacing it there takes effect)."""
    try:
        import trl
        from trl.trainer import utils
    except ImportError:  # pragma: no cover - TRL is a dependency
        return "TRL is not installed"
    version = f"trl {trl.__version__}"
    choose = getattr(utils, "_use_triton", None)
    if not callable(choose):
        return f"{version} has no trl.trainer.utils._use_triton: its fused LM head projects every position on CPU"
    users = [f for f in vars(utils).values()
             if inspect.isfunction(f) and f.__module__ == utils.__name__ and f is not choose
             and _references(f, "_use_triton")]
    if not users:
        return f"{version}: no function of trl.trainer.utils calls _use_triton, so replacing it changes nothing"
    try:
        import torch

        if choose(torch.device("cpu")) not in (True, False):
            return f"{version}: _use_triton(device) no longer answers True or False"
    except TypeError as exc:
        return f"{version}: _use_triton(device) changed its signature ({exc})"
    return None


@contextlib.contextmanager
def labelled_positions_only() -> Iterator[bool]:
    """While open, TRL's fused LM head projects only labelled positions on CPU too. Yields whether it
    applies (`fused_head_status`); when it does not, training runs TRL's own path, full logits on CPU
    (the same results, slower), and the training result says why."""
    if fused_head_status() is not None:
        yield False
        return
    from trl.trainer import utils

    choose = utils._use_triton  # TRL's "compact" choice is made by this function
    utils._use_triton = lambda device: device.type == "cpu" or choose(device)
    try:
        yield True
    finally:
        utils._use_triton = choose


def speedups(model, last_layer_used: bool) -> dict:
    """What a training result records about how it ran on the CPU: the kernels' instruction set
    (rhythm_core.kernels) and its two speed-ups, on, or off and why (a library release that moved what
    they rely on: the same results, slower)."""
    import torch

    from .generation import attention_backend
    from .last_layer import last_layer_status

    return {"cpu_kernels": torch.backends.cpu.get_cpu_capability(),
            "generation_attention": attention_backend(getattr(model, "device", "cpu")),
            "fused_head": fused_head_status() or "on: labelled positions only",
            "last_layer": (last_layer_status(model) or "on: read positions only") if last_layer_used
            else "not used: LoRA or another architecture"}
