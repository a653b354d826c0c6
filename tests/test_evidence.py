"""The "evidence" reasoning (teacher/evidence.py): the distilled teacher's inference as a running sum
of per-step increments, each an exact function of what the conversation shows, fitted on the
records the dataset is built from."""

import copy
import json

import datasets
import numpy as np
import pytest

from rhythm_core.agents import BayesAgent
from rhythm_core.agents.simple import HeuristicAgent
from rhythm_core.cli import main
from rhythm_core.data.sft_dataset import build_sft_dataset, dataset_format, evidence_readout
from rhythm_core.teacher.evidence import (
    INNOVATION_TERMS,
    MIN_FIT_EPISODES,
    InnovationReadout,
    ReadoutFitError,
    fit_evidence_readout,
    fit_innovation_readout,
    readout_from_dict,
)
from rhythm_core.teacher.offline import offline_records
from rhythm_core.teacher.run import run_teacher
from rhythm_core.teacher.settings import TeacherSettings
from rhythm_core.teacher.trajectories import read_trajectories
from rhythm_env.protocol import parse_answer
from rhythm_env.sim import VectorRhythmEnv
from rhythm_env.sim.spec import ACTIONS, BELIEF_DIMS, METERS, SLOTS, STEPS_PER_EPISODE

FIT = np.arange(1000, 1300)  # the teacher weeks a dataset would be built from
HELD_OUT = np.arange(6000, 6200)  # continuous training seeds the read-out was not fitted on


def _play(agent, seeds, condition="continuous"):
    """Observations per episode (as the prompt renders them), the agent's final belief, the truth."""
    env = VectorRhythmEnv(condition)
    obs, _ = env.reset(seeds)
    agent.reset(env)
    histories, final = [[] for _ in seeds], None
    for _ in range(STEPS_PER_EPISODE):
        for n in range(len(seeds)):
            histories[n].append(obs.item(n))
        decision = agent.act(obs)
        final = decision.beliefs
        obs, *_ = env.step(decision.actions)
    return histories, final, env.true_belief


def _mirrored(teacher_weeks):
    """The weeks with every stated belief replaced by its mirror image (1 - v)."""
    mirrored = []
    for record, history in teacher_weeks:
        record = copy.deepcopy(record)
        for step in record["steps"]:
            step["parsed"]["belief"] = {d: 1.0 - v for d, v in step["parsed"]["belief"].items()}
        mirrored.append((record, history))
    return mirrored


@pytest.fixture(scope="module")
def teacher_weeks():
    records = offline_records(TeacherSettings(backend="bayes"), "continuous", FIT)  # the actions BayesAgent replays
    histories, _, _ = _play(BayesAgent(), FIT)
    return list(zip(records, histories))


def test_the_read_out_fitted_on_teacher_records_infers_the_person_nearly_as_well_as_the_teacher(teacher_weeks):
    readout = fit_evidence_readout(teacher_weeks[:270], teacher_weeks[270:])
    assert readout.fit["fit_weeks"] == 270 and readout.fit["reliable"]
    held = readout.fit["held_out"]["continuous"]
    assert held["weeks"] == 30 and held["mae_vs_teacher"] < 0.5 * held["constant_mae_vs_teacher"]  # 0.04 vs 0.17
    histories, teacher_final, truth = _play(BayesAgent(), HELD_OUT)
    chain = np.array([readout.chain(h)[1][-1] for h in histories])
    chain_mae, constant_mae = np.abs(chain - truth).mean(), np.abs(0.5 - truth).mean()
    assert chain_mae < 0.6 * constant_mae  # measured 0.108 against 0.218
    assert chain_mae < np.abs(teacher_final - truth).mean() + 0.025  # the teacher: 0.098
    # under another policy's actions it still reads the person (the student will not act like the teacher)
    heuristic_histories, _, heuristic_truth = _play(HeuristicAgent(), HELD_OUT)
    heuristic_chain = np.array([readout.chain(h)[1][-1] for h in heuristic_histories])
    assert np.abs(heuristic_chain - heuristic_truth).mean() < 0.7 * np.abs(0.5 - heuristic_truth).mean()


