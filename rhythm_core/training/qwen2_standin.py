"""The offline Qwen2 stand-in, defined in the env package (rhythm_env.text.standin) so that the TRL example
builds it from the slim install; imported here under its earlier name."""

from rhythm_env.text.standin import (
    CHAT_TEMPLATE,
    ENDOFTEXT,
    GENERATION,
    IM_END,
    IM_START,
    QWEN25_3B_SHAPE,
    REPO_ID,
    TINY_SHAPE,
    build_qwen2_standin,
    tool_chat_template,
    train_qwen2_tokenizer,
)

__all__ = ["CHAT_TEMPLATE", "ENDOFTEXT", "GENERATION", "IM_END", "IM_START", "QWEN25_3B_SHAPE", "REPO_ID", "TINY_SHAPE",
           "build_qwen2_standin", "tool_chat_template", "train_qwen2_tokenizer"]
