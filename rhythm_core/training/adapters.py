"""One base model under several LoRA adapters: GRPO's trainable policy and its frozen SFT start.

GRPO trains the SFT adapter further while the frozen SFT student finishes each sampled answer's week
for the reward. Held as two models, a 3B student is two copies of its base weights (6 GiB each in
bf16); here the frozen student is a second adapter, loaded from the same SFT checkpoint, on the
trainable model's own base, and `AdapterView` plays it: every `generate` and forward call runs with
that adapter active, then the trainable adapter is active again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

FROZEN_ADAPTER = "sft"  # the SFT start's adapter, frozen, beside the trainable "default"


def load_frozen_adapter(model, checkpoint, name: str = FROZEN_ADAPTER) -> None:
    """Load the adapter of `checkpoint` into the PEFT `model` as `name`, frozen; "default" stays the
    active, trainable one."""
    active = model.active_adapter
    model.load_adapter(str(checkpoint), adapter_name=name, is_trainable=False)
    model.set_adapter(active)


@contextlib.contextmanager
def adapter_active(model, name: str) -> Iterator[None]:
    """While open, `model` (a PeftModel) runs with adapter `name` active and without dropout; then the
    adapter active before is active (and trainable) again, in the training mode it had."""
    previous, training = model.active_adapter, model.training
    model.set_adapter(name, inference_mode=True)
    model.eval()
    try:
        yield
    finally:
        model.set_adapter(previous)
        model.train(training)


class AdapterView:
    """`model` as its adapter `name` plays it, for code that takes a model (`generate_answers`, the
    prompt cache, `LLMPolicyAgent`): `generate` and calls run inside `adapter_active`; every other
    attribute is the model's."""

    def __init__(self, model, name: str = FROZEN_ADAPTER):
        self.model, self.adapter = model, name

    def __getattr__(self, attribute):
        return getattr(self.model, attribute)

    def eval(self) -> AdapterView:  # each call switches to eval mode itself and back
        return self

    def generate(self, *args, **kwargs):
        with adapter_active(self.model, self.adapter):
            return self.model.generate(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        with adapter_active(self.model, self.adapter):
            return self.model(*args, **kwargs)
