"""The offline stand-in for GRPO with `environment_factory` on RhythmEnv (text_env.tool_env): the Qwen2
stand-in (`qwen2_standin`) with Qwen2.5's whole, tool-calling template, its tokenizer trained on what such
a run reads and writes (the task, the play request, observations and tool calls), so a CPU run of the
recipe, its tests and examples/grpo_rhythm_env.py --offline need nothing from the Hub."""

from __future__ import annotations

from pathlib import Path

from ..protocol import TOOL_SYSTEM_PROMPT
from ..text_env.tool_env import PLAY_REQUEST, RhythmToolEnv
from .qwen2_standin import build_qwen2_standin

TEXT_WEEK_SEED = 1234  # the training week whose observations the tokenizer is trained on


def tool_texts() -> list[str]:
    """The tokenizer's training texts: the task, the play request, a week's observations, a tool call."""
    env = RhythmToolEnv()
    texts = [TOOL_SYSTEM_PROMPT, PLAY_REQUEST, env.reset(seed=TEXT_WEEK_SEED)]
    for _ in range(6):
        texts.append(env.sleep(0.5, 0.5, 0.5))
        texts.append('<tool_call>\n{"name": "deep_work", "arguments": {"social": 0.41, "morning": 0.6, "work": 0.5}}'
                     "\n</tool_call>")
    return texts * 4


def build_tool_standin(out_dir, *, seed: int = 0) -> Path:
    """Save the tool-calling stand-in to `out_dir`; returns the folder (AutoModelForCausalLM and
    AutoTokenizer load it; `trl.chat_template_utils.add_response_schema` readies its tokenizer)."""
    return build_qwen2_standin(Path(out_dir), tool_texts(), seed=seed, tool_calling=True)


__all__ = ["build_tool_standin", "tool_texts"]
