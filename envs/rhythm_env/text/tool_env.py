"""RhythmEnv as a TRL environment: `GRPOTrainer(environment_factory=RhythmToolEnv, ...)`.

TRL makes one instance per rollout, calls `reset(**row)` with the dataset row (its `condition` and
`seed`, from `env_prompt_dataset`), offers every public method but `reset` and `get_reward` to the
model as a tool, and scores the finished rollout with `get_reward`. The tools are the ten actions
(`deep_work`, ..., `leisure`), each taking the agent's belief (social, morning, work in [0, 1]); a
malformed call raises ValueError, which TRL hands back to the model as the tool's error, and leaves
the week unchanged. `get_reward` is the grader's score of the week (v3 unless `grader` names another
of `rhythm_env.graders.GRADERS`); slots the model left unplayed are played with the fallback action.

GRPO compares the rollouts of one prompt with each other, so they must play the same week. With a
dataset (`env_prompt_dataset`, `rhythm env-dataset`) the week is the row's `seed`. Without one (TRL then
sends empty prompts) pass `environment_factory=WeekGroups(num_generations, seed=...)`: TRL hands
rollout i of a batch to the i-th instance its factory made, every batch, so instance i plays group
i // num_generations, and each group's week is drawn from (seed, group, batch): one week per prompt,
distinct weeks across the prompts of a batch, the same weeks for the same seed. There `reset` returns
the task with the first observation. A bare `RhythmToolEnv` without a row's seed refuses to guess.
"""

from __future__ import annotations

import numpy as np

from ..protocol.prompts import ACTION_DESCRIPTIONS, TOOL_SYSTEM_PROMPT
from ..sim.conditions import TRAINING_SEEDS, TUNING_SEEDS, parse_seeds
from ..sim.seed_rules import check_purpose, week_seeds
from ..sim.spec import ACTIONS
from .week import BELIEF_HELP, DEFAULT_GRADER, TextWeek, check_reset_arguments

# The user message of every prompt row; `reset` appends the week's first observation to it.
PLAY_REQUEST = "Here is the person's week. Plan it slot by slot, calling one action tool per slot."


class RhythmToolEnv:
    """One RhythmEnv week per rollout, its actions as tools; see the module docstring."""

    RESET_ARGUMENTS = ("condition", "seed", "prompt")

    def __init__(self, *, purpose: str = "training", grader: str = DEFAULT_GRADER, group=None):
        self._week = TextWeek(purpose=purpose, grader=grader)
        self._group = group  # (WeekGroups, instance number): where a row without a seed takes its week
        self.resets = 0

    def reset(self, condition: str = "continuous", seed: int | None = None, prompt=None, **row) -> str:
        """Start the row's week (without a seed: this instance's group's week, see WeekGroups); returns the
        first observation, after the task when the row's prompt does not hold it (no dataset)."""
        check_reset_arguments(row, self.RESET_ARGUMENTS)
        if seed is None:
            if self._group is None:
                raise ValueError("no seed to play: give each row a seed (env_prompt_dataset) or, without a dataset, "
                                 "use environment_factory=WeekGroups(num_generations) so a prompt's rollouts share "
                                 "their week")
            groups, instance = self._group
            condition, seed = groups.condition, groups.week(instance // groups.num_generations, self.resets)
        observation = self._week.start(condition, seed)
        if self._group is not None:
            self._group[0].played.append((self._group[1], self.resets, self._week.seed))
        self.resets += 1
        if _has_task(prompt):
            return "\n" + observation
        return f"{TOOL_SYSTEM_PROMPT}\n\n{observation}"

    def get_reward(self) -> float:
        """The grader's score of the week, unplayed slots played with the fallback action."""
        return self._week.grade()

    @property
    def week(self) -> TextWeek:
        """The week being played (its history, stated beliefs and grade)."""
        return self._week


class WeekGroups:
    """`environment_factory` for GRPOTrainer without a dataset: the rollouts of one prompt play one week.

    TRL keeps the instances a factory made and hands the i-th rollout of every batch to the i-th one, the
    rollouts of a prompt next to each other; so instance i belongs to group i // num_generations, and at
    its b-th reset plays `week(group, b)`: the group-th of the distinct training weeks drawn for batch b
    from `seed`. `played` records (instance, batch, week) for every reset.
    """

    def __init__(self, num_generations: int, *, seed: int = 0, condition: str = "continuous",
                 grader: str = DEFAULT_GRADER):
        if isinstance(num_generations, bool) or not isinstance(num_generations, int) or num_generations < 1:
            raise ValueError(f"num_generations must be an integer >= 1, got {num_generations!r}")
        week_seeds(condition, [], "training")  # an evaluation-only condition is refused here
        self.num_generations, self.seed, self.condition, self.grader = num_generations, int(seed), condition, grader
        training, tuning = TRAINING_SEEDS[condition], TUNING_SEEDS.get(condition, range(0))
        self._pool = np.setdiff1d(np.arange(training.start, training.stop), np.arange(tuning.start, tuning.stop))
        self.instances = 0
        self.played: list[tuple[int, int, int]] = []

    def __call__(self) -> RhythmToolEnv:
        env = RhythmToolEnv(grader=self.grader, group=(self, self.instances))
        self.instances += 1
        return env

    def week(self, group: int, batch: int) -> int:
        """The week group `group` plays in batch `batch`: distinct across the groups of a batch."""
        rng = np.random.default_rng([self.seed, batch])
        return int(rng.permutation(self._pool)[group])


def _has_task(prompt) -> bool:
    if not prompt:
        return False
    if isinstance(prompt, str):
        return TOOL_SYSTEM_PROMPT in prompt
    return any(m.get("content") == TOOL_SYSTEM_PROMPT for m in prompt)


def _action_tool(action: str):
    def tool(self, social: float, morning: float, work: float) -> str:
        return self._week.act(action, social, morning, work)

    tool.__name__ = tool.__qualname__ = action.lower()
    # TRL and transformers read a tool's description and arguments from this Google-style docstring.
    belief_args = "\n".join(f"        {name}: Your current {text}." for name, text in BELIEF_HELP.items())
    tool.__doc__ = f"""Spend this slot on {action}: {ACTION_DESCRIPTIONS[action]}.

    Args:
{belief_args}

    Returns:
        The action's anomaly per meter and the state now; after the last slot, that the week is over.
    """
    return tool


for _action in ACTIONS:
    setattr(RhythmToolEnv, _action.lower(), _action_tool(_action))


def env_prompt_dataset(condition: str = "continuous", seeds="1000-1999", *, purpose: str = "training"):
    """The prompt dataset for `GRPOTrainer(environment_factory=RhythmToolEnv)`: a row per seed with
    `prompt` (the task as system message, `PLAY_REQUEST` as user message), `condition` and `seed`.
    Training rows only from training seeds outside the tuning seeds; evaluation rows only from
    evaluation seeds."""
    from datasets import Dataset

    seed_list = week_seeds(condition, parse_seeds(seeds) if isinstance(seeds, str) else sorted(set(seeds)),
                           check_purpose(purpose))
    prompt = [{"role": "system", "content": TOOL_SYSTEM_PROMPT}, {"role": "user", "content": PLAY_REQUEST}]
    return Dataset.from_dict({"prompt": [prompt] * len(seed_list), "condition": [condition] * len(seed_list),
                              "seed": seed_list})


__all__ = ["PLAY_REQUEST", "RhythmToolEnv", "WeekGroups", "env_prompt_dataset"]
