"""How a teacher's step becomes the assistant answer: the canonical answer of its parsed action, belief
and reasoning (`protocol.format_answer`), None for a fallback step; under reasoning "evidence" the
reasoning is the read-out's increment for the step and the belief its running sum."""

from __future__ import annotations

from rhythm_env.protocol import format_answer, signed
from rhythm_env.sim.spec import BELIEF_DIMS

from ..teacher.evidence import EvidenceReadout, InnovationReadout


def episode_answers(record: dict, reasoning: str, readout: EvidenceReadout | InnovationReadout | None,
                    observations: list) -> list[str | None]:
    """Each step's canonical answer (None for a fallback step). Under "evidence" the reasoning is the
    read-out's increment for this step's anomaly and the belief its running sum; the action stays
    the teacher's."""
    if reasoning != "evidence":
        return [_answer(record, step, t, reasoning) for t, step in enumerate(record["steps"])]
    increments, beliefs = readout.chain(observations)
    answers = []
    for t, step in enumerate(record["steps"]):
        text = " ".join(f"{d} {signed(v)}" for d, v in zip(BELIEF_DIMS, increments[t]))
        parsed = {**(step.get("parsed") or {}), "belief": dict(zip(BELIEF_DIMS, beliefs[t].tolist()))}
        answers.append(_answer(record, {**step, "parsed": parsed}, t, reasoning, text))
    return answers


def _answer(record: dict, step: dict, t: int, reasoning: str, evidence_text: str | None = None) -> str | None:
    """The canonical teacher answer of a step, or None for a fallback (invalid) step."""
    parsed = step.get("parsed") or {}
    if step.get("invalid") or not parsed.get("valid"):
        return None
    if parsed.get("action") != step.get("action") or step.get("action") != record["actions"][t]:
        raise ValueError(
            f"{record['condition']} seed {record['seed']} step {t}: parsed action {parsed.get('action')!r} is not "
            f"the action taken ({step.get('action')!r})"
        )
    text = {"full": parsed.get("reasoning") or "", "evidence": evidence_text or ""}.get(reasoning, "")
    return format_answer(parsed["action"], parsed.get("belief"), text)
