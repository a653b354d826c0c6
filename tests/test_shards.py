"""Teacher data in shards, as a paying user grows it: a published shard is never played or billed again,
the readers merge every published shard in seed order (the same dataset as one shard of the same seeds),
a backfill of shards resumes only the one that failed and keeps under its budget, and shards are added as
ranges of training seeds that never overlap."""

import json

import dagster as dg
import pytest

from rhythm_core.data.stages import dataset_stage
from rhythm_core.teacher.settings import TeacherSettings
from rhythm_core.teacher.shards import compact_seeds, ordered_shards, shard_range, split_range, teacher_data
from rhythm_core.teacher.stage import teacher_stage
from rhythm_pipeline.defs.assets.data import reeval_report, sft_dataset, teacher_trajectories
from rhythm_pipeline.defs.resources import HubResource, TeacherResource, artifact_store_from_env
from tests.conftest import materialize_shard
from tests.openai_server import serve

DATA_HALF = [teacher_trajectories, reeval_report, sft_dataset]
WEEK = 28  # requests per week: one per slot


def _teacher(server, **settings) -> TeacherResource:
    return TeacherResource(backend="openai", model="fake-teacher", base_url=server.base_url, api_key="sk-x",
                           concurrency=2, price_input_per_m=1.0, price_output_per_m=1.0, **settings)


def _resources(teacher) -> dict:
    return {"teacher": teacher, "hub": HubResource(), "artifacts": artifact_store_from_env()}


def _metadata(result, asset: str) -> dict:
    (materialization,) = result.asset_materializations_for_node(asset)
    return {k: getattr(v, "value", v) for k, v in materialization.metadata.items()}


def test_shards_are_ranges_of_training_seeds_that_never_overlap():
    assert shard_range("1000-2999") == range(1000, 3000)
    for bad, message in (("1000", "first-last"), ("3000-2000", "before its first"), ("0-99", "seed 0 is not a training"),
                         ("9400-9599", "seed 9500 is a tuning seed")):
        with pytest.raises(ValueError, match=message):
            shard_range(bad)
    assert split_range(3000, 3999, 400) == ["3000-3399", "3400-3799", "3800-3999"]
    assert compact_seeds(["3000-3099", "1000-2999", "4000-4099"]) == "1000-3099,4000-4099"
    with pytest.raises(ValueError, match="teacher shards 1000-2999 and 2500-3499 overlap"):
        ordered_shards({"1000-2999": {}, "2500-3499": {}})
    with pytest.raises(ValueError, match="teacher shard 3000-3099 is not published"):
        ordered_shards({"1000-2999": {}}, ["3000-3099"])


def test_the_shards_merged_in_seed_order_are_the_dataset_of_one_shard_of_the_same_seeds(tmp_path):
    """What keeps the demo's dataset when its weeks come as shards: one shard of 1000-1005, or 1004-1005 and
    1000-1003 given in any order, make one dataset (its content hash, which is its version)."""
    settings = TeacherSettings(backend="bayes")
    whole = dataset_stage(teacher_stage(settings, "continuous", "1000-1005", tmp_path / "one"), tmp_path / "one")
    parts = [teacher_stage(settings, "continuous", spec, tmp_path / "two") for spec in ("1004-1005", "1000-1003")]
    merged = dataset_stage(teacher_data(ordered_shards({p["seeds"]: p for p in parts})), tmp_path / "two")
    assert merged["version"] == whole["version"] and merged["content_hash"] == whole["content_hash"]
    assert merged["provenance"]["seeds"] == "1000-1005" and merged["provenance"]["teacher_shards"] == ["1000-1003",
                                                                                                         "1004-1005"]


def test_growing_the_teacher_data_by_a_shard_pays_for_that_shard_only(instance):
    with serve() as server:
        teacher = _teacher(server)
        first = materialize_shard(DATA_HALF, instance, "1000-1003", resources=_resources(teacher))
        assert first.success and server.request_count == 4 * WEEK
        grown = materialize_shard(DATA_HALF, instance, "1004-1005", resources=_resources(teacher))
        assert grown.success
        new = server.requests[4 * WEEK:]
        assert len(new) == 2 * WEEK and {r.episode_seed for r in new} == {1004, 1005}  # no request for the old shard
        again = materialize_shard([teacher_trajectories], instance, "1000-1003", resources=_resources(teacher))
        assert again.success and server.request_count == 6 * WEEK  # a published shard is never played again
    shard = _metadata(grown, "teacher_trajectories")
    assert (shard["episodes"], shard["episodes_played"], shard["seeds"]) == (2, 2, "1004-1005")
    assert shard["cost_usd"] > 0 and shard["prompt_tokens"] > 0 and "invalid_answer_rate" in shard
    replayed = _metadata(again, "teacher_trajectories")
    assert (replayed["episodes_played"], replayed["cost_usd_this_run"]) == (0, 0.0)
    dataset = _metadata(grown, "sft_dataset")
    assert dataset["seeds"] == "1000-1005" and list(dataset["teacher_shards"]) == ["1000-1003", "1004-1005"]
    assert dataset["examples_train"] + dataset["episodes_validation"] == 6


