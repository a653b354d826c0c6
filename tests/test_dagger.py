"""DAgger labels (teacher/dagger.py): a student plays training weeks, the Bayesian teacher labels
every state the student reached, and the labels become SFT examples in the dataset's format."""

import numpy as np
import pytest

from rhythm_core.agents import BayesAgent, get_agent
from rhythm_core.agents.rollout import rollout
from rhythm_core.agents.simple import HeuristicConstBeliefAgent
from rhythm_core.data.sft_dataset import belief_update_text, build_sft_dataset, build_student_context_conversations
from rhythm_core.env.spec import ACTIONS, STEPS_PER_EPISODE, belief_to_dict
from rhythm_core.protocol import format_answer, parse_answer
from rhythm_core.teacher.dagger import label_agreement, label_student_rollouts
from rhythm_core.teacher.run import TeacherSettings, run_teacher
from rhythm_core.teacher.trajectories import read_trajectories, replay_check, validate_record
from rhythm_core.training.tiny import train_tokenizer

SEEDS = [1200, 1201, 1202]


def test_with_the_teacher_as_student_the_labels_are_the_teachers_own_play(tmp_path):
    """The teacher labelling its own play must give exactly the teacher's trajectories: same actions,
    beliefs and reasoning at every step."""
    run_teacher(TeacherSettings(), "continuous", SEEDS, tmp_path / "teacher.jsonl")
    teacher = read_trajectories(tmp_path / "teacher.jsonl").records
    labeled = label_student_rollouts(BayesAgent(explain=True), "continuous", SEEDS, student_id="bayes")
    for own, lab in zip(teacher, labeled):
        assert lab["actions"] == own["actions"] and lab["meters"] == own["meters"]
        assert lab["beliefs"] == own["beliefs"]
        assert [s["raw_answer"] for s in lab["steps"]] == [s["raw_answer"] for s in own["steps"]]
    assert label_agreement(labeled)["action_agreement"] == 1.0


def test_labels_are_for_the_states_the_student_reached():
    labeled = label_student_rollouts(get_agent("heuristic"), "continuous", SEEDS)
    for record in labeled:
        validate_record(record)
        assert record["purpose"] == "dagger" and record["student"] == {"id": "student"}
    replay_check(labeled)  # actions and meters are what was executed
    played = rollout(get_agent("heuristic"), "continuous", SEEDS)
    assert [[ACTIONS.index(a) for a in r["actions"]] for r in labeled] == played.actions.tolist()
    steps = [s for r in labeled for s in r["steps"]]
    labels = [s["parsed"]["action"] for s in steps]
    assert any(label != s["action"] for label, s in zip(labels, steps))  # the teacher would have acted otherwise
    agreement = label_agreement(labeled)
    assert agreement["action_agreement"] == pytest.approx(np.mean([lab == s["action"] for lab, s in zip(labels, steps)]))
    # the teacher explains each anomaly by the action the student really took
    for record in labeled:
        for t in range(1, STEPS_PER_EPISODE):
            reasoning = record["steps"][t]["parsed"]["reasoning"]
            done = record["actions"][t - 1]
            assert f"After {done}," in reasoning or f"{done} hit a meter limit" in reasoning


def test_evaluation_seeds_are_refused():
    with pytest.raises(ValueError, match="not a training seed"):
        label_student_rollouts(get_agent("heuristic"), "continuous", [1200, 7])
    with pytest.raises(ValueError, match="evaluation-only"):
        label_student_rollouts(get_agent("heuristic"), "ood", [10001])


def test_every_step_of_a_failing_student_is_still_a_training_example():
    """A student whose answers are all unusable (the fallback acts) still yields a label per step,
    and the prompts show the fallback actions it really took."""
    labeled = label_student_rollouts(get_agent("fallback"), "continuous", SEEDS)
    assert label_agreement(labeled)["invalid_rate"] == 1.0
    table = build_sft_dataset(labeled, prompt_format="table", reasoning="none", validation_fraction=0.3)
    assert sum(len(split) for split in table.values()) == len(SEEDS) * STEPS_PER_EPISODE
    chat = build_sft_dataset(labeled, prompt_format="chat_labeled", reasoning="none", validation_fraction=0.3)
    rows = [row for split in chat.values() for row in split]
    assert len(rows) == len(SEEDS)
    by_seed = {r["seed"]: r for r in labeled}
    for row in rows:
        record = by_seed[row["seed"]]
        answers = [parse_answer(m["content"]) for m in row["messages"] if m["role"] == "assistant"]
        assert [a.action for a in answers] == [s["parsed"]["action"] for s in record["steps"]]
        users = [m["content"] for m in row["messages"] if m["role"] == "user"]
        assert all(users[t].startswith(record["actions"][t - 1] + " anomaly") for t in range(1, STEPS_PER_EPISODE))


