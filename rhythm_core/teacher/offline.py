"""The offline teachers (free): the Bayesian teacher (`bayes`) and the search teacher (`search`),
agents that explain themselves. `offline_records` plays one on a chunk of seeds in lockstep in one
vector env, and each decision is written as the answer a language-model teacher would give (its
canonical JSON, parsed back), so its records have the same shape as a paid teacher's and train a
student the same way. `offline_chunks` plays chunks side by side in forked worker processes: the
play and the records are pure Python and NumPy on one core, so a worker per core shortens the stage,
with the same records in the same order (benchmarks/README.md, D33; teacher_throughput.json).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import repeat

import numpy as np

from rhythm_env.protocol import format_answer, parse_answer, render_user_prompt
from rhythm_env.sim import VectorRhythmEnv
from rhythm_env.sim.spec import ACTIONS, belief_to_dict

from ..agents import Agent, BayesAgent, BayesV3Agent, SearchAgent
from ..agents.rollout import play_lockstep
from ..processes import forked_pool, forked_workers
from .budget import zero_usage
from .records import episode_record, step_record, teacher_protocol
from .settings import TeacherSettings

# backend -> the agent it plays, explaining itself (settings.OFFLINE_MODELS names each one's version)
OFFLINE_AGENTS: dict[str, type[Agent]] = {"bayes": BayesAgent, "bayes_v3": BayesV3Agent, "search": SearchAgent}


def _step_record(t: int, history, rows: list[str], decision, i: int, action: str, invalid: bool, meters_after) -> dict:
    """Step t's record of episode i with the teacher's answer (`decision`, its `act` at history[-1])
    as the answer; `action` and `invalid` are what was executed. `rows` holds the episode's rendered
    history rows (render_user_prompt extends it)."""
    belief = belief_to_dict(np.round(decision.beliefs[i], 2))
    raw = format_answer(ACTIONS[decision.actions[i]], belief, decision.reasoning[i])
    return step_record(t, history[-1], render_user_prompt(history, rows), raw, parse_answer(raw), action, invalid, 1,
                       meters_after, zero_usage())


def offline_records(settings: TeacherSettings, condition: str, seeds: np.ndarray, purpose: str | None = None) -> list[dict]:
    """Play the offline teacher `settings.backend` names on a chunk of seeds in lockstep and build their records."""
    env = VectorRhythmEnv(condition)
    n = len(seeds)
    histories: list[list] = [[] for _ in range(n)]
    rows: list[list[str]] = [[] for _ in range(n)]
    steps: list[list[dict]] = [[] for _ in range(n)]
    beliefs: list[list[dict]] = [[] for _ in range(n)]
    for step in play_lockstep(OFFLINE_AGENTS[settings.backend](explain=True), env, seeds):
        decision = step.decision
        invalid = decision.invalid if decision.invalid is not None else np.zeros(n, dtype=bool)
        for i in range(n):
            histories[i].append(step.obs.item(i))
            steps[i].append(_step_record(step.t, histories[i], rows[i], decision, i, ACTIONS[decision.actions[i]],
                                         bool(invalid[i]), step.next_obs.meters[i]))
            beliefs[i].append(steps[i][-1]["parsed"]["belief"])
    return [
        episode_record(settings.describe(), condition, seeds[i], steps[i], env.meters_history[i], beliefs[i],
                       {**zero_usage(), "cost_usd": 0.0}, protocol=teacher_protocol(settings), purpose=purpose)
        for i in range(n)
    ]


def offline_chunks(settings: TeacherSettings, condition: str, seeds: Sequence[int], *, chunk_size: int = 64,
                   workers: int = 1, purpose: str | None = None) -> Iterator[list[dict]]:
    """The records of `seeds`, a chunk of `chunk_size` seeds at a time, in the order of `seeds`. With
    `workers` > 1 the chunks are played in up to that many forked processes (`forked_workers`); the
    records do not depend on it."""
    if not settings.offline:
        raise ValueError(f"the {settings.backend} teacher is not offline; run_teacher plays it")
    chunks = [np.array(seeds[i : i + chunk_size]) for i in range(0, len(seeds), chunk_size)]
    workers = forked_workers(len(chunks), workers)
    if workers < 2:
        for chunk in chunks:
            yield offline_records(settings, condition, chunk, purpose)
        return
    # map yields in submission order; closing this generator early cancels the chunks not yet started
    with forked_pool(workers) as pool:
        yield from pool.map(offline_records, repeat(settings), repeat(condition), chunks, repeat(purpose))
