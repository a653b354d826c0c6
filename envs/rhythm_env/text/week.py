"""One RhythmEnv week played as text: the front end other trainers drive (TRL's tool environment,
`tool_env`; the OpenEnv server, `openenv_server`).

`TextWeek.start(condition, seed)` returns the first observation as the protocol renders it; each
`act(action, social, morning, work)` takes one slot with the agent's belief and returns what the agent
reads next; `grade()` scores the week with a grader of `rhythm_env.graders`, exactly as the
evaluation does: the same EpisodeBatch the grader reads from a played week. A week left unfinished is
played to its end with the protocol's fallback action, the last stated belief carried (what the
evaluation does with an unusable answer). A bad action or belief raises ValueError naming it and
leaves the week as it was.

The seeds rules are every front end's (`sim.seed_rules`): a week for training comes from the
condition's training seeds outside the tuning seeds (ood and discrete3 are evaluation-only); a week for
evaluation from its evaluation seeds (`purpose="evaluation"`).
"""

from __future__ import annotations

import math

import numpy as np

from ..graders import DEFAULT_GRADER, GRADERS, get_grader
from ..protocol import fallback_action, render_labeled_turn, render_tool_answer
from ..sim import RhythmEnv
from ..sim.conditions import EVAL_SEEDS, TRAINING_SEEDS, TUNING_SEEDS, check_seed, get_condition
from ..sim.episode import EpisodeBatch
from ..sim.seed_rules import PURPOSES, check_integer_seed, check_purpose, week_seed
from ..sim.spec import ACTIONS, BELIEF_DIMS, STEPS_PER_EPISODE, action_index

# What each belief dimension means, as every text front end explains it (TRL's tool arguments, OpenEnv's
# action fields).
BELIEF_HELP = {
    "social": "belief about the social dimension, 0 introvert .. 1 extrovert",
    "morning": "belief about the morning dimension, 0 night owl .. 1 morning person",
    "work": "belief about the work dimension, 0 drained by work .. 1 workaholic",
}


def check_seed_for_a_player(condition: str, seed, purpose: str) -> None:
    """ValueError in words for whoever plays the week (a client of a server, a trainer) where `seed` is
    not one of `purpose`'s: which seeds are, and that tuning seeds are reserved. The simulator's own
    check (seed_rules.week_seed) still runs after it; its wording is the pipeline's."""
    if seed is None:
        return
    check_purpose(purpose)
    get_condition(condition)
    seed = check_seed(condition, check_integer_seed(seed))  # a seed outside the condition is named as such
    tuning = TUNING_SEEDS.get(condition, range(0))
    if purpose == "evaluation":
        allowed = EVAL_SEEDS[condition]
        if seed not in allowed:
            what = (f"a tuning seed, reserved ({tuning.start}-{tuning.stop - 1})" if seed in tuning
                    else "a training seed")
            raise ValueError(f"seed {seed} is not an evaluation seed of {condition} "
                             f"({allowed.start}-{allowed.stop - 1}); it is {what}")
        return
    allowed = TRAINING_SEEDS.get(condition)
    if allowed is None:
        raise ValueError(f"condition {condition!r} is evaluation-only; training weeks come from: "
                         + ", ".join(f"{c} {r.start}-{r.stop - 1}" for c, r in TRAINING_SEEDS.items()))
    if seed not in allowed:
        raise ValueError(f"seed {seed} is not a training seed; {condition} training seeds are "
                         f"{allowed.start}-{allowed.stop - 1} (the rest are reserved for evaluation)")
    if seed in tuning:
        raise ValueError(f"seed {seed} is a tuning seed; {condition} seeds {tuning.start}-{tuning.stop - 1} "
                         "are reserved for tuning")


def check_reset_arguments(given: dict, allowed) -> None:
    """ValueError naming any argument a reset does not read (a misspelt seed would draw another week)."""
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise ValueError(f"unknown reset argument(s) {', '.join(map(str, unknown))}; allowed: {', '.join(allowed)}")


def check_grader(grader: str) -> str:
    if grader not in GRADERS:
        raise ValueError(f"unknown grader {grader!r}; allowed: {', '.join(GRADERS)}")
    return grader


def check_belief(social, morning, work) -> np.ndarray:
    """The belief as an array, or ValueError naming the first value that is not a number in [0, 1]."""
    values = []
    for name, value in zip(BELIEF_DIMS, (social, morning, work)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ValueError(f"belief {name} must be a number in [0, 1], got {value!r}")
        if not math.isfinite(value) or not 0.0 <= value <= 1.0:  # NaN fails here and is named as nan
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
        check_seed_for_a_player(condition, seed, self.purpose)
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
        return EpisodeBatch.from_env(self._env, self.beliefs, self.invalid, agent="text_week")

    def grade(self) -> float:
        """The week's final score under `grader` (unfinished slots played by `finish`)."""
        return get_grader(self.grader).grade(self.episode()).final_score

    @property
    def actions(self) -> list[str]:
        return [obs.last_action for obs in self.history[1:]]


__all__ = ["ACTIONS", "BELIEF_HELP", "DEFAULT_GRADER", "PURPOSES", "TextWeek", "check_belief", "check_grader",
           "check_purpose", "check_reset_arguments"]
