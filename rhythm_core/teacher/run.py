"""Teachers play episodes and write their reasoning: the Bayesian teacher (offline, free) or any
OpenAI-compatible chat model (paid). Safe against a paid API: complete episodes are appended to a
JSONL file as they finish, so a crash loses only the episodes in flight, a restart resumes, no seed
is written twice, and a cost guard stops before overspending.

Reasoning models (GPT-5.x, o-series, and their Azure deployments) take `max_completion_tokens`
instead of `max_tokens`, accept only their default temperature, spend part of the completion budget
on hidden reasoning, and bill cached prompt tokens at a lower rate. How a request is shaped (see
`RequestShape`):

1. A model-name rule gives the starting shape: a reasoning model (`is_reasoning_model`) gets
   `max_completion_tokens`, no `temperature` and a 4,000-token budget; any other model gets
   `max_tokens`, `temperature=0.0` and 400 tokens (as before), unless the settings say otherwise.
2. Until the first answer comes back, requests go out one at a time. An HTTP 400 that names a
   parameter we chose ourselves (the server's `param`, or the parameter its message names) is
   learned once for the whole run: `max_tokens` <-> `max_completion_tokens`, a default temperature
   or `seed` is dropped, `response_format` is dropped when `structured_output` is "auto". The request
   is then sent again (a 400 is not billed).
3. Anything else fails the run fast with the server's own message (`TeacherRequestRejected`): an
   unknown model, a value the user set explicitly (`temperature`, `reasoning_effort`,
   `structured_output: on`), or the same parameter rejected twice.

An answer whose content is empty because the completion budget ran out (`finish_reason: "length"`,
typically all of it spent on reasoning) is counted (`length_reasks`) and asked again with twice the
budget, up to `max_length_reasks` times; only then does the step go through the usual invalid-answer
path (re-asks, then the counted fallback action). Usage records the billed split: `prompt_tokens`
(of which `cached_prompt_tokens`), `completion_tokens` (of which `reasoning_tokens`).
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import math
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..agents import BayesAgent
from ..env import RhythmEnv, VectorRhythmEnv
from ..env.conditions import check_seed
from ..env.spec import ACTIONS, BELIEF_DIMS, ENV_VERSION, METERS, STEPS_PER_EPISODE, belief_to_dict
from ..protocol import (
    ANSWER_RESPONSE_FORMAT,
    PROMPT_FORMATS,
    SYSTEM_PROMPT,
    fallback_action,
    format_answer,
    parse_answer,
    render_conversation,
    render_user_prompt,
)
from .trajectories import SCHEMA, TrajectoryWriter

BAYES_MODEL = "bayes-kalman-1"
SYSTEM_PROMPT_SHA256 = hashlib.sha256(SYSTEM_PROMPT.encode()).hexdigest()
REASK = (
    "Your last answer could not be used: {error}. Reply with exactly one JSON object "
    '{{"reasoning": ..., "belief": {{"social": ..., "morning": ..., "work": ...}}, "action": ...}} and nothing else.'
)


REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high")
STRUCTURED_OUTPUT_MODES = ("auto", "on", "off")
DEFAULT_MAX_TOKENS = 400  # a chat model's answer is ~60-120 tokens
DEFAULT_REASONING_MAX_TOKENS = 4_000  # a reasoning model also spends the budget on hidden reasoning
_REASONING_NAME = re.compile(r"(?:^|[^a-z0-9])(?:o[1-9]|gpt-5)(?:[^0-9]|$)")


def is_reasoning_model(model: str) -> bool:
    """The model-name rule: GPT-5.x and o-series names (o1, o3-mini, o4-mini, gpt-5.4, an Azure
    deployment named "prod-gpt-5.4", a routed "openai/o3") are reasoning models. A name the rule
    misses (an Azure deployment called "teacher") is corrected by the first 400 (module docstring)."""
    return bool(_REASONING_NAME.search((model or "").lower()))


@dataclass
class TeacherSettings:
    """How to reach the teacher. `api_key` is a secret: never logged, never written.

    `temperature` and `max_tokens` None pick the model's defaults (module docstring): 0.0 and 400 for
    chat models; no temperature and 4,000 tokens (sent as `max_completion_tokens`) for reasoning
    models. `reasoning_effort` (none | minimal | low | medium | high) is sent only when set.
    `price_cached_input_per_m` None bills cached prompt tokens at the uncached rate.
    `structured_output`: "auto" asks for the strict JSON schema and falls back to the free-text
    protocol for the run if the endpoint answers 400 to it; "on" requires it; "off" never asks.
    """

    backend: str = "bayes"  # bayes | openai | azure
    model: str = ""
    base_url: str | None = None  # OpenAI-compatible endpoint (openai backend)
    api_key: str | None = field(default=None, repr=False)
    azure_endpoint: str | None = None
    azure_api_version: str = "2024-10-21"
    concurrency: int = 8
    request_timeout_s: float = 60.0
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
        if self.backend not in ("bayes", "openai", "azure"):
            raise ValueError(f"unknown teacher backend {self.backend!r}; allowed: bayes, openai, azure")
        if self.backend != "bayes" and not self.model:
            raise ValueError(f"the {self.backend} teacher backend needs a model name")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
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
    def reasoning_model(self) -> bool:
        return self.backend != "bayes" and is_reasoning_model(self.model)

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
        return "bayes" if self.backend == "bayes" else f"{self.backend}:{self.model}"

    def describe(self) -> dict:
        """The teacher's identity for records and metadata (no secret)."""
        model = BAYES_MODEL if self.backend == "bayes" else self.model
        return {"backend": self.backend, "model": model, "id": self.teacher_id}


