"""A teacher run, the public entry (`run_teacher`): the teacher plays every seed not yet in a JSONL
file and appends each complete episode as it finishes, so a crash loses only the episodes in flight,
a restart resumes, no seed is written twice, and a cost guard stops before overspending.

An offline teacher (free; the Bayesian `bayes` or the search `search`: `offline`) plays chunks of
seeds in lockstep, in `workers` processes side by side; an OpenAI-compatible model (paid; `openai_client`) plays episodes
concurrently, each admitted by the cost guard (`budget`) only if it can finish under `max_cost_usd`.
Who the teacher is: `settings`; what a record holds: `records` and `trajectories`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rhythm_env.sim.conditions import check_seed
from rhythm_env.sim.spec import STEPS_PER_EPISODE

from ..store import StageIncomplete
from .budget import BudgetExceeded, CostBudget, usage_totals
from .offline import offline_chunks
from .openai_client import OpenAIRunner, TeacherRequestError, TeacherRequestRejected, make_client
from .settings import TeacherSettings
from .trajectories import TrajectoryWriter


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

    @property
    def incomplete(self) -> str | None:
        """Why not every requested seed is in the file ("stopped by max_cost_usd", "2 seeds failed"), or None."""
        if self.stopped_reason:
            return f"stopped by {self.stopped_reason}"
        if self.failed_seeds:
            return f"{len(self.failed_seeds)} seeds failed"
        return None

    def raise_if_incomplete(self, what: str, details: dict) -> None:
        """Raise StageIncomplete (with `details`) when seeds failed or the run was stopped: the message
        says that `what` is incomplete, why, and how many episodes are kept for a re-run to resume."""
        if self.incomplete:
            raise StageIncomplete(f"{what} incomplete ({self.incomplete}); {self.written + self.skipped} of "
                                  f"{self.requested} episodes are kept in {self.path} and a re-run resumes from there",
                                  details)


async def _run_openai(settings, condition, seeds, writer, client, on_episode, log, purpose=None) -> dict:
    budget = CostBudget(settings)
    runner = OpenAIRunner(settings, client or make_client(settings), budget, log)
    semaphore = asyncio.Semaphore(settings.concurrency)
    state = {"stopped": None, "failed": [], "written": []}

    def stop_for_cost(exc: BudgetExceeded) -> None:  # no further episode starts; the first stop is logged
        if not state["stopped"]:
            log(f"stopping before the cost limit: {exc}")
        state["stopped"] = "max_cost_usd"

    async def one(seed: int):
        async with semaphore:
            if state["stopped"]:
                return
            record = None
            try:
                estimate = budget.admit_episode()
            except BudgetExceeded as exc:
                stop_for_cost(exc)
                return
            try:
                record = await runner.episode(condition, seed, settings, purpose)
            except BudgetExceeded as exc:
                stop_for_cost(exc)
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
    workers: int = 1,
) -> TeacherRunResult:
    """Play the teacher on every seed not yet in `out_path`, appending one line per episode.

    `client` injects an OpenAI-compatible async client (tests); by default one is built from the
    settings. `purpose` is stamped on every record when set ("evaluation" for the teacher's play on
    evaluation seeds, which the SFT dataset refuses). `workers`: processes an offline teacher
    plays its chunks in (the file is the same for any count). Returns counts, tokens, cost and what
    stopped the run, if anything. A request the endpoint rejects for good raises TeacherRequestRejected
    (episodes already written stay in the file).
    """
    start = time.perf_counter()
    seeds = [check_seed(condition, int(s)) for s in seeds]
    if len(set(seeds)) != len(seeds):
        raise ValueError("the seed list repeats a seed")
    on_episode = on_episode or (lambda record: None)
    log = log or (lambda message: None)
    with TrajectoryWriter(out_path, teacher_id=settings.teacher_id, purpose=purpose) as writer:
        if writer.dropped_tail:
            log(f"{out_path}: dropped an incomplete last line left by an interrupted run; redoing that episode")
        todo = [s for s in seeds if not writer.has(condition, s)]
        skipped = len(seeds) - len(todo)
        if skipped:
            log(f"{out_path}: resuming, {skipped} of {len(seeds)} episodes already written")
        written: list[dict] = []
        if settings.offline:
            state = {"stopped": None, "failed": [], "requests": 0, "retries": 0, "cost_usd": 0.0, "request_shape": None}
            for records in offline_chunks(settings, condition, todo, chunk_size=chunk_size, workers=workers,
                                        purpose=purpose):
                writer.write_many(records)  # a chunk is seconds of free work: one fsync for all of it
                written.extend(records)
                for record in records:
                    on_episode(record)
        else:
            state = asyncio.run(_run_openai(settings, condition, todo, writer, client, on_episode, log, purpose))
            written = state["written"]
    steps = len(written) * STEPS_PER_EPISODE
    totals = usage_totals(written)
    return TeacherRunResult(
        path=Path(out_path),
        requested=len(seeds),
        written=len(written),
        skipped=skipped,
        failed_seeds=sorted(state["failed"]),
        stopped_reason=state["stopped"],
        steps=steps,
        invalid_steps=sum(sum(r["invalid"]) for r in written),
        prompt_tokens=totals["prompt_tokens"],
        completion_tokens=totals["completion_tokens"],
        requests=state["requests"],
        retries=state["retries"],
        cost_usd=round(state["cost_usd"], 6),
        wall_s=round(time.perf_counter() - start, 3),
        dropped_tail=writer.dropped_tail,
        cached_prompt_tokens=totals["cached_prompt_tokens"],
        reasoning_tokens=totals["reasoning_tokens"],
        length_reasks=totals["length_reasks"],
        request_shape=state["request_shape"],
    )
