"""One RhythmEnv week played as text: the front end other trainers drive (TRL's tool environment,
`tool_env`; the OpenEnv server, `openenv_server`).

`TextWeek.start(condition, seed)` returns the first observation as the protocol renders it; each
`act(action, social, morning, work)` takes one slot with the agent's belief and returns what the agent
reads next; `grade()` scores the week with a grader of `rhythm_core.graders`, exactly as the
evaluation does: the same EpisodeBatch the grader reads from a played week. A week left unfinished is
played to its end with the protocol's fallback action, the last stated belief carried (what the
evaluation does with an unusable answer). A bad action or belief raises ValueError naming it and
leaves the week as it was.

The seeds rules are the project's: a week for training comes from the condition's training seeds
outside the tuning seeds (`conditions.check_training_seeds`; ood and discrete3 are evaluation-only);
a week for evaluation from its evaluation seeds (`purpose="evaluation"`).
"""

from __future__ import annotations

import math

import numpy as np

from ..graders import GRADERS, get_grader
from ..protocol import fallback_action, render_labeled_turn, render_tool_answer
from .conditions import TRAINING_SEEDS, check_purpose_seeds, check_training_seeds, get_condition
from .episode import EpisodeBatch
from .rhythm_env import RhythmEnv, draw_training_seeds
from .spec import ACTIONS, BELIEF_DIMS, STEPS_PER_EPISODE, action_index

PURPOSES = ("training", "evaluation")
DEFAULT_GRADER = "v3"


def check_purpose(purpose: str) -> str:
    if purpose not in PURPOSES:
        raise ValueError(f"unknown purpose {purpose!r}; allowed: {', '.join(PURPOSES)}")
    return purpose


def check_grader(grader: str) -> str:
    if grader not in GRADERS:
        raise ValueError(f"unknown grader {grader!r}; allowed: {', '.join(GRADERS)}")
    return grader


def week_seed(condition: str, seed, purpose: str, rng: np.random.Generator) -> int:
    """The episode seed a week of `purpose` starts from: `seed` checked against the seeds rules, or
    (training only) one drawn by `rng` from the condition's training seeds outside the tuning seeds."""
    get_condition(condition)
    if seed is None:
        if purpose == "evaluation":
            raise ValueError("an evaluation week needs its seed (evaluation seeds are listed, never drawn)")
        if condition not in TRAINING_SEEDS:
            check_training_seeds(condition, [])  # names the conditions that have training seeds
        return draw_training_seeds(rng, condition)
    try:
        whole = not isinstance(seed, (bool, str)) and float(seed).is_integer()
    except (TypeError, ValueError):
        whole = False
    if not whole:
        raise ValueError(f"seed {seed!r} is not an integer")
    return check_purpose_seeds(condition, [int(seed)], purpose)[0]


def check_belief(social, morning, work) -> np.ndarray:
    """The belief as an array, or ValueError naming the first value that is not a number in [0, 1]."""
    values = []
    for name, value in zip(BELIEF_DIMS, (social, morning, work)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ValueError(f"belief {name} must be a number in [0, 1], got {value!r}")
        if not math.isfinite(value) or not 0.0 <= value <= 1.0:
            raise ValueError(f"belief {name} must be a number in [0, 1], got {value!r}")
        values.append(float(value))
    return np.array(values)


class TextWeek:
    """One week of RhythmEnv as text, played a slot at a time with the agent's belief."""

    def __init__(self, *, purpose: str = "training", grader: str = DEFAULT_GRADER, seed: int | None = None):
        self.purpose = check_purpose(purpose)
        self.grader = check_grader(grader)
        self._rng = np.random.default_rng(seed)  # draws training weeks when none is given
        self._env: RhythmEnv | None = None
        self.condition: str | None = None
        self.seed: int | None = None

    # ---- the week ------------------------------------------------------------------------------
    def start(self, condition: str = "continuous", seed: int | None = None) -> str:
        """Start the week of `condition` and `seed` (None: a drawn training week); returns the first
        observation. Refused seeds raise ValueError and keep the week that was being played."""
        episode_seed = week_seed(condition, seed, self.purpose, self._rng)
        env = RhythmEnv(condition)
        obs, _ = env.reset(seed=episode_seed)
        self._env, self.condition, self.seed = env, condition, episode_seed
        self.history = [obs]
        self.beliefs = np.full((STEPS_PER_EPISODE, len(BELIEF_DIMS)), np.nan)
        self.invalid = np.zeros(STEPS_PER_EPISODE, dtype=bool)
        return render_labeled_turn(self.history)

    @property
    def started(self) -> bool:
        return self._env is not None

    @property
    def step(self) -> int:
        """Slots played so far, 0..28."""
        return self.history[-1].step if self.started else 0

    @property
    def done(self) -> bool:
        return self.started and self.step >= STEPS_PER_EPISODE

    def act(self, action, social, morning, work) -> str:
        """Take this slot's `action` (a name of spec.ACTIONS, any case) with the stated belief; returns
        the action's anomaly per meter and the state now, or that the week is over."""
        if not self.started:
            raise ValueError("no week started: call reset first")
        if self.done:
            raise ValueError(f"the week is over ({STEPS_PER_EPISODE} slots played); start another")
        index = action_index(action)
        belief = check_belief(social, morning, work)
        self._take(index, belief, invalid=False)
        return render_tool_answer(self.history)

    def _take(self, index: int, belief: np.ndarray, *, invalid: bool) -> None:
        t = self.step
        obs, *_ = self._env.step(index)
        self.beliefs[t] = belief
        self.invalid[t] = invalid
        self.history.append(obs)

    def finish(self) -> int:
        """Play the slots left with the fallback action, the last stated belief carried; returns how
        many were played so."""
        left = 0
        while not self.done:
            stated = self.beliefs[: self.step][~np.isnan(self.beliefs[: self.step, 0])]
            belief = stated[-1] if len(stated) else np.full(len(BELIEF_DIMS), np.nan)
            self._take(action_index(fallback_action(self.history[-1])), belief, invalid=True)
            left += 1
        return left

    # ---- the grade -----------------------------------------------------------------------------
    def episode(self) -> EpisodeBatch:
        """The finished week as the graders read it (unfinished slots played by `finish`)."""
        if not self.started:
            raise ValueError("no week started: call reset first")
        self.finish()
        vec = self._env.vector
        return EpisodeBatch(self.condition, vec.seeds.copy(), vec.factors.copy(), vec.meters_history.copy(),
                            vec.action_history.copy(), self.beliefs[None].copy(), self.invalid[None].copy(),
                            agent="text_week")

    def grade(self) -> float:
        """The week's final score under `grader` (unfinished slots played by `finish`)."""
        return get_grader(self.grader).grade(self.episode()).final_score

    @property
    def actions(self) -> list[str]:
        return [obs.last_action for obs in self.history[1:]]


__all__ = ["ACTIONS", "DEFAULT_GRADER", "PURPOSES", "TextWeek", "check_belief", "week_seed"]