USAGE_KEYS = ("prompt_tokens", "cached_prompt_tokens", "completion_tokens", "reasoning_tokens", "requests",
              "retries", "length_reasks")


def zero_usage() -> dict:
    return dict.fromkeys(USAGE_KEYS, 0)


@dataclass
class TeacherRunResult:
    path: Path
    requested: int
    written: int  # episodes written by this run
    skipped: int  # already in the file (resume)
    failed_seeds: list[int]
    stopped_reason: str | None  # "max_cost_usd" when the cost guard stopped the run
    steps: int
    invalid_steps: int
    prompt_tokens: int
    completion_tokens: int
    requests: int
    retries: int
    cost_usd: float
    wall_s: float
    dropped_tail: bool
    cached_prompt_tokens: int = 0
    reasoning_tokens: int = 0
    length_reasks: int = 0  # answers cut empty by the completion budget, asked again with a larger one
    request_shape: dict | None = None  # what the requests finally sent (openai/azure backends)

    @property
    def invalid_rate(self) -> float:
        return self.invalid_steps / self.steps if self.steps else 0.0

    @property
    def cache_hit_fraction(self) -> float:
        """Cached prompt tokens / prompt tokens of the episodes this run wrote."""
        return self.cached_prompt_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


class BudgetExceeded(RuntimeError):
    pass


class TeacherRequestError(RuntimeError):
    pass


class TeacherRequestRejected(ValueError):
    """The endpoint refused a request in a way no change of parameters fixes (HTTP 4xx): the run
    stops at once with the server's own message; episodes already written are kept."""


