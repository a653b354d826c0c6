"""The offline tool-calling stand-in for GRPO with RhythmEnv's TRL environment, defined in the env package
(rhythm_core.text_env.standin); imported here under its earlier name."""

from ..text_env.standin import TEXT_WEEK_SEED, build_tool_standin, tool_texts

__all__ = ["TEXT_WEEK_SEED", "build_tool_standin", "tool_texts"]
