"""Score agents on a condition: per-agent mean final score with a 95% CI, components, belief MAE."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import polars as pl

from rhythm_env.graders import get_grader, mean_ci95
from rhythm_env.sim.episode import EpisodeBatch

from ..agents import get_agent
from ..agents.rollout import rollout

BASELINE_AGENTS = ("random", "heuristic", "heuristic_const_belief", "fallback", "bayes", "bayes_v3", "search", "oracle")


def summarize(episodes: EpisodeBatch, grader_name: str) -> dict:
    """The per-agent JSON block: final_score, ci95, belief_mae (None without beliefs), components."""
    grader = get_grader(grader_name)
    scores, components = grader.grade_batch(episodes)
    mean, lo, hi = mean_ci95(scores)
    has_belief = episodes.has_belief
    return {
        "final_score": round(mean, 4),
        "ci95": [round(lo, 4), round(hi, 4)],
        "belief_mae": round(float(episodes.belief_mae()[has_belief].mean()), 4) if has_belief.any() else None,
        "components": {name: round(float(v.mean()), 4) for name, v in components.items()},
    }


def run_baselines(
    condition: str,
    seeds: Sequence[int],
    grader: str,
    agents: Sequence[str] = BASELINE_AGENTS,
    on_progress: Callable[[str, int], None] | None = None,
) -> dict:
    """Play each agent on the seeds and grade: the `rhythm baselines --json` object."""
    get_grader(grader)  # fail on a bad grader name before playing anything
    agent_objs = [get_agent(name) for name in agents]
    result = {"condition": condition, "grader": grader, "n_episodes": len(seeds), "agents": {}}
    for agent in agent_objs:
        progress = (lambda n, name=agent.name: on_progress(name, n)) if on_progress else None
        episodes = rollout(agent, condition, seeds, chunk_size=1024, on_chunk=progress)
        result["agents"][agent.name] = summarize(episodes, grader)
    return result


def baselines_table(result: dict) -> pl.DataFrame:
    rows = []
    for name, block in result["agents"].items():
        rows.append(
            {
                "agent": name,
                "final_score": block["final_score"],
                "ci95_lo": block["ci95"][0],
                "ci95_hi": block["ci95"][1],
                "belief_mae": block["belief_mae"],
                **block["components"],
            }
        )
    return pl.DataFrame(rows)
