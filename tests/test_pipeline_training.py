"""The training and evaluation halves through Dagster: training runs in a Pipes subprocess (a crash
fails the step, not the Dagster process), and all seven assets materialize."""

from pathlib import Path

import dagster as dg
import pytest

from rhythm_pipeline.defs.assets.data import reeval_report, sft_dataset, teacher_trajectories
from rhythm_pipeline.defs.assets.evaluation import eval_results, eval_rollouts
from rhythm_pipeline.defs.assets.training import grpo_checkpoint, sft_checkpoint
from rhythm_pipeline.defs.checks import (
    student_belief_close_to_teacher,
    student_invalid_answers_at_most_5pct,
    students_beat_heuristic,
)
from rhythm_pipeline.defs.resources import ArtifactStoreResource, ComputeResource, HubResource, TeacherResource
from rhythm_pipeline.defs.tracking import TrackingResource
from tests.partitioned import materialize_lineage

ALL = [teacher_trajectories, reeval_report, sft_dataset, sft_checkpoint, grpo_checkpoint, eval_rollouts, eval_results]
EVAL_CHECKS = [students_beat_heuristic, student_belief_close_to_teacher, student_invalid_answers_at_most_5pct]
# MLflow tracking is tested in test_tracking.py; off here (a fresh store costs seconds per instance).
RESOURCES = {"teacher": TeacherResource(), "hub": HubResource(), "compute": ComputeResource(),
             "tracking": TrackingResource(enabled=False), "artifacts": ArtifactStoreResource()}
# The smallest whole lineage that exercises every stage (the slow end-to-end tests).
SMALL_SHARDS = ("1000-1015",)
SMALL = {"ops": {"sft_checkpoint": {"config": {"max_steps": 12, "short_context_steps": 0}},
                 # the 12-step student answers poorly, so every scored action's week is played out to the
                 # token budget: a small GRPO keeps the two runs (local, then as jobs) to minutes
                 "grpo_checkpoint": {"config": {"max_steps": 1, "teacher_prompts": 8, "student_episodes": 0,
                                                "validation_weeks": 2, "max_completion_length": 32,
                                                "per_device_train_batch_size": 8}},
                 "eval_rollouts": {"config": {"continuous_seeds": "0-3", "ood_seeds": "10000-10001",
                                              "discrete3_seeds": "20000-20002", "max_new_tokens": 64}}}}



