"""What a teacher run uses and what it may spend: the usage counters of a request, a step and an
episode (`zero_usage`, `add_usage`), their totals over written records as billed (`usage_totals`,
the one place they are summed for a run's result, the stage's metadata and the evaluation manifest),
and the cost guard (`CostBudget`) that admits an episode or a request only while the spend, what is
reserved in flight and the next worst case stay under `max_cost_usd`.
"""

from __future__ import annotations

from rhythm_env.sim.spec import STEPS_PER_EPISODE

from .settings import TeacherSettings

USAGE_KEYS = ("prompt_tokens", "cached_prompt_tokens", "completion_tokens", "reasoning_tokens", "requests",
              "retries", "length_reasks")


def zero_usage() -> dict:
    return dict.fromkeys(USAGE_KEYS, 0)


def add_usage(into: dict, part: dict) -> dict:
    """Add each counter of `part` to `into` (which has them all); returns `into`."""
    for key, value in part.items():
        into[key] += value
    return into


def usage_totals(records: list[dict]) -> dict:
    """Token and cost totals of teacher records as billed: prompt tokens (of which cached), completion
    tokens (of which reasoning), the cache-hit fraction and the cost (files from before the cached and
    reasoning counts existed read as 0 of those)."""
    def total(key: str) -> int:
        return sum(r["usage"].get(key, 0) for r in records)

    prompt, cached = total("prompt_tokens"), total("cached_prompt_tokens")
    return {
        "prompt_tokens": prompt, "cached_prompt_tokens": cached, "completion_tokens": total("completion_tokens"),
        "reasoning_tokens": total("reasoning_tokens"), "cache_hit_fraction": round(cached / prompt, 4) if prompt else 0.0,
        "length_reasks": total("length_reasks"), "cost_usd": round(sum(r["usage"]["cost_usd"] for r in records), 6),
    }


class BudgetExceeded(RuntimeError):
    """The next episode or request could take the spend past `max_cost_usd`."""


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