def test_the_read_out_learns_the_distilled_teachers_inference_not_the_bayesian_one(teacher_weeks):
    # a teacher whose stated beliefs are the mirror image of the Bayesian one's: the read-out follows it
    mirrored = _mirrored(teacher_weeks)
    original = fit_evidence_readout(teacher_weeks[:270])
    readout = fit_evidence_readout(mirrored[:270], mirrored[270:])
    assert readout.fit["held_out"]["continuous"]["mae_vs_teacher"] < 0.06
    histories, _, _ = _play(BayesAgent(), HELD_OUT[:50])
    for history in histories:
        assert readout.final_belief(history, STEPS_PER_EPISODE - 1) == pytest.approx(
            1.0 - original.final_belief(history, STEPS_PER_EPISODE - 1), abs=1e-6)


def test_the_read_out_fitted_to_the_profile_reads_the_person_whatever_the_teacher_stated(teacher_weeks):
    # issue 87's lever 2: the training weeks know the person, so the fit's target may be the true profile;
    # a teacher stating the mirror image of its beliefs then changes nothing
    mirrored = _mirrored(teacher_weeks)
    profile = fit_evidence_readout(teacher_weeks[:270], teacher_weeks[270:], target="profile")
    assert np.allclose(fit_evidence_readout(mirrored[:270], target="profile").weights, profile.weights)
    held = profile.fit["held_out"]["continuous"]
    assert profile.fit["target"] == "each week's true profile"
    assert held["mae_vs_profile"] < 0.6 * held["constant_mae_vs_profile"]
    histories, _, truth = _play(BayesAgent(), HELD_OUT)
    chain = np.array([profile.chain(h)[1][-1] for h in histories])
    assert np.abs(chain - truth).mean() < 0.6 * np.abs(0.5 - truth).mean()
    with pytest.raises(ValueError, match="unknown readout_target 'oracle'"):
        fit_evidence_readout(teacher_weeks[:270], target="oracle")


def test_each_belief_is_the_previous_plus_the_increment_the_shown_anomaly_carries(teacher_weeks):
    readout = fit_evidence_readout(teacher_weeks)
    assert readout.weights.shape == (len(ACTIONS), len(SLOTS), len(METERS), len(BELIEF_DIMS))
    histories, _, _ = _play(BayesAgent(), HELD_OUT[:5])
    for history in histories:
        increments, beliefs = readout.chain(history)
        assert np.allclose(beliefs[0], np.round(readout.intercept, 2)) and not increments[0].any()
        for t in range(1, len(history)):
            shown = np.round(history[t].anomaly, 2)  # what the prompt shows
            action = ACTIONS.index(history[t].last_action)
            assert np.allclose(increments[t], readout.increment(action, (t - 1) % len(SLOTS), shown))
            assert np.allclose(beliefs[t], np.clip(np.round(beliefs[t - 1] + increments[t], 2), 0, 1))
    with pytest.raises(ValueError, match="step 1: an observation after the first needs"):
        readout.chain([histories[0][0].to_dict(), {**histories[0][1].to_dict(), "anomaly": None}])
    # it survives the dataset's build info
    assert np.allclose(type(readout).from_dict(readout.to_dict()).weights, readout.weights, atol=1e-6)


def test_a_read_out_needs_stated_beliefs_and_flags_a_small_fit(teacher_weeks):
    silent = []
    for record, history in teacher_weeks[:20]:
        record = copy.deepcopy(record)
        for step in record["steps"]:
            step["parsed"]["belief"] = None
        silent.append((record, history))
    for fit in (fit_evidence_readout, fit_innovation_readout):
        with pytest.raises(ReadoutFitError, match="none of the 20 training weeks states a valid belief"):
            fit(silent)
    for small in (fit_evidence_readout(teacher_weeks[:20]), fit_innovation_readout(teacher_weeks[:20])):
        assert not small.fit["reliable"] and str(MIN_FIT_EPISODES) in small.fit["warning"]


