"""What a dataset's prompts and answers look like: the prompt formats, the rationale kinds, the
recipe's defaults and `DatasetFormat`, the value that validates them and is recorded with the data."""

from __future__ import annotations

from dataclasses import dataclass

PROMPT_FORMATS = ("table", "chat", "chat_labeled")
CHAT_FORMATS = ("chat", "chat_labeled")  # one growing conversation per episode
# What an SFT answer's reasoning carries (data/answers.py): the evidence read-out's increment and
# running belief, nothing, or the teacher's own reasoning.
REASONING = ("evidence", "none", "full")
# The recipe (benchmarks/README.md, D5): the week as one conversation with every number after its meter's
# name, each answer carrying the evidence read-out's increment and running belief.
DEFAULT_PROMPT_FORMAT = "chat_labeled"
DEFAULT_REASONING = "evidence"
# The evidence chain's form (teacher/evidence.py): linear in the shown anomaly, or the innovation form
# that also reads the previous belief and the step (the long preset's).
READOUT_FORMS = ("linear", "innovation")
DEFAULT_READOUT_FORM = "linear"


@dataclass(frozen=True)
class DatasetFormat:
    """How a dataset renders a week (`prompt_format`) and what its answers' rationale carries
    (`reasoning`). The dataset's build info and every checkpoint record it; whatever renders prompts
    or reads the data (SFT, GRPO, the policy) reads it from there instead of guessing."""

    prompt_format: str = DEFAULT_PROMPT_FORMAT
    reasoning: str = DEFAULT_REASONING

    def __post_init__(self):
        for field_name, value, allowed in (("prompt_format", self.prompt_format, PROMPT_FORMATS),
                                           ("reasoning", self.reasoning, REASONING)):
            if value not in allowed:
                raise ValueError(f"unknown {field_name} {value!r}; allowed: {', '.join(allowed)}")

    @classmethod
    def from_info(cls, info: dict) -> DatasetFormat:
        """The format a dataset's build info or a checkpoint's record names. Artifacts written before
        the format was recorded were rendered as a table with the teacher's full reasoning."""
        return cls(info.get("prompt_format") or "table", info.get("reasoning") or "full")

    @property
    def chat(self) -> bool:
        """One growing conversation per episode (a row is a week), not one row per decision."""
        return self.prompt_format in CHAT_FORMATS

    def as_dict(self) -> dict:
        return {"prompt_format": self.prompt_format, "reasoning": self.reasoning}
