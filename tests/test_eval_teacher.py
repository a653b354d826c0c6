"""The teacher on the evaluation seeds (include_teacher): played once per seed, resumable, under one
cost guard for all conditions, shown as agent "teacher" with its id, and never training data."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from rhythm_core.data.sft_dataset import build_sft_dataset
from rhythm_core.evaluation.results import compute_results, markdown_table
from rhythm_core.evaluation.rollouts import eval_rollouts_stage, load_rollouts
from rhythm_core.evaluation.teacher_play import play_teacher
from rhythm_core.store import StageIncomplete
from rhythm_core.teacher.settings import TeacherSettings
from rhythm_core.teacher.stage import teacher_stage
from rhythm_env.sim.spec import STEPS_PER_EPISODE
from tests.openai_server import serve

SEEDS = {"continuous": "0-2", "ood": "10000-10001", "discrete3": "20000-20002"}
N_EPISODES = 3 + 2 + 3


def teacher(server, **overrides) -> TeacherSettings:
    values = {"backend": "openai", "model": "gpt-5.4", "base_url": server.base_url, "api_key": "sk-test",
              "concurrency": 4, "request_timeout_s": 5.0, "max_retries": 1, "backoff_base_s": 0.01,
              "price_input_per_m": 2.5, "price_cached_input_per_m": 0.25, "price_output_per_m": 15.0}
    values.update(overrides)
    return TeacherSettings(**values)


def test_the_teacher_plays_every_conditions_evaluation_seeds_once_and_is_graded_as_teacher(tmp_path):
    with serve(params="reasoning", prefix_cache=True) as server:
        out = eval_rollouts_stage({}, SEEDS, tmp_path, baselines=["heuristic"], include_teacher=True,
                                  teacher=teacher(server))
        assert server.request_count == N_EPISODES * STEPS_PER_EPISODE
        assert {r.episode_seed for r in server.requests} == {0, 1, 2, 10000, 10001, 20000, 20001, 20002}
        again = eval_rollouts_stage({}, SEEDS, tmp_path, baselines=["heuristic"], include_teacher=True,
                                    teacher=teacher(server))
        assert server.request_count == N_EPISODES * STEPS_PER_EPISODE  # resumed from the work files: paid once
    assert again["version"] == out["version"]  # the same bytes
    manifest, rollouts = load_rollouts(out["dir"])
    assert manifest["player_order"] == ["heuristic", "teacher"]
    assert manifest["players"]["teacher"]["id"] == "openai:gpt-5.4"
    for condition in SEEDS:
        records = rollouts[("teacher", condition)]
        assert all(r["purpose"] == "evaluation" and r["teacher"]["id"] == "openai:gpt-5.4" for r in records)
        assert manifest["files"][f"teacher__{condition}.jsonl"]["cost_usd"] > 0
    results = compute_results(out["dir"], "v3")
    for condition, block in results["conditions"].items():
        assert list(block["agents"]) == ["heuristic", "teacher"]
        assert block["agents"]["teacher"]["teacher_id"] == "openai:gpt-5.4"
        assert block["agents"]["teacher"]["n_episodes"] == len(rollouts[("teacher", condition)])
    assert "| continuous | teacher (openai:gpt-5.4) |" in markdown_table(results)

    # These episodes are never training data.
    with pytest.raises(ValueError, match="continuous seed 0 is the teacher's play on an evaluation seed"):
        build_sft_dataset(rollouts[("teacher", "continuous")])


def test_off_by_default_and_the_settings_are_required(tmp_path):
    out = eval_rollouts_stage({}, {"continuous": "0-1"}, tmp_path, baselines=["heuristic"])
    assert load_rollouts(out["dir"])[0]["player_order"] == ["heuristic"]
    with pytest.raises(ValueError, match="include_teacher needs the teacher's settings"):
        eval_rollouts_stage({}, {"continuous": "0-1"}, tmp_path, baselines=["heuristic"], include_teacher=True)


def test_only_evaluation_seeds_and_training_data_still_refuses_them(tmp_path):
    with pytest.raises(ValueError, match="seed 1000 is not an evaluation seed of continuous"):
        play_teacher(TeacherSettings(), {"continuous": "1000-1001"}, tmp_path, tmp_path)
    with pytest.raises(ValueError, match="seed 0 is not a training seed"):
        teacher_stage(TeacherSettings(), "continuous", "0-3", tmp_path)


def test_one_cost_guard_for_all_conditions_and_a_rerun_pays_only_for_the_missing_seeds(tmp_path):
    staged = tmp_path / "staged"
    staged.mkdir()
    with serve(prefix_cache=True) as server:
        # ~$0.05 an episode (about 45,000 prompt tokens at $2.5/M, a third cached at $0.25/M), while the
        # first episode is admitted against its worst case (~$0.21): the limit stops the play in ood.
        limited = teacher(server, model="fake-teacher", max_cost_usd=0.35, max_tokens=100, concurrency=1)
        with pytest.raises(StageIncomplete, match="stopped by max_cost_usd") as info:
            play_teacher(limited, SEEDS, staged, tmp_path)
        paid = server.request_count
        assert info.value.details["cost_usd_this_run"] <= 0.35
        done = sum(len(p.read_text().splitlines()) for p in (tmp_path / "eval_teacher" / "work").glob("*.jsonl"))
        assert 1 <= done < N_EPISODES and paid == done * STEPS_PER_EPISODE

        files = play_teacher(teacher(server, model="fake-teacher"), SEEDS, staged, tmp_path)
        assert server.request_count - paid == (N_EPISODES - done) * STEPS_PER_EPISODE
    assert sum(f["episodes"] for f in files.values()) == N_EPISODES
    for file, info in files.items():
        seeds = [json.loads(line)["seed"] for line in (staged / file).read_text().splitlines()]
        assert seeds == sorted(seeds) and len(seeds) == len(set(seeds)) == info["episodes"]


def test_the_dagster_op_plays_the_teacher_resource_only_when_asked(tmp_path):
    from rhythm_pipeline.defs.assets.evaluation import play_teacher as play_teacher_op
    from rhythm_pipeline.defs.resources import ArtifactStoreResource, TeacherResource

    staged = tmp_path / "staged"
    staged.mkdir()
    plan = {"seeds": {"continuous": "0-1"}, "staged": str(staged), "root": str(tmp_path), "include_teacher": False,
            "checkpoints": {}}
    context = dg.build_op_context()
    artifacts = ArtifactStoreResource(root=str(tmp_path))
    assert play_teacher_op(context, plan, TeacherResource(), artifacts) == {}
    played = play_teacher_op(context, {**plan, "include_teacher": True}, TeacherResource(), artifacts)
    assert played["identity"]["id"] == "search" and list(played["files"]) == ["teacher__continuous.jsonl"]
    assert played["files"]["teacher__continuous.jsonl"]["episodes"] == 2