class CostBudget:
    """Keeps spend under max_cost_usd without wasting money on episodes that cannot finish.

    An episode starts only if its estimated cost fits in what is left after the spend and the
    estimates of the episodes in flight (an upper bound until one episode has finished, then 1.25x
    the mean real cost), so a run never pays for a half episode it must throw away. Each request
    also reserves its own worst case (every prompt token uncached, the whole completion budget
    used) before it is sent, as a hard guard under concurrency. Spend is what the API bills:
    uncached prompt tokens, cached prompt tokens at their own rate, completion tokens (reasoning
    tokens are part of them).
    """

    SAFETY = 1.25
    PROMPT_CHARS_BOUND = 6_000  # a full 28-step prompt (system + history) stays below this

    def __init__(self, settings: TeacherSettings):
        self.max = settings.max_cost_usd
        self.price_in = settings.price_input_per_m / 1e6
        self.price_cached = settings.cached_price_per_m / 1e6
        self.price_out = settings.price_output_per_m / 1e6
        self.max_tokens = settings.completion_budget
        self.spent = 0.0
        self.reserved = 0.0  # in-flight requests
        self.episodes_reserved = 0.0  # in-flight episodes
        self.episode_costs: list[float] = []

    def cost(self, prompt_tokens: int, completion_tokens: int, cached_prompt_tokens: int = 0) -> float:
        cached = min(cached_prompt_tokens, prompt_tokens)
        return (prompt_tokens - cached) * self.price_in + cached * self.price_cached + completion_tokens * self.price_out

    def usage_cost(self, usage: dict) -> float:
        return self.cost(usage["prompt_tokens"], usage["completion_tokens"], usage.get("cached_prompt_tokens", 0))

    def _request_bound(self, chars: int, max_tokens: int | None = None) -> float:
        # >= 2 chars per token: an upper bound
        return self.cost(chars // 2 + 16, self.max_tokens if max_tokens is None else max_tokens)

    def episode_estimate(self) -> float:
        if self.episode_costs:
            return self.SAFETY * sum(self.episode_costs) / len(self.episode_costs)
        return STEPS_PER_EPISODE * self._request_bound(self.PROMPT_CHARS_BOUND)

    def admit_episode(self) -> float:
        estimate = self.episode_estimate()
        if self.max is not None and self.spent + self.episodes_reserved + estimate > self.max:
            raise BudgetExceeded(f"another episode could cost ${estimate:.4f}; spent ${self.spent:.4f} of "
                                 f"${self.max:.2f} with ${self.episodes_reserved:.4f} reserved for episodes in flight")
        self.episodes_reserved += estimate
        return estimate

    def finish_episode(self, estimate: float, actual: float | None) -> None:
        self.episodes_reserved -= estimate
        if actual is not None:
            self.episode_costs.append(actual)

    def reserve(self, messages: list[dict], max_tokens: int | None = None, extra_chars: int = 0) -> float:
        estimate = self._request_bound(sum(len(m["content"]) for m in messages) + extra_chars, max_tokens)
        if self.max is not None and self.spent + self.reserved + estimate > self.max:
            raise BudgetExceeded(f"the next request could cost ${estimate:.4f}; spent ${self.spent:.4f} of ${self.max:.2f}")
        self.reserved += estimate
        return estimate

    def settle(self, estimate: float, actual: float) -> None:
        self.reserved -= estimate
        self.spent += actual


# ---------------------------------------------------------------------------------------------
def _step_record(t, obs, prompt, raw, parsed, action, invalid, attempts, meters_after, usage) -> dict:
    return {
        "step": t,
        "observation": obs.to_dict(),
        "prompt": prompt,
        "raw_answer": raw,
        "parsed": {
            "valid": parsed.valid,
            "action": parsed.action,
            "belief": parsed.belief,
            "reasoning": parsed.reasoning,
            "error": parsed.error,
        },
        "action": action,
        "invalid": invalid,
        "attempts": attempts,
        "meters_after": {m: float(v) for m, v in zip(METERS, meters_after)},
        "usage": usage,
    }


def _episode_record(settings, condition, seed, steps, meters, beliefs, usage, *, protocol=None, request=None,
                    purpose=None) -> dict:
    # No timing in the record: the same teacher on the same seed must give the same bytes.
    record = {
        "schema": SCHEMA,
        "env_version": ENV_VERSION,
        "condition": condition,
        "seed": int(seed),
        "teacher": settings.describe(),
        "protocol": {"system_prompt_sha256": SYSTEM_PROMPT_SHA256, "prompt_format": settings.prompt_format,
                     **(protocol or {})},
        "steps": steps,
        "actions": [s["action"] for s in steps],
        "beliefs": beliefs,
        "invalid": [s["invalid"] for s in steps],
        "meters": [[float(v) for v in row] for row in meters],
        "usage": usage,
    }
    if request is not None:
        record["request"] = request
    if purpose is not None:
        record["purpose"] = purpose
    return record


def _bayes_step_record(t: int, history, decision, i: int, action: str, invalid: bool, meters_after) -> dict:
    """Step t's record of episode i with the Bayesian teacher's answer (`decision`, its `act` at
    history[-1]) as the answer; `action` and `invalid` are what was executed."""
    belief = belief_to_dict(np.round(decision.beliefs[i], 2))
    raw = format_answer(ACTIONS[decision.actions[i]], belief, decision.reasoning[i])
    return _step_record(t, history[-1], render_user_prompt(history), raw, parse_answer(raw), action, invalid, 1,
                        meters_after, zero_usage())


def bayes_records(settings: TeacherSettings, condition: str, seeds: np.ndarray, purpose: str | None = None) -> list[dict]:
    """Play the Bayesian teacher on a chunk of seeds in lockstep and build their records."""
    env = VectorRhythmEnv(condition)
    obs, _ = env.reset(seeds)
    agent = BayesAgent(explain=True)
    agent.reset(env)
    n = len(seeds)
    histories = [[obs.item(i)] for i in range(n)]
    steps: list[list[dict]] = [[] for _ in range(n)]
    beliefs: list[list[dict]] = [[] for _ in range(n)]
    for t in range(STEPS_PER_EPISODE):
        decision = agent.act(obs)
        obs, *_ = env.step(decision.actions)
        invalid = decision.invalid if decision.invalid is not None else np.zeros(n, dtype=bool)
        for i in range(n):
            steps[i].append(_bayes_step_record(t, histories[i], decision, i, ACTIONS[decision.actions[i]],
                                               bool(invalid[i]), obs.meters[i]))
            beliefs[i].append(steps[i][-1]["parsed"]["belief"])
            histories[i].append(obs.item(i))
    return [
        _episode_record(settings, condition, seeds[i], steps[i], env.meters_history[i], beliefs[i],
                        {**zero_usage(), "cost_usd": 0.0}, purpose=purpose)
        for i in range(n)
    ]


def request_messages(history, answers: Sequence[str], prompt_format: str = "table") -> list[dict]:
    """The chat messages of the request for the decision at history[-1] — the one place a request's
    messages are built, so another prompt format plugs in here.

    `answers` are the teacher's raw answers to the earlier steps of this episode ("chat" replays them
    as assistant turns; "table" does not need them). For prefix caching, every format makes step t+1's
    messages extend step t's as far as possible: "table" sends the fixed system prompt, then a user
    message whose week table only grows (one row per step), so consecutive requests share everything
    up to the new row; "chat" is one conversation that only grows.
    """
    return render_conversation(history, list(answers), prompt_format=prompt_format)


# ---------------------------------------------------------------------------------------------
def make_client(settings: TeacherSettings):
    """The async OpenAI (or Azure OpenAI) client. Retries are ours (counted, Retry-After honoured)."""
    import openai

    if settings.backend == "azure":
        return openai.AsyncAzureOpenAI(
            azure_endpoint=settings.azure_endpoint, api_version=settings.azure_api_version,
            api_key=settings.api_key, max_retries=0, timeout=settings.request_timeout_s,
        )
    return openai.AsyncOpenAI(
        base_url=settings.base_url, api_key=settings.api_key or "not-needed", max_retries=0,
        timeout=settings.request_timeout_s,
    )


def request_seed(episode_seed: int, step: int) -> int:
    """The sampling seed of one request: distinct per episode and step, reproducible."""
    return episode_seed * 100 + step


def _request_label(seed: int) -> str:
    """What a user knows a request by: its episode seed and step (not the request's sampling seed)."""
    return f"episode seed {seed // 100}, step {seed % 100}"


def _retry_after(exc) -> float | None:
    """The delay the server asks for, in seconds; None when it names no usable one (a malformed or
    non-finite header must fall back to our backoff, not crash the run or sleep forever)."""
    response = getattr(exc, "response", None)
    if response is None:
        return None
    headers = response.headers
    if headers.get("retry-after-ms"):
        try:
            seconds = float(headers["retry-after-ms"]) / 1000.0
            if math.isfinite(seconds):
                return max(0.0, seconds)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        seconds = float(value)
        return max(0.0, seconds) if math.isfinite(seconds) else None
    except ValueError:
        pass
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return max(0.0, parsed.timestamp() - time.time()) if parsed else None


_PARAM_NAMES = ("max_completion_tokens", "max_tokens", "temperature", "seed", "response_format", "reasoning_effort")
_PARAM_IN_MESSAGE = re.compile(r"\b(" + "|".join(_PARAM_NAMES) + r"|json_schema)\b")


def _error_fields(exc) -> tuple[str | None, str | None, str]:
    """(param, code, message) of an OpenAI-style error: the body's `param` when it names one, else the
    first request parameter the message mentions (some servers leave `param` null)."""
    body = getattr(exc, "body", None)
    message = body.get("message") if isinstance(body, dict) and isinstance(body.get("message"), str) else str(exc)
    param = getattr(exc, "param", None)
    if not param:
        found = _PARAM_IN_MESSAGE.search(message)
        param = found.group(1) if found else None
    if param == "json_schema" or (param or "").startswith("response_format"):
        param = "response_format"
    return param, getattr(exc, "code", None), message


@dataclass
class RequestShape:
    """The parameters every request of a run sends, learned once per run (module docstring)."""

    token_param: str  # "max_completion_tokens" | "max_tokens"
    temperature: float | None  # None: not sent (the model's default)
    temperature_explicit: bool
    seed: bool
    structured: bool
    confirmed: bool = False  # a request with this shape has been answered
    learned: list[str] = field(default_factory=list)

    @classmethod
    def initial(cls, settings: TeacherSettings) -> RequestShape:
        reasoning = settings.reasoning_model
        temperature = settings.temperature if settings.temperature is not None else (None if reasoning else 0.0)
        return cls(token_param="max_completion_tokens" if reasoning else "max_tokens", temperature=temperature,
                   temperature_explicit=settings.temperature is not None, seed=True,
                   structured=settings.structured_output != "off")

    def describe(self) -> dict:
        return {"token_param": self.token_param, "temperature": self.temperature, "seed": self.seed,
                "structured_output": self.structured, "learned": list(self.learned)}

    def adapt(self, settings: TeacherSettings, param: str | None) -> str | None:
        """Change the shape so the rejected `param` goes away; returns what changed, or None when no
        change of ours can fix it (the parameter is the user's explicit choice, or was already changed)."""
        if param is None or param in self.learned:
            return None
        if param == "max_tokens" and self.token_param == "max_tokens":
            self.token_param = "max_completion_tokens"
        elif param == "max_completion_tokens" and self.token_param == "max_completion_tokens":
            self.token_param = "max_tokens"
        elif param == "temperature" and self.temperature is not None and not self.temperature_explicit:
            self.temperature = None
        elif param == "seed" and self.seed:
            self.seed = False
        elif param == "response_format" and self.structured and settings.structured_output == "auto":
            self.structured = False
        else:
            return None
        self.learned.append(param)
        changes = {"max_tokens": "sending max_completion_tokens instead of max_tokens",
                   "max_completion_tokens": "sending max_tokens instead of max_completion_tokens",
                   "temperature": "leaving temperature at the model's default",
                   "seed": "not sending seed",
                   "response_format": "falling back to the free-text protocol (no structured output)"}
        return changes[param]


_HINTS = {
    "temperature": "temperature is set explicitly; unset it to use the model's default",
    "reasoning_effort": "unset reasoning_effort or pick a value this model supports",
    "response_format": "set structured_output to auto or off",
}


class _OpenAIRunner:
    def __init__(self, settings, client, budget, log):
        import openai

        self.settings, self.client, self.budget, self.log = settings, client, budget, log
        self.retryable = (openai.RateLimitError, openai.InternalServerError, openai.APITimeoutError,
                          openai.APIConnectionError)
        self.parameter_errors = (openai.BadRequestError, openai.UnprocessableEntityError)
        self.status_error = openai.APIStatusError
        self.requests = self.retries = 0
        self.rng = random.Random(0)
        self.shape = RequestShape.initial(settings)
        self._probe = asyncio.Lock()  # one request at a time until the shape is confirmed
        self.rejected: TeacherRequestRejected | None = None  # once set, no further request is sent

    def _kwargs(self, messages: list[dict], seed: int, budget: int) -> dict:
        s, shape = self.settings, self.shape
        kwargs = {"model": s.model, "messages": messages, shape.token_param: budget, "timeout": s.request_timeout_s}
        if shape.temperature is not None:
            kwargs["temperature"] = shape.temperature
        if shape.seed:
            kwargs["seed"] = seed
        if s.reasoning_effort is not None:
            kwargs["reasoning_effort"] = s.reasoning_effort
        if shape.structured:
            kwargs["response_format"] = ANSWER_RESPONSE_FORMAT
        return kwargs

    def _rejected(self, exc, seed: int) -> TeacherRequestRejected:
        param, code, message = _error_fields(exc)
        key = self.settings.api_key
        if key and len(key) >= 8:  # a server may echo the key back (401 bodies do, partly masked)
            for part in {key, key[-8:], key[:8]}:
                message = message.replace(part, "***")
        status = getattr(exc, "status_code", "?")
        where = "".join(f", {k} {v!r}" for k, v in (("param", param), ("code", code)) if v)
        hint = _HINTS.get(param, "")
        if param in self.shape.learned:
            hint = f"{param} was already adapted once in this run"
        return TeacherRequestRejected(
            f"the {self.settings.backend} endpoint rejected the request for model {self.settings.model!r} "
            f"({_request_label(seed)}; HTTP {status}{where}): {message}" + (f" [{hint}]" if hint else ""))

    async def chat(self, messages: list[dict], seed: int) -> tuple[str, dict]:
        """One answer. Until the first answer arrives requests go one at a time, so a parameter the
        endpoint rejects is learned once, not by every request in flight."""
        if not self.shape.confirmed:
            async with self._probe:
                if not self.shape.confirmed:
                    return await self._chat(messages, seed)
        return await self._chat(messages, seed)

    def _fail(self, exc, seed: int) -> TeacherRequestRejected:
        if self.rejected is None:
            self.rejected = self._rejected(exc, seed)
        return self.rejected

    async def _chat(self, messages: list[dict], seed: int) -> tuple[str, dict]:
        """Retries 429, 5xx, timeouts and connection errors (counted), adapts the request shape to a
        400 it can fix, and asks again with a doubled budget when the answer came back empty because
        the budget ran out. Returns (text, usage) summed over every billed response."""
        s = self.settings
        usage = zero_usage()
        budget = s.completion_budget
        attempt = 0  # transient failures so far
        while True:
            if self.rejected is not None:  # another request already failed the run
                raise self.rejected
            extra = len(str(ANSWER_RESPONSE_FORMAT)) if self.shape.structured else 0
            estimate = self.budget.reserve(messages, budget, extra)
            try:
                self.requests += 1
                usage["requests"] += 1
                response = await self.client.chat.completions.create(**self._kwargs(messages, seed, budget))
            except self.retryable as exc:
                self.budget.settle(estimate, 0.0)
                if attempt == s.max_retries:
                    raise TeacherRequestError(f"{_request_label(seed)}: gave up after {s.max_retries} retries: "
                                              f"{type(exc).__name__}: {exc}") from None
                delay = _retry_after(exc)
                if delay is None:
                    delay = min(s.backoff_cap_s, s.backoff_base_s * 2**attempt) * (0.5 + self.rng.random())
                attempt += 1
                self.retries += 1
                usage["retries"] += 1
                self.log(f"{_request_label(seed)}: {type(exc).__name__}, retry {attempt}/{s.max_retries} in {delay:.2f}s")
                await asyncio.sleep(delay)
                continue
            except self.parameter_errors as exc:
                self.budget.settle(estimate, 0.0)
                param, _code, _message = _error_fields(exc)
                change = self.shape.adapt(s, param)
                if change is None:
                    raise self._fail(exc, seed) from None
                self.log(f"the endpoint rejected {param!r} ({type(exc).__name__}); {change} for the rest of this run")
                continue
            except self.status_error as exc:  # 401, 403, 404, ...: no retry and no change of ours helps
                self.budget.settle(estimate, 0.0)
                raise self._fail(exc, seed) from None
            except BaseException:
                self.budget.settle(estimate, 0.0)
                raise
            used = _read_usage(response.usage)
            for k in ("prompt_tokens", "cached_prompt_tokens", "completion_tokens", "reasoning_tokens"):
                usage[k] += used[k]
            self.budget.settle(estimate, self.budget.usage_cost(used))
            self.shape.confirmed = True
            choice = response.choices[0] if response.choices else None
            content = (choice.message.content if choice is not None else None) or ""
            if choice is not None and choice.finish_reason == "length" and not content.strip():
                if usage["length_reasks"] < s.max_length_reasks:
                    usage["length_reasks"] += 1
                    budget *= 2
                    self.log(f"seed {seed}: empty answer, the completion budget ran out (finish_reason length, "
                             f"{used['reasoning_tokens']} reasoning tokens); asking again with {budget} tokens")
                    continue
                self.log(f"seed {seed}: still an empty answer at {budget} completion tokens; counted as invalid")
            refusal = getattr(choice.message, "refusal", None) if choice is not None else None
            if not content and refusal:
                content = f"(refusal) {refusal}"
            return content, usage

    async def episode(self, condition: str, seed: int, settings: TeacherSettings, purpose: str | None = None) -> dict:
        env = RhythmEnv(condition)
        obs, _ = env.reset(seed=seed)
        history = [obs]
        steps, beliefs, answers = [], [], []
        totals = zero_usage()
        last_belief = None
        structured = set()
        for t in range(STEPS_PER_EPISODE):
            messages = request_messages(history, answers, settings.prompt_format)
            prompt = messages[-1]["content"]
            usage = zero_usage()
            attempts = 0
            while True:
                attempts += 1
                raw, used = await self.chat(messages, request_seed(seed, t))
                structured.add(self.shape.structured)
                for k in usage:
                    usage[k] += used[k]
                parsed = parse_answer(raw)
                if parsed.valid or attempts > settings.max_invalid_reasks:
                    break
                messages = messages + [
                    {"role": "assistant", "content": raw},
                    {"role": "user", "content": REASK.format(error=parsed.error)},
                ]
            invalid = not parsed.valid
            action = fallback_action(obs) if invalid else parsed.action
            if parsed.belief is not None:
                last_belief = {d: float(parsed.belief[d]) for d in BELIEF_DIMS}
            beliefs.append(last_belief)  # an invalid step keeps the last stated belief
            answers.append(raw)
            obs, *_ = env.step(action)
            steps.append(_step_record(t, history[-1], prompt, raw, parsed, action, invalid, attempts, obs.meters, usage))
            history.append(obs)
            for k in totals:
                totals[k] += usage[k]
        episode_usage = {**totals, "cost_usd": round(self.budget.usage_cost(totals), 6)}
        request = {"token_param": self.shape.token_param, "temperature": self.shape.temperature,
                   "reasoning_effort": settings.reasoning_effort, "max_tokens": settings.completion_budget}
        return _episode_record(settings, condition, seed, steps, env.vector.meters_history[0], beliefs, episode_usage,
                               protocol={"structured_output": structured == {True}}, request=request, purpose=purpose)


def _read_usage(usage) -> dict:
    """The billed split of one response's usage; absent details (older servers) count as 0."""
    prompt_details = getattr(usage, "prompt_tokens_details", None)
    completion_details = getattr(usage, "completion_tokens_details", None)
    return {
        "prompt_tokens": getattr(usage, "prompt_tokens", 0) or 0,
        "cached_prompt_tokens": getattr(prompt_details, "cached_tokens", 0) or 0,
        "completion_tokens": getattr(usage, "completion_tokens", 0) or 0,
        "reasoning_tokens": getattr(completion_details, "reasoning_tokens", 0) or 0,
    }


async def _run_openai(settings, condition, seeds, writer, client, on_episode, log, purpose=None) -> dict:
    budget = CostBudget(settings)
    runner = _OpenAIRunner(settings, client or make_client(settings), budget, log)
    semaphore = asyncio.Semaphore(settings.concurrency)
    state = {"stopped": None, "failed": [], "written": []}

    async def one(seed: int):
        async with semaphore:
            if state["stopped"]:
                return
            record = None
            try:
                estimate = budget.admit_episode()
            except BudgetExceeded as exc:
                if not state["stopped"]:
                    log(f"stopping before the cost limit: {exc}")
                state["stopped"] = "max_cost_usd"
                return
            try:
                record = await runner.episode(condition, seed, settings, purpose)
            except BudgetExceeded as exc:
                if not state["stopped"]:
                    log(f"stopping before the cost limit: {exc}")
                state["stopped"] = "max_cost_usd"
                return
            except TeacherRequestError as exc:
                log(str(exc))
                state["failed"].append(seed)
                return
            except TeacherRequestRejected:
                state["stopped"] = "rejected"
                raise
            finally:
                budget.finish_episode(estimate, record["usage"]["cost_usd"] if record else None)
            writer.write(record)
            state["written"].append(record)
            on_episode(record)

    try:
        await asyncio.gather(*(one(int(s)) for s in seeds))
    finally:
        if client is None:
            await runner.client.close()
    state.update(requests=runner.requests, retries=runner.retries, cost_usd=budget.spent,
                 request_shape=runner.shape.describe())
    return state


# ---------------------------------------------------------------------------------------------
def run_teacher(
    settings: TeacherSettings,
    condition: str,
    seeds: Sequence[int],
    out_path,
    *,
    client=None,
    on_episode: Callable[[dict], None] | None = None,
    log: Callable[[str], None] | None = None,
    chunk_size: int = 64,
    purpose: str | None = None,
) -> TeacherRunResult:
    """Play the teacher on every seed not yet in `out_path`, appending one line per episode.

    `client` injects an OpenAI-compatible async client (tests); by default one is built from the
    settings. `purpose` is stamped on every record when set ("evaluation" for the teacher's play on
    evaluation seeds, which the SFT dataset refuses). Returns counts, tokens, cost and what stopped
    the run, if anything. A request the endpoint rejects for good raises TeacherRequestRejected
    (episodes already written stay in the file).
    """
    start = time.perf_counter()
    seeds = [check_seed(condition, int(s)) for s in seeds]
    if len(set(seeds)) != len(seeds):
        raise ValueError("the seed list repeats a seed")
    on_episode = on_episode or (lambda record: None)
    log = log or (lambda message: None)
    with TrajectoryWriter(out_path) as writer:
        if writer.dropped_tail:
            log(f"{out_path}: dropped an incomplete last line left by an interrupted run; redoing that episode")
        todo = [s for s in seeds if not writer.has(condition, s)]
        skipped = len(seeds) - len(todo)
        if skipped:
            log(f"{out_path}: resuming, {skipped} of {len(seeds)} episodes already written")
        written: list[dict] = []
        if settings.backend == "bayes":
            state = {"stopped": None, "failed": [], "requests": 0, "retries": 0, "cost_usd": 0.0, "request_shape": None}
            for i in range(0, len(todo), chunk_size):
                for record in bayes_records(settings, condition, np.array(todo[i : i + chunk_size]), purpose):
                    writer.write(record)
                    written.append(record)
                    on_episode(record)
        else:
            state = asyncio.run(_run_openai(settings, condition, todo, writer, client, on_episode, log, purpose))
            written = state["written"]
    steps = len(written) * STEPS_PER_EPISODE

    def total(key: str) -> int:
        return sum(r["usage"].get(key, 0) for r in written)

    return TeacherRunResult(
        path=Path(out_path),
        requested=len(seeds),
        written=len(written),
        skipped=skipped,
        failed_seeds=sorted(state["failed"]),
        stopped_reason=state["stopped"],
        steps=steps,
        invalid_steps=sum(sum(r["invalid"]) for r in written),
        prompt_tokens=total("prompt_tokens"),
        completion_tokens=total("completion_tokens"),
        requests=state["requests"],
        retries=state["retries"],
        cost_usd=round(state["cost_usd"], 6),
        wall_s=round(time.perf_counter() - start, 3),
        dropped_tail=writer.dropped_tail,
        cached_prompt_tokens=total("cached_prompt_tokens"),
        reasoning_tokens=total("reasoning_tokens"),
        length_reasks=total("length_reasks"),
        request_shape=state["request_shape"],
    )
