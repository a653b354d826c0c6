
"""Operations users run every week: scheduled re-evaluation on fresh seed windows, the evaluation
history table, lineage inspection, and the regrade job's selection."""

import datetime
import os
import re
import warnings

import dagster as dg
import pytest

from rhythm_core.evaluation.rollouts import DEFAULT_EVAL_SEEDS, EVAL_WINDOW_COUNT, evaluation_window
from rhythm_env.sim.conditions import EVAL_SEEDS, TRAINING_SEEDS, parse_seeds
from rhythm_pipeline.definitions import defs


def test_evaluation_windows_are_fresh_and_never_training_seeds():
    assert evaluation_window(0) == DEFAULT_EVAL_SEEDS
    seen = {c: set() for c in EVAL_SEEDS}
    for index in range(10):
        for condition, spec in evaluation_window(index).items():
            seeds = set(parse_seeds(spec))
            assert seeds <= set(EVAL_SEEDS[condition])
            assert not seeds & set(TRAINING_SEEDS.get(condition, ()))
            assert not seeds & seen[condition]  # ten consecutive windows never repeat a seed
            seen[condition] |= seeds
    assert len(parse_seeds(evaluation_window(3)["discrete3"])) == 15
    assert EVAL_WINDOW_COUNT == 10  # continuous's 1,000 evaluation seeds hold ten windows of 100
    with pytest.raises(ValueError, match="evaluation window 10 does not exist; windows are 0-9"):
        evaluation_window(10)
    # each window a partition of the evaluation, window 0 the default evaluation
    graph = defs.resolve_asset_graph()
    for asset in ("eval_rollouts", "eval_results"):
        partitions = graph.get(dg.AssetKey(asset)).partitions_def
        assert partitions.get_partition_keys() == [str(i) for i in range(EVAL_WINDOW_COUNT)]


def test_weekly_schedule_requests_the_next_window_and_is_off_by_default():
    schedule = defs.resolve_schedule_def("weekly_reevaluation")
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    assert schedule.job_name == "reevaluate"
    requests = []
    for day in (datetime.datetime(2026, 11, 23, 6, tzinfo=datetime.UTC), datetime.datetime(2026, 11, 30, 6, tzinfo=datetime.UTC)):
        with dg.build_schedule_context(scheduled_execution_time=day, repository_def=defs.get_repository_def()) as context, \
                warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)  # tag keys Dagster accepts (one namespace)
            requests.append(schedule.evaluate_tick(context).run_requests[0])
    windows = [r.partition_key for r in requests]
    # each week the next window, a partition of the reevaluate job; a missed week is that window's backfill
    assert int(windows[1]) == (int(windows[0]) + 1) % EVAL_WINDOW_COUNT and requests[0].run_key != requests[1].run_key
    assert [r.tags["rhythm/eval_window"] for r in requests] == windows
    assert not requests[0].run_config  # the seeds are the window's: nothing to configure
    for window in windows:
        assert not set(parse_seeds(evaluation_window(int(window))["continuous"])) & set(TRAINING_SEEDS["continuous"])
    job = defs.resolve_job_def("reevaluate")
    assert {k.to_user_string() for k in job.asset_layer.executable_asset_keys} == {"eval_rollouts", "eval_results",
                                                                                   "registered_student"}


def test_regrade_selects_exactly_the_grading_assets():
    job = defs.resolve_job_def("regrade")
    # registered_student re-decides the promotion on the new grades; it does not grade (no grader in its code version)
    assert {k.to_user_string() for k in job.asset_layer.executable_asset_keys} == {"reeval_report", "eval_results",
                                                                                   "registered_student"}
    graph = defs.resolve_asset_graph()
    versions = {k.to_user_string(): graph.get(k).code_version for k in graph.get_all_asset_keys()}
    assert {k for k, v in versions.items() if "grader=" in (v or "")} == {"reeval_report", "eval_results"}


def _results(score: float) -> dict:
    metrics = {"n_episodes": 4, "final_score": score, "ci95": [score - 0.1, score + 0.1], "belief_mae": 0.2,
               "invalid_rate": 0.0}
    return {"grader": "v3", "conditions": {"continuous": {"seeds": "0-3", "agents": {"student_grpo": metrics,
                                                                                       "heuristic": metrics}}}}


@pytest.fixture
def instance(tmp_path, monkeypatch):
    monkeypatch.setenv("RHYTHM_ARTIFACTS", str(tmp_path / "artifacts"))
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as inst:
        yield inst


