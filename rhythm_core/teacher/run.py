"""Teachers play episodes and write their reasoning: the Bayesian teacher (offline, free) or any
OpenAI-compatible chat model (paid). Safe against a paid API: complete episodes are appended to a
JSONL file as they finish, so a crash loses only the episodes in flight, a restart resumes, no seed
is written twice, and a cost guard stops before overspending.
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..agents import BayesAgent
from ..env import RhythmEnv, VectorRhythmEnv
from ..env.conditions import check_seed
from ..env.spec import ACTIONS, BELIEF_DIMS, ENV_VERSION, METERS, STEPS_PER_EPISODE, belief_to_dict
from ..protocol import SYSTEM_PROMPT, fallback_action, format_answer, parse_answer, render_messages, render_user_prompt
from .trajectories import SCHEMA, TrajectoryWriter

BAYES_MODEL = "bayes-kalman-1"
SYSTEM_PROMPT_SHA256 = hashlib.sha256(SYSTEM_PROMPT.encode()).hexdigest()
REASK = (
    "Your last answer could not be used: {error}. Reply with exactly one JSON object "
    '{{"reasoning": ..., "belief": {{"social": ..., "morning": ..., "work": ...}}, "action": ...}} and nothing else.'
)


@dataclass
class TeacherSettings:
    """How to reach the teacher. `api_key` is a secret: never logged, never written."""

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
    temperature: float = 0.0
    max_tokens: int = 400
    price_input_per_m: float = 0.0  # USD per 1M prompt tokens
    price_output_per_m: float = 0.0  # USD per 1M completion tokens
    max_cost_usd: float | None = None

    def __post_init__(self):
        if self.backend not in ("bayes", "openai", "azure"):
            raise ValueError(f"unknown teacher backend {self.backend!r}; allowed: bayes, openai, azure")
        if self.backend != "bayes" and not self.model:
            raise ValueError(f"the {self.backend} teacher backend needs a model name")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")

    @property
    def teacher_id(self) -> str:
        return "bayes" if self.backend == "bayes" else f"{self.backend}:{self.model}"

    def describe(self) -> dict:
        """The teacher's identity for records and metadata (no secret)."""
        model = BAYES_MODEL if self.backend == "bayes" else self.model
        return {"backend": self.backend, "model": model, "id": self.teacher_id}


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

    @property
    def invalid_rate(self) -> float:
        return self.invalid_steps / self.steps if self.steps else 0.0


class BudgetExceeded(RuntimeError):
    pass


class TeacherRequestError(RuntimeError):
    pass


