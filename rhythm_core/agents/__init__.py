"""Agents that play RhythmEnv in lockstep batches: random, heuristic, heuristic_const_belief, fallback,
bayes (the Bayesian teacher), search (its inference, acting by Monte-Carlo rollouts) and oracle,
behind one `Agent` interface; `get_agent(name)`; `rollout.play_lockstep` is the one loop that plays
any agent (a student too) on the vector env, and `rollout` collects its finished episodes.
`state_values.action_values_at` values the actions at stored states as the search agent would
(GRPO's reward).

May import `env`, `graders` (planners score paths with a grader's score-to-go) and `protocol` (the
fallback rule); nothing above them.
"""

from .base import Agent, Decision
from .bayes import BayesAgent
from .oracle import OracleAgent
from .search import SearchAgent
from .simple import FallbackAgent, HeuristicAgent, HeuristicConstBeliefAgent, RandomAgent, heuristic_actions

AGENTS: dict[str, type[Agent]] = {
    "random": RandomAgent,
    "heuristic": HeuristicAgent,
    "heuristic_const_belief": HeuristicConstBeliefAgent,
    "fallback": FallbackAgent,
    "bayes": BayesAgent,
    "search": SearchAgent,
    "oracle": OracleAgent,
}


def get_agent(name: str, **kwargs) -> Agent:
    try:
        return AGENTS[name](**kwargs)
    except KeyError:
        raise ValueError(f"unknown agent {name!r}; allowed: {', '.join(AGENTS)}") from None


__all__ = [
    "AGENTS", "Agent", "BayesAgent", "Decision", "FallbackAgent", "HeuristicAgent", "HeuristicConstBeliefAgent",
    "OracleAgent", "RandomAgent", "SearchAgent", "get_agent", "heuristic_actions",
]