def test_lineage_names_what_produced_an_asset(instance, capsys, monkeypatch):
    from rhythm_pipeline.lineage import format_chain, lineage_chain

    instance.add_dynamic_partitions("teacher_shards", ["1000-1003"])
    result = defs.resolve_job_def("data_half").execute_in_process(instance=instance, partition_key="1000-1003")
    assert result.success
    chain = lineage_chain("sft_dataset", instance, defs)
    assert [link["asset"] for link in chain] == ["teacher_trajectories", "sft_dataset"]
    teacher, dataset = chain
    assert dataset["upstream_data_versions"] == {"teacher_trajectories": teacher["data_version"]}
    (reeval,) = [link for link in lineage_chain("reeval_report", instance, defs) if link["asset"] == "reeval_report"]
    assert re.fullmatch(r"reeval-[0-9a-f]{12}\|grader=v3:[0-9a-f]{12}", reeval["code_version"])
    assert teacher["details"]["teacher"] == "search" and teacher["details"]["seeds"] == "1000-1003"
    assert dataset["details"]["artifact_path"].endswith(dataset["data_version"])
    text = format_chain(chain)
    assert "<- teacher_trajectories " + teacher["data_version"] in text
    missing = lineage_chain("eval_results", instance, defs)
    assert {link["asset"] for link in missing if not link["materialized"]} == {
        "sft_checkpoint", "grpo_checkpoint", "eval_rollouts", "eval_results"}
    with pytest.raises(ValueError, match="unknown asset 'nope'"):
        lineage_chain("nope", instance, defs)


def test_rhythm_lineage_runs_through_the_cli_and_the_core_imports_no_dagster(tmp_path):
    import subprocess
    import sys

    # Every rhythm_core module imports without Dagster: the core promises it, and `rhythm lineage`
    # reaches rhythm_pipeline only through the "rhythm.commands" entry point.
    code = ("import importlib, pkgutil, sys, rhythm_core\n"
            "for m in pkgutil.walk_packages(rhythm_core.__path__, 'rhythm_core.'): importlib.import_module(m.name)\n"
            "from rhythm_core.cli import build_parser; build_parser()\n"
            "print(sorted(n for n in sys.modules if n.split('.')[0] in ('dagster', 'rhythm_pipeline')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
    home = tmp_path / "home"
    home.mkdir()
    cli = subprocess.run([sys.executable, "-m", "rhythm_core.cli", "lineage", "sft_dataset"], capture_output=True,
                         text=True, env={**os.environ, "DAGSTER_HOME": str(home)})
    assert cli.returncode == 0, cli.stderr
    assert "sft_dataset" in cli.stdout and "never materialized" in cli.stdout, cli.stdout


def test_sync_status_follows_code_and_inputs_through_public_records(instance):
    """`rhythm_pipeline.ops status` answers as the UI does, from the instance's public records: every asset
    MISSING at first; the data half FRESH once materialized; a new teacher shard makes its readers STALE."""
    from rhythm_pipeline.ops import unsynced_status

    status = unsynced_status(instance, defs)
    assert len(status) == 8 and set(status.values()) == {"MISSING"}
    instance.add_dynamic_partitions("teacher_shards", ["1000-1003", "1004-1005"])
    assert defs.resolve_job_def("data_half").execute_in_process(instance=instance, partition_key="1000-1003").success
    status = unsynced_status(instance, defs)
    assert {a: s for a, s in status.items() if s != "MISSING"} == {
        "teacher_trajectories": "FRESH", "reeval_report": "FRESH", "sft_dataset": "FRESH"}
    assert defs.resolve_job_def("teacher_data").execute_in_process(instance=instance, partition_key="1004-1005").success
    status = unsynced_status(instance, defs)
    assert (status["teacher_trajectories"], status["reeval_report"], status["sft_dataset"]) == ("FRESH", "STALE", "STALE")

def test_the_published_recipe_is_three_jobs_dagster_validates_as_they_are(monkeypatch):
    """The published recipe: the API teacher on its shard (published_teacher), the 3B student with LoRA trained
    on HF Jobs (rhythm_lineage_published), evaluated there (published_evaluation). Each job's own config
    validates once its key is in the environment, and not before."""
    from rhythm_pipeline.defs.jobs import PUBLISHED_CONFIG, published_evaluation, published_teacher

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    jobs = {"published_teacher": ("OPENAI_API_KEY", published_teacher.config),
            "rhythm_lineage_published": ("HF_TOKEN", PUBLISHED_CONFIG),
            "published_evaluation": ("HF_TOKEN", published_evaluation.config)}
    for name, (key, config) in jobs.items():
        with pytest.raises(dg.DagsterInvalidConfigError, match=key):
            dg.validate_run_config(defs.resolve_job_def(name), config)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-real")
    monkeypatch.setenv("HF_TOKEN", "hf_test_not_real")
    teacher = dg.validate_run_config(defs.resolve_job_def("published_teacher"), published_teacher.config)
    assert teacher["resources"]["teacher"]["config"]["backend"] == "openai"
    assert teacher["resources"]["teacher"]["config"]["max_cost_usd"] == 40.0
    config = dg.validate_run_config(defs.resolve_job_def("rhythm_lineage_published"), PUBLISHED_CONFIG)
    assert config["ops"]["sft_checkpoint"]["config"]["base_model"] == "Qwen/Qwen2.5-3B-Instruct"
    assert config["ops"]["sft_dataset"]["config"]["teacher_shards"] == ["1000-1299"]
    assert config["resources"]["compute"]["config"]["backend"] == "hf_jobs"
    assert config["resources"]["compute"]["config"]["hf_flavor"] == "a10g-large"
    from rhythm_core.training.sft import SFTRunConfig

    assert SFTRunConfig(**PUBLISHED_CONFIG["ops"]["sft_checkpoint"]["config"]).lora
