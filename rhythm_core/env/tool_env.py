"""RhythmEnv as a TRL environment: `GRPOTrainer(environment_factory=RhythmToolEnv, ...)`.

TRL makes one instance per rollout, calls `reset(**row)` with the dataset row (its `condition` and
`seed`, from `env_prompt_dataset`), offers every public method but `reset` and `get_reward` to the
model as a tool, and scores the finished rollout with `get_reward`. The tools are the ten actions
(`deep_work`, ..., `leisure`), each taking the agent's belief (social, morning, work in [0, 1]); a
malformed call raises ValueError, which TRL hands back to the model as the tool's error, and leaves
the week unchanged. `get_reward` is the grader's score of the week (v3 unless `grader` names another
of `rhythm_core.graders.GRADERS`); slots the model left unplayed are played with the fallback action.

Without a dataset (TRL then sends an empty prompt) `reset` draws a training week itself and returns
the task with the first observation. A dataset is better for GRPO: the rollouts of one group then
play the same week, which the group's baseline needs.
"""

from __future__ import annotations

from ..protocol.prompts import ACTION_DESCRIPTIONS, TOOL_SYSTEM_PROMPT
from .conditions import check_purpose_seeds, parse_seeds
from .spec import ACTIONS
from .text_week import DEFAULT_GRADER, TextWeek, check_purpose

# The user message of every prompt row; `reset` appends the week's first observation to it.
PLAY_REQUEST = "Here is the person's week. Plan it slot by slot, calling one action tool per slot."


class RhythmToolEnv:
    """One RhythmEnv week per rollout, its actions as tools; see the module docstring."""

    def __init__(self, *, purpose: str = "training", grader: str = DEFAULT_GRADER, seed: int | None = None):
        self._week = TextWeek(purpose=purpose, grader=grader, seed=seed)

    def reset(self, condition: str = "continuous", seed: int | None = None, prompt=None, **row) -> str:
        """Start the row's week (a drawn training week without a seed); returns the first observation,
        after the task when the row's prompt does not hold it (no dataset)."""
        observation = self._week.start(condition, seed)
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
    tool.__doc__ = f"""Spend this slot on {action}: {ACTION_DESCRIPTIONS[action]}.

    Args:
        social: Your current belief about the person's social dimension, 0 introvert .. 1 extrovert.
        morning: Your current belief about the morning dimension, 0 night owl .. 1 morning person.
        work: Your current belief about the work dimension, 0 drained by work .. 1 workaholic.

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

    seed_list = check_purpose_seeds(condition, parse_seeds(seeds) if isinstance(seeds, str) else sorted(set(seeds)),
                                    check_purpose(purpose))
    prompt = [{"role": "system", "content": TOOL_SYSTEM_PROMPT}, {"role": "user", "content": PLAY_REQUEST}]
    return Dataset.from_dict({"prompt": [prompt] * len(seed_list), "condition": [condition] * len(seed_list),
                              "seed": seed_list})


def save_env_dataset(dataset, out_dir, spec: dict, *, overwrite: bool = False) -> dict:
    """Write `dataset` (datasets.load_from_disk reads it) and `env_dataset.json` (`spec`: condition,
    seeds, purpose) to `out_dir` atomically; an existing `out_dir` is replaced only when it is an
    earlier env dataset, empty, or `overwrite` is set."""
    import json
    from pathlib import Path

    from ..store import MARKERS, atomic_write_text, publish_dir, staging

    out_dir = Path(out_dir)
    record = {**spec, "rows": len(dataset)}
    with staging(out_dir.parent) as tmp:
        dataset.save_to_disk(str(tmp))
        atomic_write_text(tmp / MARKERS["env_dataset"], json.dumps(record, sort_keys=True, indent=2) + "\n")
        publish_dir(tmp, out_dir, kind="env_dataset", overwrite=overwrite)
    return {"path": str(out_dir), **record}


__all__ = ["PLAY_REQUEST", "RhythmToolEnv", "env_prompt_dataset", "save_env_dataset"]
