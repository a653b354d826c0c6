"""The text protocol between RhythmEnv and a language-model agent.

The env side renders the episode so far as chat messages (`render_messages`); the model answers
with one JSON object holding its reasoning, its belief about the hidden profile and its action;
`parse_answer` turns any text into a `ParsedAnswer` without ever raising, and `fallback_action`
names the safe action to take when the answer is unusable. `format_answer` writes the canonical
answer, which is what a teacher's answer looks like in training data.

Modules: `prompts` (the system prompts), `format` (prompt formats, rationale kinds and
`DatasetFormat`), `render` (the week as chat messages), `answer` (parsing and the canonical answer),
`numbers` (the 2-decimal grid, the evidence chain's addition, and the answer's numbers read where they
stand in a text), `fallback` (the safe action) and `schema` (the answer's JSON schema). Import from
the package: `from rhythm_env.protocol import parse_answer`.
"""

from .answer import ParsedAnswer, action_prefix, format_answer, parse_answer
from .fallback import fallback_action, fallback_actions
from .format import (
    CHAT_FORMATS,
    DEFAULT_PROMPT_FORMAT,
    DEFAULT_READOUT_FORM,
    DEFAULT_REASONING,
    PROMPT_FORMATS,
    READOUT_FORMS,
    REASONING,
    DatasetFormat,
)
from .numbers import (
    ANSWER_START,
    BELIEF_NUMBER,
    DECIMALS,
    INCREMENT_NUMBER,
    add_increment,
    belief_due,
    last_stated_belief,
    signed,
    stated_increments,
)
from .prompts import (
    COMPACT_SYSTEM_PROMPT,
    DEFAULT_PROMPT_VARIANT,
    PROMPT_VARIANTS,
    SCRATCH_PROMPT_VARIANT,
    SYSTEM_PROMPT,
    TOOL_SYSTEM_PROMPT,
    UNRECORDED_PROMPT_VARIANT,
    system_prompt,
)
from .render import (
    chat_turn_renderer,
    render_chat_turn,
    render_conversation,
    render_labeled_turn,
    render_messages,
    render_tool_answer,
    render_user_prompt,
)
from .schema import ANSWER_JSON_SCHEMA, ANSWER_RESPONSE_FORMAT

__all__ = [
    "ANSWER_JSON_SCHEMA",
    "ANSWER_RESPONSE_FORMAT",
    "ANSWER_START",
    "BELIEF_NUMBER",
    "CHAT_FORMATS",
    "COMPACT_SYSTEM_PROMPT",
    "DECIMALS",
    "DEFAULT_PROMPT_FORMAT",
    "DEFAULT_PROMPT_VARIANT",
    "DEFAULT_READOUT_FORM",
    "DEFAULT_REASONING",
    "PROMPT_FORMATS",
    "PROMPT_VARIANTS",
    "READOUT_FORMS",
    "REASONING",
    "SCRATCH_PROMPT_VARIANT",
    "SYSTEM_PROMPT",
    "TOOL_SYSTEM_PROMPT",
    "UNRECORDED_PROMPT_VARIANT",
    "INCREMENT_NUMBER",
    "DatasetFormat",
    "ParsedAnswer",
    "action_prefix",
    "add_increment",
    "belief_due",
    "chat_turn_renderer",
    "fallback_action",
    "fallback_actions",
    "format_answer",
    "last_stated_belief",
    "parse_answer",
    "render_chat_turn",
    "render_conversation",
    "render_labeled_turn",
    "render_messages",
    "render_tool_answer",
    "render_user_prompt",
    "signed",
    "stated_increments",
    "system_prompt",
]
