"""The OpenAI-compatible teacher (OpenAI, Azure OpenAI, vLLM, any chat-completions server): the async
client, the runner that plays one episode with it (one request per step, re-asks of an unusable
answer), its retries (429, 5xx, timeouts and connection errors, `Retry-After` honoured) and how it
learns the shape of a request from the endpoint's 400s. The fan-out over seeds, the resume and the
cost guard's episode admission are in `run`.

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
import math
import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from rhythm_env.protocol import ANSWER_RESPONSE_FORMAT, fallback_action, parse_answer, render_conversation
from rhythm_env.sim import RhythmEnv
from rhythm_env.sim.spec import BELIEF_DIMS, STEPS_PER_EPISODE

from ..errors import UserError
from .budget import CostBudget, add_usage, zero_usage
from .records import episode_record, step_record, teacher_protocol
from .settings import TeacherSettings

REASK = (
    "Your last answer could not be used: {error}. Reply with exactly one JSON object "
    '{{"reasoning": ..., "belief": {{"social": ..., "morning": ..., "work": ...}}, "action": ...}} and nothing else.'
)


class TeacherRequestError(RuntimeError):
    """A request still failed after every retry: its episode's seed is counted as failed and the run
    goes on."""


class TeacherRequestRejected(UserError, ValueError):
    """The endpoint refused a request in a way no change of parameters fixes (HTTP 4xx): the run
    stops at once with the server's own message; episodes already written are kept."""


class EndpointUnreachable(TeacherRequestRejected):
    """No connection to the endpoint could be made within the run's connect budget."""


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


def make_client(settings: TeacherSettings):
    """The async OpenAI (or Azure OpenAI) client. Retries are ours (counted, Retry-After honoured)."""
    import openai

    settings.check_credentials()
    if settings.backend == "azure":
        return openai.AsyncAzureOpenAI(
            azure_endpoint=settings.azure_endpoint, api_version=settings.azure_api_version,
            api_key=settings.api_key, max_retries=0, timeout=settings.request_timeout_s,
        )
    return openai.AsyncOpenAI(
        base_url=settings.base_url, api_key=settings.api_key or "no-key", max_retries=0,  # a local server (check_credentials)
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


class OpenAIRunner:
    """Plays episodes against one endpoint with one client, one request shape and one cost budget,
    shared by every episode of a run (their requests and retries are counted here)."""

    def __init__(self, settings: TeacherSettings, client, budget: CostBudget, log):
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
        self.unreachable_since: float | None = None  # first connection failure since the last answer

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
        if status in (401, 403):
            hint = f"check the API key in {self.settings.api_key_env} (--api-key-env names another variable)"
        if param in self.shape.learned:
            hint = f"{param} was already adapted once in this run"
        return TeacherRequestRejected(
            f"the {self.settings.backend} endpoint rejected the request for model {self.settings.model!r} "
            f"({_request_label(seed)}; HTTP {status}{where}): {message}" + (f" [{hint}]" if hint else ""))

    def _connect_budget_left(self, exc, seed: int) -> float | None:
        """Seconds left before an endpoint that cannot be reached at all fails the whole run (None for
        other transient errors); one budget for the run, not retries per episode."""
        import openai

        if not isinstance(exc, openai.APIConnectionError) or isinstance(exc, openai.APITimeoutError):
            return None
        now = time.monotonic()
        if self.unreachable_since is None:
            self.unreachable_since = now
        left = self.settings.connect_budget_s - (now - self.unreachable_since)
        if left <= 0:
            where = self.settings.azure_endpoint if self.settings.backend == "azure" else self.settings.base_url
            if self.rejected is None:
                self.rejected = EndpointUnreachable(
                    f"cannot reach the {self.settings.backend} endpoint {where or 'https://api.openai.com/v1'} "
                    f"({type(exc).__name__}: {exc}) for {self.settings.connect_budget_s:g} s "
                    f"({_request_label(seed)}); check --base-url, or raise --connect-budget")
            raise self.rejected
        return left

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
                wait_left = self._connect_budget_left(exc, seed)
                if attempt == s.max_retries:
                    raise TeacherRequestError(f"{_request_label(seed)}: gave up after {s.max_retries} retries: "
                                              f"{type(exc).__name__}: {exc}") from None
                delay = _retry_after(exc)
                if delay is None:
                    delay = min(s.backoff_cap_s, s.backoff_base_s * 2**attempt) * (0.5 + self.rng.random())
                if wait_left is not None:
                    delay = min(delay, wait_left)
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
            self.unreachable_since = None
            used = _read_usage(response.usage)
            add_usage(usage, used)
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
        """One episode on `seed` and its record: a request per step, an unusable answer re-asked up to
        `max_invalid_reasks` times and then replaced by the safe fallback action (counted invalid)."""
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
                add_usage(usage, used)
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
            steps.append(step_record(t, history[-1], prompt, raw, parsed, action, invalid, attempts, obs.meters, usage))
            history.append(obs)
            add_usage(totals, usage)
        episode_usage = {**totals, "cost_usd": round(self.budget.usage_cost(totals), 6)}
        request = {"token_param": self.shape.token_param, "temperature": self.shape.temperature,
                   "reasoning_effort": settings.reasoning_effort, "max_tokens": settings.completion_budget}
        return episode_record(settings.describe(), condition, seed, steps, env.vector.meters_history[0], beliefs,
                              episode_usage, protocol=teacher_protocol(settings, structured_output=structured == {True}),
                              request=request, purpose=purpose)


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