def _assert_answers_carry_a_chain(data, records, start) -> None:
    """Every answer of the dataset keeps the teacher's action and states a belief that is the previous
    one plus the increment it states, from `start`, on the 2-decimal grid."""
    for split in ("train", "validation"):
        for row in data[split]:
            record = next(r for r in records if int(r["seed"]) == row["seed"])
            answers = [parse_answer(m["content"]) for m in row["messages"] if m["role"] == "assistant"]
            assert [a.action for a in answers] == record["actions"]
            stated = np.array([[float(x) for x in a.reasoning.split()[1::2]] for a in answers])
            beliefs = np.array([a.belief_array() for a in answers])
            assert np.allclose(beliefs[0], np.round(start, 2))
            assert np.allclose(beliefs[1:], np.clip(np.round(beliefs[:-1] + stated[1:], 2), 0, 1))


def test_evidence_answers_carry_the_chain_fitted_on_the_train_split(tmp_path):
    run_teacher(TeacherSettings(backend="bayes"), "continuous", range(1200, 1240), tmp_path / "teacher.jsonl")
    records = read_trajectories(tmp_path / "teacher.jsonl").records
    data = build_sft_dataset(records)  # the defaults are the recipe
    assert dataset_format(data).as_dict() == {"prompt_format": "chat_labeled", "reasoning": "evidence"}
    readout = evidence_readout(data)
    assert readout.fit["fit_weeks"] == len(data["train"]) and readout.fit["held_out"]["continuous"]["weeks"] == len(
        data["validation"])
    _assert_answers_carry_a_chain(data, records, readout.intercept)
    # the CLI builds the same dataset, and its card states the read-out's fit
    assert main(["dataset", "--jsonl", str(tmp_path / "teacher.jsonl"), "--out", str(tmp_path / "sft")]) == 0
    built = datasets.load_from_disk(str(tmp_path / "sft"))
    assert built["train"]["messages"] == data["train"]["messages"]
    card = (tmp_path / "sft" / "README.md").read_text()
    assert "reasoning evidence" in card and "read-out fit, MAE vs the teacher's own last belief" in card
    assert "read-out warning" in card  # 36 training weeks are fewer than a reliable fit needs


def test_the_innovation_chain_adds_the_increment_of_the_anomaly_the_previous_belief_and_the_step(teacher_weeks):
    readout = fit_innovation_readout(teacher_weeks[:270], teacher_weeks[270:])
    width = 2 * len(METERS) + len(BELIEF_DIMS) + 1  # INNOVATION_TERMS, the vector ones per meter / dim
    assert len(INNOVATION_TERMS) == 4 and readout.coefs.shape == (len(ACTIONS), len(SLOTS), width, len(BELIEF_DIMS))
    assert readout.fit["form"] == "innovation" and readout.fit["fit_weeks"] == 270 and readout.fit["reliable"]
    assert readout.fit["fit_steps"] == 270 * (STEPS_PER_EPISODE - 1)
    histories, _, _ = _play(BayesAgent(), HELD_OUT[:5])
    for history in histories:
        increments, beliefs = readout.chain(history)
        assert np.allclose(beliefs[0], np.round(readout.start, 2)) and not increments[0].any()
        for t in range(1, len(history)):
            shown = np.round(history[t].anomaly, 2)
            coef = readout.coefs[ACTIONS.index(history[t].last_action), (t - 1) % len(SLOTS)]
            features = np.concatenate([shown, shown / t, (beliefs[t - 1] - 0.5) / t, [1.0]])
            assert np.allclose(increments[t], np.round(features @ coef, 2))
            assert np.allclose(beliefs[t], np.clip(np.round(beliefs[t - 1] + increments[t], 2), 0, 1))
    # the same weeks give the same read-out, and the stored one (the dataset's build info) the same chain
    again = fit_innovation_readout(teacher_weeks[:270], teacher_weeks[270:])
    assert json.dumps(again.to_dict()) == json.dumps(readout.to_dict())
    stored = readout_from_dict(json.loads(json.dumps(readout.to_dict())))
    assert isinstance(stored, InnovationReadout)
    assert all(np.array_equal(stored.chain(h)[1], readout.chain(h)[1]) for h in histories)
    # a week with a fallback step: the two belief changes around it are left out of the fit
    broken = copy.deepcopy(teacher_weeks[0][0])
    broken["steps"][10]["invalid"] = True
    partial = fit_innovation_readout([(broken, teacher_weeks[0][1]), *teacher_weeks[1:270]])
    assert partial.fit["fit_steps"] == readout.fit["fit_steps"] - 2