class CostBudget:
    """Keeps spend under max_cost_usd without wasting money on episodes that cannot finish.

    An episode starts only if its estimated cost fits in what is left after the spend and the
    estimates of the episodes in flight (an upper bound until one episode has finished, then 1.25x
    the mean real cost), so a run never pays for a half episode it must throw away. Each request
    also reserves its own worst case before it is sent, as a hard guard under concurrency.
    """

    SAFETY = 1.25
    PROMPT_CHARS_BOUND = 6_000  # a full 28-step prompt (system + history) stays below this

    def __init__(self, settings: TeacherSettings):
        self.max = settings.max_cost_usd
        self.price_in = settings.price_input_per_m / 1e6
        self.price_out = settings.price_output_per_m / 1e6
        self.max_tokens = settings.max_tokens
        self.spent = 0.0
        self.reserved = 0.0  # in-flight requests
        self.episodes_reserved = 0.0  # in-flight episodes
        self.episode_costs: list[float] = []

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return prompt_tokens * self.price_in + completion_tokens * self.price_out

    def _request_bound(self, chars: int) -> float:
        return self.cost(chars // 2 + 16, self.max_tokens)  # >= 2 chars per token: an upper bound

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

    def reserve(self, messages: list[dict]) -> float:
        estimate = self._request_bound(sum(len(m["content"]) for m in messages))
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


def _episode_record(settings, condition, seed, steps, meters, beliefs, usage) -> dict:
    # No timing in the record: the same teacher on the same seed must give the same bytes.
    return {
        "schema": SCHEMA,
        "env_version": ENV_VERSION,
        "condition": condition,
        "seed": int(seed),
        "teacher": settings.describe(),
        "protocol": {"system_prompt_sha256": SYSTEM_PROMPT_SHA256},
        "steps": steps,
        "actions": [s["action"] for s in steps],
        "beliefs": beliefs,
        "invalid": [s["invalid"] for s in steps],
        "meters": [[float(v) for v in row] for row in meters],
        "usage": usage,
    }


def _bayes_chunk(settings: TeacherSettings, condition: str, seeds: np.ndarray) -> list[dict]:
    """Play the Bayesian teacher on a chunk of seeds in lockstep and build their records."""
    env = VectorRhythmEnv(condition)
    obs, _ = env.reset(seeds)
    agent = BayesAgent(explain=True)
    agent.reset(env)
    n = len(seeds)
    histories = [[obs.item(i)] for i in range(n)]
    steps: list[list[dict]] = [[] for _ in range(n)]
    beliefs: list[list[dict]] = [[] for _ in range(n)]
    zero = {"prompt_tokens": 0, "completion_tokens": 0, "requests": 0, "retries": 0}
    for t in range(STEPS_PER_EPISODE):
        decision = agent.act(obs)
        obs, *_ = env.step(decision.actions)
        for i in range(n):
            action = ACTIONS[decision.actions[i]]
            belief = belief_to_dict(np.round(decision.beliefs[i], 2))
            raw = format_answer(action, belief, decision.reasoning[i])
            parsed = parse_answer(raw)
            prompt = render_user_prompt(histories[i])
            steps[i].append(_step_record(t, histories[i][-1], prompt, raw, parsed, action, False, 1, obs.meters[i], zero))
            beliefs[i].append(parsed.belief)
            histories[i].append(obs.item(i))
    usage = {"prompt_tokens": 0, "completion_tokens": 0, "requests": 0, "retries": 0, "cost_usd": 0.0}
    return [
        _episode_record(settings, condition, seeds[i], steps[i], env.meters_history[i], beliefs[i], dict(usage))
        for i in range(n)
    ]


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


class _OpenAIRunner:
    def __init__(self, settings, client, budget, log):
        import openai

        self.settings, self.client, self.budget, self.log = settings, client, budget, log
        self.retryable = (openai.RateLimitError, openai.InternalServerError, openai.APITimeoutError,
                          openai.APIConnectionError)
        self.requests = self.retries = 0
        self.rng = random.Random(0)

    async def chat(self, messages: list[dict], seed: int) -> tuple[str, dict]:
        """One answer, retrying 429, 5xx, timeouts and connection errors. Returns (text, usage) with
        usage = {prompt_tokens, completion_tokens, requests, retries} for this answer."""
        s = self.settings
        last_error = None
        retries = 0
        for attempt in range(s.max_retries + 1):
            estimate = self.budget.reserve(messages)
            try:
                self.requests += 1
                response = await self.client.chat.completions.create(
                    model=s.model, messages=messages, temperature=s.temperature, max_tokens=s.max_tokens,
                    seed=seed, timeout=s.request_timeout_s,
                )
            except self.retryable as exc:
                self.budget.settle(estimate, 0.0)
                last_error = exc
                if attempt == s.max_retries:
                    break
                delay = _retry_after(exc)
                if delay is None:
                    delay = min(s.backoff_cap_s, s.backoff_base_s * 2**attempt) * (0.5 + self.rng.random())
                self.retries += 1
                retries += 1
                self.log(f"seed {seed}: {type(exc).__name__}, retry {attempt + 1}/{s.max_retries} in {delay:.2f}s")
                await asyncio.sleep(delay)
                continue
            except BaseException:
                self.budget.settle(estimate, 0.0)
                raise
            usage = response.usage
            prompt_tokens = getattr(usage, "prompt_tokens", 0) or 0
            completion_tokens = getattr(usage, "completion_tokens", 0) or 0
            self.budget.settle(estimate, self.budget.cost(prompt_tokens, completion_tokens))
            content = response.choices[0].message.content if response.choices else None
            return content or "", {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                   "requests": retries + 1, "retries": retries}
        raise TeacherRequestError(f"seed {seed}: gave up after {s.max_retries} retries: {type(last_error).__name__}: {last_error}")

    async def episode(self, condition: str, seed: int, settings: TeacherSettings) -> dict:
        env = RhythmEnv(condition)
        obs, _ = env.reset(seed=seed)
        history = [obs]
        steps, beliefs = [], []
        totals = {"prompt_tokens": 0, "completion_tokens": 0, "requests": 0, "retries": 0}
        last_belief = None
        for t in range(STEPS_PER_EPISODE):
            messages = render_messages(history)
            usage = {"prompt_tokens": 0, "completion_tokens": 0, "requests": 0, "retries": 0}
            attempts = 0
            while True:
                attempts += 1
                raw, used = await self.chat(messages, seed * 100 + t)
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
            prompt = messages[1]["content"]
            obs, *_ = env.step(action)
            steps.append(_step_record(t, history[-1], prompt, raw, parsed, action, invalid, attempts, obs.meters, usage))
            history.append(obs)
            for k in totals:
                totals[k] += usage[k]
        episode_usage = {**totals, "cost_usd": round(self.budget.cost(totals["prompt_tokens"], totals["completion_tokens"]), 6)}
        return _episode_record(settings, condition, seed, steps, env.vector.meters_history[0], beliefs, episode_usage)


async def _run_openai(settings, condition, seeds, writer, client, on_episode, log) -> dict:
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
                record = await runner.episode(condition, seed, settings)
            except BudgetExceeded as exc:
                if not state["stopped"]:
                    log(f"stopping before the cost limit: {exc}")
                state["stopped"] = "max_cost_usd"
                return
            except TeacherRequestError as exc:
                log(str(exc))
                state["failed"].append(seed)
                return
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
    state.update(requests=runner.requests, retries=runner.retries, cost_usd=budget.spent)
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
) -> TeacherRunResult:
    """Play the teacher on every seed not yet in `out_path`, appending one line per episode.

    `client` injects an OpenAI-compatible async client (tests); by default one is built from the
    settings. Returns counts, tokens, cost and what stopped the run, if anything.
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
            state = {"stopped": None, "failed": [], "requests": 0, "retries": 0, "cost_usd": 0.0}
            for i in range(0, len(todo), chunk_size):
                for record in _bayes_chunk(settings, condition, np.array(todo[i : i + chunk_size])):
                    writer.write(record)
                    written.append(record)
                    on_episode(record)
        else:
            state = asyncio.run(_run_openai(settings, condition, todo, writer, client, on_episode, log))
            written = state["written"]
    steps = len(written) * STEPS_PER_EPISODE
    return TeacherRunResult(
        path=Path(out_path),
        requested=len(seeds),
        written=len(written),
        skipped=skipped,
        failed_seeds=sorted(state["failed"]),
        stopped_reason=state["stopped"],
        steps=steps,
        invalid_steps=sum(sum(r["invalid"]) for r in written),
        prompt_tokens=sum(r["usage"]["prompt_tokens"] for r in written),
        completion_tokens=sum(r["usage"]["completion_tokens"] for r in written),
        requests=state["requests"],
        retries=state["retries"],
        cost_usd=round(state["cost_usd"], 6),
        wall_s=round(time.perf_counter() - start, 3),
        dropped_tail=writer.dropped_tail,
    )
