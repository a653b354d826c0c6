"""Agents that play RhythmEnv in lockstep batches: random, heuristic, heuristic_const_belief, fallback,
bayes (the Bayesian teacher), bayes_v3 (the same planning for v3), search (its inference, acting by
Monte-Carlo rollouts) and oracle,
behind one `Agent` interface; `get_agent(name)`; `rollout.play_lockstep` is the one loop that plays
any agent (a student too) on the vector env, and `rollout` collects its finished episodes.

May import the environment's `rhythm_env.sim`, `rhythm_env.graders` (planners score paths with a
grader's score-to-go) and `rhythm_env.protocol` (the fallback rule); nothing of rhythm_core above it.
"""

from .base import Agent, Decision
from .bayes import BayesAgent, BayesV3Agent
from .oracle import OracleAgent
from .search import SearchAgent
from .simple import FallbackAgent, HeuristicAgent, HeuristicConstBeliefAgent, RandomAgent, heuristic_actions

AGENTS: dict[str, type[Agent]] = {
    "random": RandomAgent,
    "heuristic": HeuristicAgent,
    "heuristic_const_belief": HeuristicConstBeliefAgent,
    "fallback": FallbackAgent,
    "bayes": BayesAgent,
    "bayes_v3": BayesV3Agent,
    "search": SearchAgent,
    "oracle": OracleAgent,
}


def get_agent(name: str, **kwargs) -> Agent:
    try:
        return AGENTS[name](**kwargs)
    except KeyError:
        raise ValueError(f"unknown agent {name!r}; allowed: {', '.join(AGENTS)}") from None


__all__ = [
    "AGENTS", "Agent", "BayesAgent", "BayesV3Agent", "Decision", "FallbackAgent", "HeuristicAgent", "HeuristicConstBeliefAgent",
    "OracleAgent", "RandomAgent", "SearchAgent", "get_agent", "heuristic_actions",
]
