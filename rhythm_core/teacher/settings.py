"""Who the teacher is and how to reach it: `TeacherSettings` (backend, model, endpoint, concurrency,
retries, completion budget, prices, cost limit), validated when built, and the model-name rule
(`is_reasoning_model`) that picks a reasoning model's defaults (`max_completion_tokens`, no
temperature, a 4,000-token budget; see `openai_client` for how the endpoint's answers correct them).

Apart from the code that plays episodes so the CLI, the Dagster resource and the evaluation can
build and check settings without the OpenAI client or the async runner.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from urllib.parse import urlparse

from rhythm_env.protocol import PROMPT_FORMATS

from ..errors import UserError


class MissingAPIKey(UserError, ValueError):
    """A paid teacher backend was asked for without its API key."""

# The offline teachers (free, played in lockstep: teacher/offline.py) and the version of each one's
# play, recorded as its model: a new version of a teacher's play gets a new name, so its records
# say which play they hold and an earlier version's work file is never resumed (`play_key`).
# bayes-kalman-2 (bayes_v3): the planner scores paths with grader v3's score-to-go (2026-11-26).
OFFLINE_MODELS = {"bayes": "bayes-kalman-1", "bayes_v3": "bayes-kalman-2", "search": "search-mc-1"}
BACKENDS = (*OFFLINE_MODELS, "openai", "azure")
# The teacher played where none is named (TeacherSettings, the CLI's --backend, the Dagster teacher
# resource, a `rhythm distill` preset without one): the search teacher, which the demo distils.
DEFAULT_BACKEND = "search"

REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high")
STRUCTURED_OUTPUT_MODES = ("auto", "on", "off")
DEFAULT_MAX_TOKENS = 400  # room over a chat model's answer (its tokens per answer: teacher_cost_table.json)
DEFAULT_REASONING_MAX_TOKENS = 4_000  # a reasoning model also spends the budget on hidden reasoning
_REASONING_NAME = re.compile(r"(?:^|[^a-z0-9])(?:o[1-9]|gpt-5)(?:[^0-9]|$)")


def is_reasoning_model(model: str) -> bool:
    """The model-name rule: GPT-5.x and o-series names (o1, o3-mini, o4-mini, gpt-5.4, an Azure
    deployment named "prod-gpt-5.4", a routed "openai/o3") are reasoning models. A name the rule
    misses (an Azure deployment called "teacher") is corrected by the first 400 (`openai_client` module docstring)."""
    return bool(_REASONING_NAME.search((model or "").lower()))


@dataclass
class TeacherSettings:
    """How to reach the teacher. `api_key` is a secret: never logged, never written.

    `temperature` and `max_tokens` None pick the model's defaults (`is_reasoning_model`): 0.0 and 400 for
    chat models; no temperature and 4,000 tokens (sent as `max_completion_tokens`) for reasoning
    models. `reasoning_effort` (none | minimal | low | medium | high) is sent only when set.
    `price_cached_input_per_m` None bills cached prompt tokens at the uncached rate.
    `structured_output`: "auto" asks for the strict JSON schema and falls back to the free-text
    protocol for the run if the endpoint answers 400 to it; "on" requires it; "off" never asks.
    """

    backend: str = DEFAULT_BACKEND  # search | bayes | bayes_v3 (offline) | openai | azure
    model: str = ""
    base_url: str | None = None  # OpenAI-compatible endpoint (openai backend)
    api_key: str | None = field(default=None, repr=False)
    azure_endpoint: str | None = None
    azure_api_version: str = "2024-10-21"
    concurrency: int = 8
    api_key_env: str = "OPENAI_API_KEY"  # the variable the key comes from, named in errors (never the key)
    request_timeout_s: float = 60.0
    connect_budget_s: float = 30.0  # the run fails once the endpoint stayed unreachable this long
    max_retries: int = 6  # per request, on 429, 5xx, timeouts and connection errors
    backoff_base_s: float = 1.0
    backoff_cap_s: float = 60.0
    max_invalid_reasks: int = 2  # re-asks of an unusable answer before the safe fallback action
    max_length_reasks: int = 2  # re-asks with a doubled budget of an answer cut empty by the budget
    temperature: float | None = None
    max_tokens: int | None = None  # completion budget (max_completion_tokens or max_tokens on the wire)
    reasoning_effort: str | None = None
    structured_output: str = "auto"
    prompt_format: str = "table"  # how request_messages renders a step (recorded in the JSONL's protocol)
    price_input_per_m: float = 0.0  # USD per 1M uncached prompt tokens
    price_cached_input_per_m: float | None = None  # USD per 1M cached prompt tokens; None: the uncached rate
    price_output_per_m: float = 0.0  # USD per 1M completion tokens (reasoning tokens included)
    max_cost_usd: float | None = None

    def __post_init__(self):
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown teacher backend {self.backend!r}; allowed: {', '.join(BACKENDS)}")
        if not self.offline and not self.model:
            raise ValueError(f"the {self.backend} teacher backend needs a model name")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        for name in ("request_timeout_s", "connect_budget_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a number of seconds > 0, got {value}")
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.temperature is not None and not (math.isfinite(self.temperature) and 0 <= self.temperature <= 2):
            raise ValueError(f"temperature must be between 0 and 2 (or unset), got {self.temperature}")
        if self.max_cost_usd is not None and not (math.isfinite(self.max_cost_usd) and self.max_cost_usd > 0):
            raise ValueError(f"max_cost_usd must be a number of dollars > 0 (or unset), got {self.max_cost_usd}")
        if self.backend == "azure" and not self.azure_endpoint:
            raise ValueError("the azure teacher backend needs azure_endpoint (https://<resource>.openai.azure.com)")
        if self.base_url is not None and not re.match(r"^https?://[^/\s]+", self.base_url):
            raise ValueError(f"base_url must be an http(s) URL such as http://127.0.0.1:8000/v1, got {self.base_url!r}")
        if self.reasoning_effort is not None and self.reasoning_effort not in REASONING_EFFORTS:
            raise ValueError(f"reasoning_effort {self.reasoning_effort!r} is not one of {', '.join(REASONING_EFFORTS)} "
                             "(or unset)")
        if self.structured_output not in STRUCTURED_OUTPUT_MODES:
            raise ValueError(f"structured_output {self.structured_output!r} is not one of "
                             f"{', '.join(STRUCTURED_OUTPUT_MODES)}")
        if self.prompt_format not in PROMPT_FORMATS:
            raise ValueError(f"prompt_format {self.prompt_format!r} is not one of {', '.join(PROMPT_FORMATS)}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1 (or unset), got {self.max_tokens}")
        for name in ("price_input_per_m", "price_cached_input_per_m", "price_output_per_m"):
            value = getattr(self, name)
            if value is not None and (not math.isfinite(value) or value < 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value}")

    @property
    def offline(self) -> bool:
        """An offline teacher (an agent of this package, free) rather than a model behind an endpoint."""
        return self.backend in OFFLINE_MODELS

    @property
    def local_endpoint(self) -> bool:
        """Whether the endpoint is a server on this machine (vLLM, a test server), which may need no key."""
        host = urlparse(self.base_url).hostname if self.base_url else None
        return host in ("localhost", "::1") or bool(host and host.startswith("127."))

    def check_credentials(self) -> None:
        """Refuse a paid backend without its key before any request, naming the variable to set."""
        if not self.offline and not self.api_key and not self.local_endpoint:
            where = self.azure_endpoint if self.backend == "azure" else (self.base_url or "https://api.openai.com/v1")
            raise MissingAPIKey(f"the {self.backend} teacher at {where} needs an API key: set {self.api_key_env} "
                                "(or name another variable with --api-key-env)")

    @property
    def reasoning_model(self) -> bool:
        return not self.offline and is_reasoning_model(self.model)

    @property
    def completion_budget(self) -> int:
        if self.max_tokens is not None:
            return self.max_tokens
        return DEFAULT_REASONING_MAX_TOKENS if self.reasoning_model else DEFAULT_MAX_TOKENS

    @property
    def cached_price_per_m(self) -> float:
        return self.price_input_per_m if self.price_cached_input_per_m is None else self.price_cached_input_per_m

    @property
    def teacher_id(self) -> str:
        return self.backend if self.offline else f"{self.backend}:{self.model}"

    @property
    def play_key(self) -> str:
        """What decides the episodes this teacher plays, for the keys of resumable work files: an
        offline teacher's id and play version (a new version starts a new file), a model's id."""
        return f"{self.teacher_id}:{OFFLINE_MODELS[self.backend]}" if self.offline else self.teacher_id

    def describe(self) -> dict:
        """The teacher's identity for records and metadata (no secret)."""
        model = OFFLINE_MODELS[self.backend] if self.offline else self.model
        return {"backend": self.backend, "model": model, "id": self.teacher_id}
