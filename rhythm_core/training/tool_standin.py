"""The offline tool-calling stand-in for GRPO with RhythmEnv's TRL environment, defined in the env package
(rhythm_env.text.standin); imported here under its earlier name."""

from rhythm_env.text.standin import TEXT_WEEK_SEED, build_tool_standin, tool_texts

__all__ = ["TEXT_WEEK_SEED", "build_tool_standin", "tool_texts"]
