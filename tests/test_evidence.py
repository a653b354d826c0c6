"""The "evidence" reasoning (teacher/evidence.py): the teacher's inference as a running sum of
per-step increments, each an exact function of what the conversation shows."""

import numpy as np
import pytest

from rhythm_core.agents import BayesAgent
from rhythm_core.agents.simple import HeuristicAgent
from rhythm_core.cli import main
from rhythm_core.data.sft_dataset import build_sft_dataset, build_student_context_conversations, dataset_format
from rhythm_core.env import VectorRhythmEnv
from rhythm_core.env.spec import ACTIONS, BELIEF_DIMS, METERS, SLOTS
from rhythm_core.protocol import parse_answer
from rhythm_core.teacher.evidence import FIT_SEEDS, evidence_chain, evidence_increment, evidence_weights
from rhythm_core.teacher.run import TeacherSettings, run_teacher
from rhythm_core.teacher.trajectories import read_trajectories

HELD_OUT = np.arange(6000, 6200)  # continuous training seeds the read-out was not fitted on


def _play(agent, seeds):
    """Observation dicts per episode (as trajectory records hold them), the agent's final belief,
    and the true belief."""
    env = VectorRhythmEnv("continuous")
    obs, _ = env.reset(seeds)
    agent.reset(env)
    histories, final = [[] for _ in seeds], None
    for _ in range(len(SLOTS) * 7):
        for n in range(len(seeds)):
            histories[n].append(obs.item(n).to_dict())
        decision = agent.act(obs)
        final = decision.beliefs
        obs, *_ = env.step(decision.actions)
    return histories, final, env.true_belief


def test_the_running_evidence_belief_infers_the_person_nearly_as_well_as_the_teacher():
    assert not set(HELD_OUT) & set(FIT_SEEDS)
    histories, teacher_final, truth = _play(BayesAgent(), HELD_OUT)
    chain = np.array([evidence_chain(h)[1][-1] for h in histories])
    chain_mae = np.abs(chain - truth).mean()
    constant_mae = np.abs(0.5 - truth).mean()
    teacher_mae = np.abs(teacher_final - truth).mean()
    assert chain_mae < 0.6 * constant_mae  # measured 0.106 against 0.218
    assert chain_mae < teacher_mae + 0.025  # measured 0.106 against the teacher's 0.098
    # under another policy's actions it still reads the person (the student will not act like the teacher)
    heuristic_histories, _, heuristic_truth = _play(HeuristicAgent(), HELD_OUT)
    heuristic_chain = np.array([evidence_chain(h)[1][-1] for h in heuristic_histories])
    assert np.abs(heuristic_chain - heuristic_truth).mean() < 0.7 * np.abs(0.5 - heuristic_truth).mean()  # 0.135, 0.218


def test_each_belief_is_the_previous_plus_the_increment_the_shown_anomaly_carries():
    histories, _, _ = _play(BayesAgent(), HELD_OUT[:5])
    weights, intercept = evidence_weights()
    assert weights.shape == (len(ACTIONS), len(SLOTS), len(METERS), len(BELIEF_DIMS))
    for history in histories:
        increments, beliefs = evidence_chain(history)
        assert np.allclose(beliefs[0], np.round(intercept, 2)) and not increments[0].any()
        for t in range(1, len(history)):
            shown = [round(history[t]["anomaly"][m], 2) for m in METERS]
            action = ACTIONS.index(history[t]["last_action"])
            assert np.allclose(increments[t], evidence_increment(action, (t - 1) % len(SLOTS), shown))
            assert np.allclose(beliefs[t], np.clip(np.round(beliefs[t - 1] + increments[t], 2), 0, 1))
    with pytest.raises(ValueError, match="step 1: an observation after the first needs"):
        evidence_chain([histories[0][0], {**histories[0][1], "anomaly": None}])


def test_evidence_answers_carry_the_chain_and_the_teachers_actions(tmp_path):
    run_teacher(TeacherSettings(), "continuous", [1200, 1201], tmp_path / "teacher.jsonl")
    records = read_trajectories(tmp_path / "teacher.jsonl").records
    data = build_sft_dataset(records, prompt_format="chat_labeled", reasoning="evidence")
    rows = list(data["train"]) + list(data["validation"])
    assert len(rows) == 2
    for row in rows:
        record = next(r for r in records if int(r["seed"]) == row["seed"])
        answers = [parse_answer(m["content"]) for m in row["messages"] if m["role"] == "assistant"]
        increments, beliefs = evidence_chain([s["observation"] for s in record["steps"]])
        assert [a.action for a in answers] == record["actions"]
        for t, answer in enumerate(answers):
            assert answer.belief_array() == pytest.approx(beliefs[t])
            stated = [float(x) for x in answer.reasoning.split()[1::2]]
            assert stated == pytest.approx(increments[t].tolist())
    # the CLI builds the same dataset
    assert main(["dataset", "--jsonl", str(tmp_path / "teacher.jsonl"), "--out", str(tmp_path / "sft"),
                 "--prompt-format", "chat_labeled", "--reasoning", "evidence"]) == 0
    import datasets
    built = datasets.load_from_disk(str(tmp_path / "sft"))
    assert dataset_format(built) == {"prompt_format": "chat_labeled", "reasoning": "evidence", "belief_decimals": 2}
    assert built["train"]["messages"] == data["train"]["messages"]
    card = (tmp_path / "sft" / "README.md").read_text()
    assert "reasoning evidence" in card and "not the teacher's own" in card
    with pytest.raises(ValueError, match="belief_decimals must be 2"):
        build_sft_dataset(records, prompt_format="chat_labeled", reasoning="evidence", belief_decimals=1)
    with pytest.raises(ValueError, match="cannot label the student's own context"):
        build_student_context_conversations([], prompt_format="chat_labeled", reasoning="evidence")
    # and an SFT run refuses that DAgger setting before training, not after the main phase
    from rhythm_core.training.sft import SFTRunConfig, _check_dagger
    from rhythm_core.training.tiny import train_tokenizer

    with pytest.raises(ValueError, match="cannot carry the 'evidence' reasoning"):
        _check_dagger(SFTRunConfig(dagger_rounds=1, dagger_context="student"), [("continuous", 1200, "bayes")],
                      dataset_format(data), train_tokenizer(["a 0.5"], 300))