def test_the_innovation_chain_stays_nearer_its_teacher_and_the_person_than_the_linear_one(teacher_weeks):
    linear = fit_evidence_readout(teacher_weeks[:270], teacher_weeks[270:])
    innovation = fit_innovation_readout(teacher_weeks[:270], teacher_weeks[270:])
    # measured: 0.036 against the linear 0.047 from the teacher's own last belief on the 30 held-out weeks
    assert innovation.fit["held_out"]["continuous"]["mae_vs_teacher"] < (
        0.85 * linear.fit["held_out"]["continuous"]["mae_vs_teacher"])
    for condition, seeds in (("continuous", HELD_OUT), ("ood", np.arange(16000, 16100))):
        histories, teacher_final, truth = _play(BayesAgent(), seeds, condition)
        error = {name: np.abs(np.array([r.chain(h)[1][-1] for h in histories]) - truth).mean()
                 for name, r in (("linear", linear), ("innovation", innovation))}
        # measured: continuous 0.098 against 0.109 (the teacher 0.098), OOD 0.111 against 0.117 (0.105)
        assert error["innovation"] < error["linear"] and error["innovation"] < np.abs(teacher_final - truth).mean() + 0.01


def test_a_dataset_names_its_chain_form_and_its_answers_carry_that_chain(tmp_path):
    run_teacher(TeacherSettings(backend="bayes"), "continuous", range(1200, 1240), tmp_path / "teacher.jsonl")
    records = read_trajectories(tmp_path / "teacher.jsonl").records
    data = build_sft_dataset(records, readout_form="innovation")
    readout = evidence_readout(data)
    assert isinstance(readout, InnovationReadout) and readout.fit["fit_weeks"] == len(data["train"])
    linear = evidence_readout(build_sft_dataset(records))
    assert linear.form == "linear"  # the default, the demo's
    _assert_answers_carry_a_chain(data, records, readout.start)
    # the beliefs written are the stored innovation chain's on the weeks the teacher saw, not another form's
    seeds = np.array(data["validation"]["seed"])
    histories, _, _ = _play(BayesAgent(), seeds)
    for row, history in zip(data["validation"], histories):
        written = np.array([parse_answer(m["content"]).belief_array() for m in row["messages"] if m["role"] == "assistant"])
        assert np.allclose(written, readout.chain(history)[1])
        assert not np.allclose(written, linear.chain(history)[1])
    assert main(["dataset", "--jsonl", str(tmp_path / "teacher.jsonl"), "--out", str(tmp_path / "sft"),
                 "--readout-form", "innovation"]) == 0
    assert datasets.load_from_disk(str(tmp_path / "sft"))["train"]["messages"] == data["train"]["messages"]
    assert "innovation read-out" in (tmp_path / "sft" / "README.md").read_text()
    with pytest.raises(ValueError, match="unknown readout_form 'kalman'; allowed: linear, innovation"):
        build_sft_dataset(records, readout_form="kalman")


def test_evaluation_seeds_never_reach_training_data_on_any_path(tmp_path, capsys):
    # the CLI refuses them for training data ...
    assert main(["teacher", "--seeds", "5-9", "--out", str(tmp_path / "eval.jsonl")]) == 2
    assert "seed 5 is not a training seed" in capsys.readouterr().err
    assert not (tmp_path / "eval.jsonl").exists()
    # ... an explicit evaluation purpose works on evaluation seeds only, and the dataset refuses those records
    assert main(["teacher", "--seeds", "5-6", "--purpose", "evaluation", "--out", str(tmp_path / "eval.jsonl")]) == 0
    assert main(["teacher", "--seeds", "1000", "--purpose", "evaluation", "--out", str(tmp_path / "x.jsonl")]) == 2
    evaluation = read_trajectories(tmp_path / "eval.jsonl").records
    assert {r["purpose"] for r in evaluation} == {"evaluation"}
    with pytest.raises(ValueError, match="never enters training data"):
        build_sft_dataset(evaluation)
    # records on an evaluation seed without the stamp (another tool wrote them) are refused as well
    unstamped = [{k: v for k, v in r.items() if k != "purpose"} for r in evaluation]
    with pytest.raises(ValueError, match=r"records\[0\] \(episode continuous seed 5\): seed 5 is not a training seed"):
        build_sft_dataset(unstamped, reasoning="none")