def test_a_backfill_of_shards_resumes_only_the_failed_one_and_keeps_under_its_budget(instance):
    """Three shards of one backfill under a backfill budget that pays for about two: the first publishes, the
    later ones stop at the budget (once, not retried) with what they played kept; the same shards again under a
    larger budget play only the missing weeks, and the published shard nothing."""
    shards = ["1000-1001", "1002-1003", "1004-1005"]

    def backfill(backfill_id: str, cap: float, server) -> dict[str, object]:
        tags = {"dagster/backfill": backfill_id}
        return {shard: materialize_shard([teacher_trajectories], instance, shard, tags=tags, raise_on_error=False,
                                         resources=_resources(_teacher(server, backfill_max_cost_usd=cap)))
                for shard in shards}

    def observed(run_ids) -> float:
        records = instance.fetch_observations(dg.AssetKey("teacher_trajectories"), limit=100).records
        return sum(r.asset_observation.metadata["cost_usd"].value for r in records if r.run_id in run_ids)

    with serve() as server:
        first = backfill("b1", 0.2, server)
        outcome = {shard: result.success for shard, result in first.items()}
        assert outcome[shards[0]] and not all(outcome.values()), outcome
        failed = [s for s, ok in outcome.items() if not ok]
        for shard in failed:
            events = first[shard].all_events
            assert not [e for e in events if e.event_type_value in ("STEP_UP_FOR_RETRY", "STEP_RESTARTED")]
            error = next(e for e in events if e.event_type_value == "STEP_FAILURE").event_specific_data.error.to_string()
            assert "max_cost_usd" in error or "spent its teacher budget" in error, error
        assert observed({r.run_id for r in first.values()}) <= 0.2  # the backfill kept under its budget
        # every shard's run that played recorded what it paid, the ones that stopped too (the ledger the budget
        # reads); a shard refused before playing paid nothing
        spent = {r.run_id for r in instance.fetch_observations(dg.AssetKey("teacher_trajectories"), limit=100).records}
        played_runs = {r.run_id for r in first.values() if r.success or "max_cost_usd" in next(
            e for e in r.all_events if e.event_type_value == "STEP_FAILURE").event_specific_data.error.to_string()}
        assert played_runs and spent == played_runs
        played = {seed for r in server.requests for seed in [r.episode_seed]}
        before = server.request_count

        second = backfill("b2", 100.0, server)
        assert all(result.success for result in second.values())
        replayed = server.requests[before:]
    # only the weeks the failed shards had not played were asked for; the published shard asked nothing
    assert {r.episode_seed for r in replayed} == set(range(1000, 1006)) - played
    assert len(replayed) == WEEK * len(set(range(1000, 1006)) - played)
    assert _metadata(second[shards[0]], "teacher_trajectories")["episodes_played"] == 0
    for shard in failed:
        meta = _metadata(second[shard], "teacher_trajectories")
        assert meta["episodes"] == 2 and meta["episodes_played"] + meta["episodes_resumed"] == 2


def test_rhythm_shards_adds_ranges_and_lists_them(tmp_path, capsys, monkeypatch):
    from rhythm_core.cli import main

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    assert main(["shards", "add", "3000-3999", "--size", "400"]) == 0
    assert "added 3 shard(s): 3000-3399, 3400-3799, 3800-3999" in capsys.readouterr().out
    assert main(["shards", "add", "3900-4099"]) == 2  # shares seeds with 3800-3999
    assert "teacher shards 3800-3999 and 3900-4099 overlap" in capsys.readouterr().err
    assert main(["shards", "add", "9600-9699"]) == 2
    assert "tuning seed" in capsys.readouterr().err
    assert main(["shards", "list"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["shard"], r["published"]) for r in rows] == [("3000-3399", False), ("3400-3799", False),
                                                            ("3800-3999", False)]
