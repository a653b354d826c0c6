"""The data half materializes through Dagster in a temporary instance, with its checks, stable data
versions, resumable failures, and no secret anywhere on disk."""

import json
import secrets
from pathlib import Path

import dagster as dg
import datasets

from rhythm_pipeline.defs.assets.data import reeval_report, sft_dataset, teacher_trajectories
from rhythm_pipeline.defs.checks import (
    sft_dataset_has_no_eval_seeds,
    teacher_beats_heuristic,
    teacher_trajectories_complete_and_valid,
)
from rhythm_pipeline.defs.resources import HubResource, TeacherResource, artifact_store_from_env
from tests.conftest import materialize_shard
from tests.openai_server import serve

ASSETS = [teacher_trajectories, reeval_report, sft_dataset]
CHECKS = [teacher_trajectories_complete_and_valid, teacher_beats_heuristic, sft_dataset_has_no_eval_seeds]


def materialize(instance, teacher=None, seeds="1000-1011", **kwargs):
    """The data half for one teacher shard, `seeds`."""
    return materialize_shard(
        [*ASSETS, *CHECKS], instance, seeds,
        resources={"teacher": teacher or TeacherResource(), "hub": HubResource(),
                   "artifacts": artifact_store_from_env()}, **kwargs,
    )


def outputs(result):
    return {key.to_user_string(): result.output_for_node(key.to_user_string()) for key in
            (a.key for a in ASSETS)}


def test_data_half_materializes_with_checks_and_metadata(instance):
    result = materialize(instance)
    assert result.success
    out = outputs(result)
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert set(checks) == {c.check_key.name for c in CHECKS} and all(e.passed for e in checks.values())

    traj = out["teacher_trajectories"]
    lines = Path(traj["path"]).read_text().splitlines()
    assert [json.loads(line)["seed"] for line in lines] == list(range(1000, 1012))
    assert Path(instance.storage_directory()) in Path(traj["path"]).parents  # under the instance's storage
    assert Path(traj["path"]).parent.name == traj["version"]

    report = json.loads(Path(out["reeval_report"]["json"]).read_text())
    assert report["graders"] == ["v3", "v2"]
    agents = {row["agent"] for row in report["per_condition"]}
    assert agents == {"teacher", "random", "heuristic", "heuristic_const_belief", "fallback"}

    ds = datasets.load_from_disk(out["sft_dataset"]["path"])
    assert len(ds["train"]) + len(ds["validation"]) == 12  # chat format: one conversation per week
    assert (Path(out["sft_dataset"]["path"]) / "README.md").read_text().count("search-mc-1") >= 1  # the card names its teacher

    materializations = {e.asset_key.to_user_string(): e.event_specific_data.materialization
                        for e in result.get_asset_materialization_events()}
    meta = materializations["teacher_trajectories"].metadata
    for key in ("artifact_path", "episodes", "steps", "invalid_answer_rate", "prompt_tokens", "cost_usd", "wall_s",
                "teacher_mean_score_v3", "teacher_mean_score_v2", "teacher", "seeds", "env_version"):
        assert key in meta, key
    assert meta["episodes"].value == 12
    assert "| teacher |" in materializations["reeval_report"].metadata["report"].value
    assert materializations["sft_dataset"].metadata["examples_train"].value == len(ds["train"])


def test_rematerializing_the_same_inputs_gives_the_same_data_versions(instance):
    first = materialize(instance)
    second = materialize(instance)
    versions = [
        {e.asset_key.to_user_string(): e.event_specific_data.materialization.tags["dagster/data_version"]
         for e in r.get_asset_materialization_events()}
        for r in (first, second)
    ]
    assert versions[0] == versions[1]
    assert outputs(first)["sft_dataset"]["path"] == outputs(second)["sft_dataset"]["path"]