def test_a_crash_in_the_training_subprocess_fails_the_step_only(instance):
    config = {"ops": {"sft_checkpoint": {"config": {"base_model": "/nonexistent/model", "max_steps": 1,
                                                    "short_context_steps": 0}}}}
    result = materialize_lineage(ALL[:4], instance, shards=("1000-1003",), resources=RESOURCES, run_config=config,
                                 raise_on_error=False)
    assert not result.success
    failed = [e.step_key for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failed == ["sft_checkpoint"]
    error = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE").event_specific_data.error
    assert "subprocess" in error.to_string().lower() or "pipes" in error.to_string().lower()
    # The user sees why in the run's own log, streamed back from the training process.
    logs = [str(e.user_message) for run_id in result.run_ids for e in instance.all_logs(run_id)]
    assert any("training failed: CheckpointError: /nonexistent/model" in line for line in logs)
    # a crashed training run fails once: its step's retry policy is for transient faults
    assert not [e for e in result.all_events if e.event_type_value in ("STEP_UP_FOR_RETRY", "STEP_RESTARTED")]
    # What was done before the crash is kept; no half-written checkpoint is published.
    storage = Path(instance.storage_directory()) / "rhythm"
    assert list((storage / "sft_dataset").glob("*/dataset_dict.json"))
    assert not [p for p in (storage / "sft_checkpoint").glob("*") if not p.name.startswith(".")]


@pytest.mark.slow
def test_all_seven_assets_materialize(instance):
    result = materialize_lineage([*ALL, *EVAL_CHECKS], instance, shards=SMALL_SHARDS, resources=RESOURCES,
                                 run_config=SMALL)
    assert result.success
    events = {e.asset_key.to_user_string(): e.event_specific_data.materialization
              for e in result.get_asset_materialization_events()}
    sft_meta, grpo_meta = events["sft_checkpoint"].metadata, events["grpo_checkpoint"].metadata
    assert sft_meta["training_loss"].value.startswith("![training loss](data:image/png;base64,")
    assert sft_meta["final_train_loss"].value < sft_meta["first_train_loss"].value
    assert Path(sft_meta["artifact_path"].value, "README.md").exists()
    assert "reward_curves" in grpo_meta and "final_kl" in grpo_meta
    assert Path(grpo_meta["artifact_path"].value, "model.safetensors").exists()
    logs = " ".join(str(e.user_message) for run_id in result.run_ids for e in instance.all_logs(run_id))
    assert '"loss"' in logs  # training metrics streamed back from the subprocess
    # the students played in the compute resource's subprocess, the references in the step
    assert "playing student_grpo, student_sft on continuous (pid" in logs and "students on compute local" in logs
    rollouts_meta = events["eval_rollouts"].metadata  # built inside the graph asset's publish op
    assert rollouts_meta["code_version"].value == eval_rollouts.code_versions_by_key[eval_rollouts.key]
    assert set(rollouts_meta["upstream_data_versions"].value) == {"grpo_checkpoint", "sft_checkpoint"}
    assert rollouts_meta["config"].value["continuous_seeds"] == "0-3"
    results_meta = events["eval_results"].metadata
    assert "| continuous | student_grpo |" in results_meta["results"].value
    assert results_meta["final_scores"].value.startswith("![final scores](data:image/png;base64,")
    assert Path(results_meta["artifact_path"].value).name == "eval_results.json"
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert {c.check_key.name for c in EVAL_CHECKS} <= set(checks)  # warnings: evaluated, may fail


def test_no_dagster_process_loads_a_model(monkeypatch, tmp_path):
    """With RHYTHM_NO_MODEL_IN_DAGSTER=1 a process that imported Dagster refuses to load a model."""
    import sys

    from rhythm_core.training.models import CheckpointError, load_model_and_tokenizer

    assert "dagster" in sys.modules  # this module imported it
    (tmp_path / "config.json").write_text("{}")  # refused before anything is read
    monkeypatch.setenv("RHYTHM_NO_MODEL_IN_DAGSTER", "1")
    with pytest.raises(CheckpointError, match="a model is being loaded in a process that imported Dagster"):
        load_model_and_tokenizer(str(tmp_path))


def test_the_sft_stage_publishes_one_version_with_and_without_hf_hub_offline(monkeypatch, tmp_path):
    """The SFT stage on two fresh instances, once online and once with HF_HUB_OFFLINE=1 (which the training
    subprocess inherits, as on an air-gapped cluster): one checkpoint version, one set of files."""
    import json

    config = {"ops": {"sft_checkpoint": {"config": {"max_steps": 2, "short_context_steps": 0}}}}
    monkeypatch.delenv("RHYTHM_ARTIFACTS", raising=False)
    published = {}
    for offline in ("0", "1"):
        monkeypatch.setenv("HF_HUB_OFFLINE", offline)
        (tmp_path / f"offline-{offline}").mkdir()
        with dg.instance_for_test(temp_dir=str(tmp_path / f"offline-{offline}")) as instance:
            result = materialize_lineage(ALL[:4], instance, shards=("1000-1003",), resources=RESOURCES,
                                         run_config=config)
            meta = result.asset_materializations_for_node("sft_checkpoint")[0].metadata
            published[offline] = (result.asset_materializations_for_node("sft_checkpoint")[0].tags["dagster/data_version"],
                                  Path(meta["artifact_path"].value))
    (online, online_dir), (offline, offline_dir) = published["0"], published["1"]
    assert online == offline
    assert (online_dir / "tokenizer_config.json").read_bytes() == (offline_dir / "tokenizer_config.json").read_bytes()
    assert "local_files_only" not in json.loads((offline_dir / "tokenizer_config.json").read_text())
