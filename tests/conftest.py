import numpy as np
import pytest

from rhythm_core.rollout import rollout


@pytest.fixture(scope="session")
def rollouts():
    """Cached rollouts keyed by (agent name, condition, first seed, count)."""
    from rhythm_core.agents import get_agent

    cache = {}

    def get(agent: str, condition: str = "continuous", first: int = 0, count: int = 200):
        key = (agent, condition, first, count)
        if key not in cache:
            cache[key] = rollout(get_agent(agent), condition, np.arange(first, first + count))
        return cache[key]

    return get