def test_evaluation_seeds_are_refused_as_training_data(instance):
    result = materialize(instance, seeds="0-3", raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "seed 0 is not a training seed" in failure.event_specific_data.error.to_string()


def test_eval_seed_check_blocks_a_leaky_dataset(tmp_path):
    import datasets
    import pytest

    from rhythm_core.data.sft_dataset import build_sft_dataset, save_sft_dataset
    from rhythm_core.teacher.run import run_teacher
    from rhythm_core.teacher.settings import TeacherSettings
    from rhythm_core.teacher.trajectories import read_trajectories

    path = tmp_path / "leaky.jsonl"
    run_teacher(TeacherSettings(), "continuous", [5, 1000, 1001], path)  # seed 5 is an evaluation seed
    records = read_trajectories(path).records
    with pytest.raises(ValueError, match="seed 5 is not a training seed"):  # the builder refuses it
        build_sft_dataset(records)
    # a dataset made another way is still caught by the blocking check
    built = build_sft_dataset([r for r in records if r["seed"] != 5], reasoning="none")
    leaky = datasets.DatasetDict({**built, "validation": built["validation"].map(lambda row: {"seed": 5})})
    saved = save_sft_dataset(leaky, tmp_path / "ds", {})
    result = sft_dataset_has_no_eval_seeds(dg.build_asset_check_context(), sft_dataset={"path": saved["path"]},
                                           artifacts=artifact_store_from_env())
    assert not result.passed and result.severity == dg.AssetCheckSeverity.ERROR
    assert "('continuous', 5)" in result.description


def test_over_budget_teacher_fails_keeps_its_work_and_resumes(instance, monkeypatch):
    with serve() as server:
        def teacher(max_cost_usd):
            return TeacherResource(backend="openai", model="fake-teacher", base_url=server.base_url, api_key="sk-x",
                                   concurrency=2, price_input_per_m=1.0, price_output_per_m=1.0,
                                   max_cost_usd=max_cost_usd)

        result = materialize(instance, teacher=teacher(0.1), seeds="1000-1003", raise_on_error=False)
        assert not result.success
        failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
        assert "max_cost_usd" in failure.event_specific_data.error.to_string()
        # a spent budget fails once: no retry pays for more (the step's retry policy is for transient faults)
        assert not [e for e in result.all_events if e.event_type_value in ("STEP_UP_FOR_RETRY", "STEP_RESTARTED")]
        requests_before = server.request_count
        work = next((Path(instance.storage_directory()) / "rhythm" / "teacher_trajectories" / "work").glob("*.jsonl"))
        done = len(work.read_text().splitlines())
        assert 1 <= done < 4
        cost = sum(json.loads(line)["usage"]["cost_usd"] for line in work.read_text().splitlines())
        assert cost <= 0.1  # stopped before overspending, and no half episode was paid for and dropped
        assert requests_before == done * 28

        # Raise the budget: the next run pays only for the episodes that were missing.
        result = materialize(instance, teacher=teacher(100.0), seeds="1000-1003")
        assert result.success
        assert server.request_count - requests_before == (4 - done) * 28
        assert len(Path(outputs(result)["teacher_trajectories"]["path"]).read_text().splitlines()) == 4


def test_api_key_never_reaches_disk_logs_or_event_log(instance, monkeypatch, tmp_path):
    canary = "sk-canary-" + secrets.token_hex(12)
    monkeypatch.setenv("OPENAI_API_KEY", canary)
    with serve() as server:
        teacher = TeacherResource(backend="openai", model="fake-teacher", base_url=server.base_url,
                                  api_key=dg.EnvVar("OPENAI_API_KEY"), concurrency=2)
        result = materialize(instance, teacher=teacher, seeds="1000-1001")
        assert result.success
        assert all(r.authorization == f"Bearer {canary}" for r in server.requests)  # the key was really used
    leaks = [p for p in Path(tmp_path).rglob("*") if p.is_file() and canary.encode() in p.read_bytes()]
    assert leaks == []
    logs = json.dumps([str(e) for e in instance.all_logs(result.run_id)])
    assert canary not in logs
    assert canary not in json.dumps(instance.get_run_by_id(result.run_id).run_config, default=str)


def test_beat_heuristic_filter_keeps_only_winning_episodes(instance):
    from rhythm_core.data.reeval_report import seeds_where_teacher_beats_heuristic
    from rhythm_core.teacher.trajectories import read_trajectories

    result = materialize_shard(
        [*ASSETS, *CHECKS], instance, "1000-1011", resources={"teacher": TeacherResource(), "hub": HubResource(),
                                                            "artifacts": artifact_store_from_env()},
        run_config={"ops": {"sft_dataset": {"config": {"filter": "beat_heuristic", "filter_grader": "v2",
                                                       "readout_form": "innovation"}}}},
    )
    out = outputs(result)
    # the chain form configured reaches the dataset, its provenance and the materialization
    metadata = result.asset_materializations_for_node("sft_dataset")[0].metadata
    assert metadata["readout_form"].value == out["sft_dataset"]["provenance"]["readout_form"] == "innovation"
    assert metadata["evidence_readout_fit"].value["form"] == "innovation"
    records = read_trajectories(out["teacher_trajectories"]["path"]).records
    winners = seeds_where_teacher_beats_heuristic(records, "v2")
    ds = datasets.load_from_disk(out["sft_dataset"]["path"])
    kept = set(ds["train"]["seed"]) | set(ds["validation"]["seed"])
    assert kept == winners and 0 < len(winners) <= 12
    assert out["sft_dataset"]["provenance"]["filter_grader"] == "v2"


class RecordingHub(HubResource):
    """The HubResource with its HfApi swapped for the signature-checked fake of test_dataset."""

    store: str = ""

    def api(self):
        from tests.test_dataset import FakeApi

        return FakeApi("hf_not_a_real_token", Path(self.store))


def test_sft_dataset_pushes_to_the_hub_when_asked(instance, tmp_path):
    hub = RecordingHub(namespace="alice", store=str(tmp_path / "uploaded"))
    config = {"ops": {"sft_dataset": {"config": {"push_to_hub": True}}}}
    result = materialize_shard(ASSETS, instance, "1000-1011", run_config=config,
                               resources={"teacher": TeacherResource(), "hub": hub, "artifacts": artifact_store_from_env()})
    assert result.success
    pushed = result.output_for_node("sft_dataset")["hub"]
    assert pushed["repo_id"] == "alice/rhythm-sft" and pushed["revision"] == "ab" * 20
    metadata = result.asset_materializations_for_node("sft_dataset")[0].metadata
    assert metadata["hub_repo_id"].value == "alice/rhythm-sft" and metadata["hub_revision"].value == "ab" * 20
    assert metadata["hub_url"].value == "https://huggingface.co/datasets/alice/rhythm-sft"
    assert (tmp_path / "uploaded" / "README.md").read_text() == \
        (Path(result.output_for_node("sft_dataset")["path"]) / "README.md").read_text()