def test_dagger_settings_that_cannot_work_are_refused_before_training():
    from rhythm_core.training.sft import SFTRunConfig, _check_dagger
    from rhythm_core.training.tiny import CHAT_TEMPLATE

    chat = {"prompt_format": "chat", "reasoning": "none", "belief_decimals": 2}
    bayes_weeks = [("continuous", 1200, "bayes")]
    tiny = train_tokenizer(["a b c"])
    _check_dagger(SFTRunConfig(dagger_rounds=1, dagger_context="student"), bayes_weeks, chat, tiny)  # a good setup
    with pytest.raises(ValueError, match="dataset's teacher is openai:gpt-5.4"):
        _check_dagger(SFTRunConfig(dagger_rounds=1), [("continuous", 1200, "openai:gpt-5.4")], chat, tiny)
    with pytest.raises(ValueError, match="dagger_context must be"):
        _check_dagger(SFTRunConfig(dagger_rounds=1, dagger_context="teachr"), bayes_weeks, chat, tiny)
    with pytest.raises(ValueError, match="needs a chat prompt format"):
        _check_dagger(SFTRunConfig(dagger_rounds=1, dagger_context="student"), bayes_weeks,
                      {**chat, "prompt_format": "table"}, tiny)
    tiny.chat_template = CHAT_TEMPLATE.replace(" and message.get('train') is not false", "")
    with pytest.raises(ValueError, match="would train on them"):
        _check_dagger(SFTRunConfig(dagger_rounds=1, dagger_context="student"), bayes_weeks, chat, tiny)


class _ConstantStudent(HeuristicConstBeliefAgent):
    """Acts like the heuristic, states the constant belief, and writes its answers out in full."""

    name = "student"

    def act(self, obs):
        decision = super().act(obs)
        decision.reasoning = [format_answer(ACTIONS[a], belief_to_dict(b), "") for a, b in
                              zip(decision.actions, decision.beliefs)]
        return decision


def test_student_context_conversations_keep_the_students_answers_out_of_the_loss(tmp_path):
    labeled = label_student_rollouts(_ConstantStudent(), "continuous", SEEDS)
    with pytest.raises(ValueError, match="chat prompt format"):
        build_student_context_conversations(labeled, prompt_format="table")
    ds = build_student_context_conversations(labeled, prompt_format="chat_labeled", reasoning="update",
                                             belief_decimals=1, labels_per_week=5, seed=3)
    assert len(ds) == len(SEEDS)
    by_seed = {r["seed"]: r for r in labeled}
    tokenizer = train_tokenizer([m["content"] for row in ds for m in row["messages"]])
    for row, seed in zip(ds, sorted(by_seed)):
        record, turns = by_seed[seed], [m for m in row["messages"] if m["role"] == "assistant"]
        assert sum(m["train"] for m in turns) == 5 and turns[-1]["train"]  # the row ends at its last label
        previous = None
        for t, turn in enumerate(turns):
            step = record["steps"][t]
            if not turn["train"]:
                assert turn["content"] == step["student_answer"]  # the student's own words as context
                previous = parse_answer(turn["content"]).belief
                continue
            answer = parse_answer(turn["content"])
            assert answer.action == step["parsed"]["action"]
            assert answer.belief == {d: round(v, 1) for d, v in step["parsed"]["belief"].items()}
            # the stated change is the correction from the belief the context shows last
            assert answer.reasoning == belief_update_text(step["parsed"]["belief"], previous, 1)
            previous = step["parsed"]["belief"]
        # the tiny model's chat template puts only the labels under the loss
        encoded = tokenizer.apply_chat_template(row["messages"], tokenize=True, return_dict=True,
                                                return_assistant_tokens_mask=True)
        trained = tokenizer.decode([i for i, m in zip(encoded["input_ids"], encoded["assistant_masks"]) if m])
        # (a token may span the newline after the role; the answers themselves hold no newline)
        assert trained.replace("\n", "") == "".join(m["content"] + "<|im_end|>" for m in turns if m["train"])
    run_teacher(TeacherSettings(), "continuous", [1300], tmp_path / "teacher.jsonl")
    with pytest.raises(ValueError, match="not a DAgger record"):
        build_student_context_conversations(read_trajectories(tmp_path / "teacher.jsonl").records, prompt_format="chat")
