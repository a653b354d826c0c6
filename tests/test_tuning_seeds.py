"""The tuning seeds (conditions.TUNING_SEEDS: continuous 9500-9699) are held out like the evaluation
seeds: refused as training data by the teacher stage, `rhythm teacher`, the SFT dataset and its check,
and never drawn by the Gymnasium env; the training seeds beside them (9499, 9700) stay training data."""

import datasets
import numpy as np
import pytest

from rhythm_core.cli import main
from rhythm_core.data.sft_dataset import build_sft_dataset, check_no_eval_seeds, dataset_card
from rhythm_core.teacher.run import run_teacher
from rhythm_core.teacher.settings import TeacherSettings
from rhythm_core.teacher.stage import teacher_stage
from rhythm_core.teacher.trajectories import read_trajectories
from rhythm_env.sim import RhythmEnv, VectorRhythmEnv
from rhythm_env.sim.conditions import EVAL_SEEDS, TRAINING_SEEDS, TUNING_SEEDS, check_training_seeds

REFUSED = "seed 9500 is a tuning seed (2 such); continuous seeds 9500-9699 are reserved for tuning"
BAYES = TeacherSettings(backend="bayes")


def test_the_tuning_seeds_are_training_seeds_held_out_and_no_evaluation_seeds():
    tuning, training = TUNING_SEEDS["continuous"], TRAINING_SEEDS["continuous"]
    assert (tuning.start, tuning.stop) == (9_500, 9_700)
    assert set(tuning) <= set(training) and not any(set(tuning) & set(s) for s in EVAL_SEEDS.values())
    with pytest.raises(ValueError, match="seed 9699 is a tuning seed"):
        check_training_seeds("continuous", [9_499, 9_699])
    check_training_seeds("continuous", [9_499, 9_700])  # next to the range: training seeds


def test_a_teacher_run_on_a_tuning_seed_is_refused_and_one_beside_the_range_plays(tmp_path):
    with pytest.raises(ValueError, match=REFUSED.replace("(", r"\(").replace(")", r"\)")):
        teacher_stage(BAYES, "continuous", "9499-9501", tmp_path / "refused")
    assert not (tmp_path / "refused").exists()  # refused before any work
    played = teacher_stage(BAYES, "continuous", "9499,9700", tmp_path / "played")
    assert [r["seed"] for r in read_trajectories(played["path"]).records] == [9_499, 9_700]


def test_rhythm_teacher_refuses_tuning_seeds_and_plays_the_seeds_beside_them(tmp_path, capsys):
    assert main(["teacher", "--backend", "bayes", "--seeds", "9500-9501", "--out", str(tmp_path / "t.jsonl")]) == 2
    assert REFUSED in capsys.readouterr().err and not (tmp_path / "t.jsonl").exists()
    assert main(["teacher", "--backend", "bayes", "--seeds", "9499,9700", "--out", str(tmp_path / "t.jsonl")]) == 0
    assert [r["seed"] for r in read_trajectories(tmp_path / "t.jsonl").records] == [9_499, 9_700]


def test_the_dataset_refuses_tuning_seeds_and_its_check_and_card_name_any(tmp_path):
    path = tmp_path / "teacher.jsonl"
    run_teacher(BAYES, "continuous", [9_499, 9_500, 9_700], path)  # the low-level player does not judge purpose
    records = read_trajectories(path).records
    with pytest.raises(ValueError, match="seed 9500 is a tuning seed"):
        build_sft_dataset(records, reasoning="none")
    built = build_sft_dataset([r for r in records if r["seed"] != 9_500], validation_fraction=0.5, reasoning="none")
    assert check_no_eval_seeds(built) == []
    assert "tuning seeds present | none" in dataset_card(built, {})
    leaked = datasets.DatasetDict({**built, "validation": built["validation"].map(lambda row: {"seed": 9_600})})
    assert check_no_eval_seeds(leaked) == [("continuous", 9_600)]
    assert "tuning seeds present | continuous 9600" in dataset_card(leaked, {})


def test_the_gymnasium_env_never_draws_a_tuning_seed():
    tuning = TUNING_SEEDS["continuous"]
    env = RhythmEnv("continuous", strict_seeds=False)
    env.reset(seed=1)
    drawn = [env.reset()[1]["seed"] for _ in range(2_000)]
    # a seed outside the range seeds the RNG whose first draw is the episode's (10_101's would be 9561)
    drawn += [RhythmEnv("continuous", strict_seeds=False).reset(seed=s)[1]["seed"] for s in range(10_000, 12_000)]
    vec = VectorRhythmEnv("continuous", num_envs=500, strict_seeds=False)
    drawn += vec.reset(seed=20_000)[1]["seeds"].tolist()  # 20000-20499, each outside: drawn
    drawn += vec.reset()[1]["seeds"].tolist() + vec.reset()[1]["seeds"].tolist()  # the RNG seeded with 20000
    drawn += vec.reset(seed=np.arange(10_000, 10_500))[1]["seeds"].tolist()
    assert min(drawn) >= 1_000 and max(drawn) <= 9_999 and not [s for s in drawn if s in tuning]
    # only the tuning seeds are passed over: the seeds on either side of them are drawn
    assert len(set(drawn)) > 3_000 and {s // 100 for s in drawn} >= {94, 97}
