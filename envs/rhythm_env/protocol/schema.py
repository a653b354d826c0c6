"""The answer as a JSON schema, for endpoints with structured outputs."""

from __future__ import annotations

from ..sim.spec import ACTIONS, BELIEF_DIMS

# The answer as a strict JSON schema, for endpoints with structured outputs (OpenAI, Azure, vLLM):
# the reasoning first (the model explains before it commits), the three belief numbers in [0, 1],
# the action from the ten names. An answer that follows it is exactly what `parse_answer` accepts.
ANSWER_JSON_SCHEMA = {
    "type": "object",
    "properties": {
        "reasoning": {"type": "string"},
        "belief": {
            "type": "object",
            "properties": {d: {"type": "number", "minimum": 0, "maximum": 1} for d in BELIEF_DIMS},
            "required": list(BELIEF_DIMS),
            "additionalProperties": False,
        },
        "action": {"type": "string", "enum": list(ACTIONS)},
    },
    "required": ["reasoning", "belief", "action"],
    "additionalProperties": False,
}
ANSWER_RESPONSE_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "rhythm_answer", "strict": True, "schema": ANSWER_JSON_SCHEMA},
}
