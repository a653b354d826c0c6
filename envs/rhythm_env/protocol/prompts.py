"""The system prompts: the full task explanation (`SYSTEM_PROMPT`), the compact marker for students
trained from scratch (`COMPACT_SYSTEM_PROMPT`), picked by name with `system_prompt`, and the task for an
agent that acts by calling tools (`TOOL_SYSTEM_PROMPT`)."""

from __future__ import annotations

from ..sim.dynamics import NOISE_SD
from ..sim.spec import ACTIONS, STEPS_PER_EPISODE

# What each action does, as the task text explains it (and the tools of the tool-calling env, text/tool_env.py).
ACTION_DESCRIPTIONS: dict[str, str] = {
    "DEEP_WORK": "focused work; most progress when cognition is high and at the person's peak time; tiring",
    "SHALLOW_WORK": "routine tasks; some progress, less tiring",
    "LEARN": "study; some progress, sharpens cognition at the person's peak time",
    "EXERCISE": "lifts cognition and serenity; extra energy for morning people in the morning",
    "SOCIALIZE": "see friends; restores connection, energizes extroverts, drains introverts",
    "FAMILY_TIME": "gentle connection and calm",
    "MEDITATE": "restores serenity, small lift to cognition",
    "NAP": "short rest; restores some vitality",
    "SLEEP": "at night restores vitality and cognition; in the day mostly a lost slot",
    "LEISURE": "relax; pleasant, unless the person feels guilty about not working",
}
_ACTION_LIST = "Actions:\n" + "\n".join(f"- {name}: {text}" for name, text in ACTION_DESCRIPTIONS.items())

# The task: the week, the meters, the actions, the hidden profile, the evidence and the goal.
TASK_DESCRIPTION = f"""\
You are a personal rhythm coach. For one week (7 days x 4 slots: morning, afternoon, evening, \
night = {STEPS_PER_EPISODE} steps) you choose one activity per slot for a person whose personality \
is hidden from you. Learn who they are from how they react, and plan their week around it.

Meters, each in [0, 1]; below 0.10 a meter has crashed:
- vitality: physical energy
- cognition: mental sharpness
- progress: work done this week
- serenity: calm, low stress
- connection: feeling close to others
Every slot the meters drift down a little; staying up at night costs vitality and cognition.

{_ACTION_LIST}

Hidden profile, three belief dimensions in [0, 1] (0.5 is a typical person):
- social: 0 introvert (socializing drains and stresses them) .. 1 extrovert (it energizes them, they need contact)
- morning: 0 night owl .. 1 morning person (energetic and sharpest in the morning, needs less sleep)
- work: 0 drained by work .. 1 workaholic (work restores energy, progress calms, leisure brings guilt)

The history lists each step's delta (actual meter change) and anomaly (delta minus what a typical \
person would have got from the same action in the same state). Anomalies are your evidence about \
the person. Each meter also has random noise of about {NOISE_SD:.2f} per step, so weigh several steps, not one.

Goal: keep vitality, cognition, serenity and connection high with none crashing, make progress, \
and act on what you learn: the person values what their profile says they value. Your belief at \
the last step is scored against the true profile, so always give your current best estimate."""

SYSTEM_PROMPT = TASK_DESCRIPTION + f"""

Answer with exactly one JSON object and nothing else:
{{"reasoning": "<one or two sentences>", "belief": {{"social": 0.3, "morning": 0.7, "work": 0.5}}, \
"action": "DEEP_WORK"}}
"action" must be one of: {", ".join(ACTIONS)}."""

# The tool-calling form (text/tool_env.py): the same task, each decision a call of the action's tool.
TOOL_SYSTEM_PROMPT = TASK_DESCRIPTION + """

Each slot, call the tool of the action you choose (one call per slot, in order) with your current belief \
as its arguments: social, morning and work, each a number in [0, 1]. The tool answers with the action's \
anomaly per meter and the state now; after the last slot it says the week is over."""

COMPACT_SYSTEM_PROMPT = (
    "RhythmEnv coach. Infer the person's hidden profile from the anomalies and act on it. Answer with one "
    'JSON object: {"reasoning": ..., "belief": {"social": ..., "morning": ..., "work": ...}, "action": ...}.'
)
PROMPT_VARIANTS = {"full": SYSTEM_PROMPT, "compact": COMPACT_SYSTEM_PROMPT}
# What a prompt is rendered with where no variant is named: the task explained, as LLM teachers and
# pretrained students read it (and as a dataset's conversations store it).
DEFAULT_PROMPT_VARIANT = "full"
# What a student trained from scratch (the tiny model) trains and plays with unless its config names
# another, since it cannot use the explanation.
SCRATCH_PROMPT_VARIANT = "compact"
# What a checkpoint record that names no variant was trained with: records from before variants were
# recorded, all on the full prompt, whatever new runs default to.
UNRECORDED_PROMPT_VARIANT = "full"


def system_prompt(variant: str = DEFAULT_PROMPT_VARIANT) -> str:
    """The system message: "full" explains the task (LLM teachers, pretrained students); "compact"
    is a short fixed marker for students trained from scratch, which cannot use the explanation
    and would otherwise spend most of their compute re-reading it."""
    if variant not in PROMPT_VARIANTS:
        raise ValueError(f"unknown prompt variant {variant!r}; allowed: {', '.join(PROMPT_VARIANTS)}")
    return PROMPT_VARIANTS[variant]
