"""Teacher records -> dataset rows: `replay_states` replays a condition's episodes for the env state and
observation at every step, and `episode_rows` turns one episode into rows, the whole week as one
conversation (chat formats) or one row per decision (table)."""

from __future__ import annotations

from rhythm_env.protocol import CHAT_FORMATS, DEFAULT_PROMPT_VARIANT, SYSTEM_PROMPT, render_conversation
from rhythm_env.sim.spec import ENV_VERSION, STEPS_PER_EPISODE

from ..teacher.trajectories import replay


def replay_states(condition: str, records: list[dict], keep: list[list[bool]]) -> tuple[list, list]:
    """Replay all episodes of one condition in one vector env; return each kept step's env_state JSON
    and the observation at it (what the chat format renders), per episode and step.

    The recorded meters must match the replay (else the file is corrupt or from another env), so a
    restored state is exactly the state the teacher saw.
    """
    states: list[list[str | None]] = [[None] * STEPS_PER_EPISODE for _ in records]
    observations: list[list] = [[None] * STEPS_PER_EPISODE for _ in records]  # what the agent saw there

    def keep_states(t, env):
        rows = [i for i in range(len(records)) if keep[i][t]]
        if rows:
            snap = env.snapshot()
            for i in rows:
                states[i][t] = snap.episode(i).to_json()
                observations[i][t] = snap.observation(i)

    bad = replay(condition, records, keep_states)
    if bad:
        (i, t) = bad[0]
        raise ValueError(f"{condition} seed {records[i]['seed']}: recorded meters at step {t} do not match a replay "
                         f"of its actions in {ENV_VERSION}; {len(bad)} episode(s) differ")
    return states, observations


def episode_rows(record: dict, answers: list[str | None], states: list, history: list, belief,
                 prompt_format: str) -> list[dict] | None:
    """The rows of one episode, given each step's answer (None for a fallback step), env state and
    observation, and the hidden profile's true belief. Chat formats: one row, the week as one
    conversation, or None when a step fell back (the conversation would have to show an answer the
    teacher did not give). "table": one row per step with a teacher answer (a fallback step has no
    teacher answer to learn from)."""
    row = {"condition": record["condition"], "seed": int(record["seed"]), "teacher": str(record["teacher"]["id"]),
           "true_belief": [float(b) for b in belief]}
    if prompt_format in CHAT_FORMATS:
        if any(a is None for a in answers):
            return None
        conversation = render_conversation(history, answers[:-1], variant=DEFAULT_PROMPT_VARIANT,
                                           prompt_format=prompt_format)
        return [{**row, "messages": conversation + [{"role": "assistant", "content": answers[-1]}],
                 "steps": list(range(STEPS_PER_EPISODE)), "env_states": states}]
    rows = []
    for t, answer in enumerate(answers):
        if answer is None:
            continue  # a fallback step: no teacher answer to learn from
        rows.append({**row, "step": t, "env_state": states[t], "messages": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": record["steps"][t]["prompt"]},
            {"role": "assistant", "content": answer},
        ]})
    return rows
