
"""Operations users run every week: scheduled re-evaluation on fresh seed windows, the evaluation
history table, lineage inspection, and the regrade job's selection."""

import datetime
import os
import re
import warnings

import dagster as dg
import polars as pl
import pytest

from rhythm_core.evaluation.results import write_history
from rhythm_core.evaluation.rollouts import DEFAULT_EVAL_SEEDS, evaluation_window
from rhythm_core.evaluation.steps import read_store_history
from rhythm_core.store import LocalStore
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


def test_weekly_schedule_requests_the_next_window_and_is_off_by_default():
    schedule = defs.resolve_schedule_def("weekly_reevaluation")
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    assert schedule.job_name == "reevaluate"
    requests = []
    for day in (datetime.datetime(2026, 11, 23, 6, tzinfo=datetime.UTC), datetime.datetime(2026, 11, 30, 6, tzinfo=datetime.UTC)):
        with dg.build_schedule_context(scheduled_execution_time=day) as context, warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)  # tag keys Dagster accepts (one namespace)
            requests.append(schedule.evaluate_tick(context).run_requests[0])
    configs = [r.run_config["ops"]["eval_rollouts"]["config"] for r in requests]
    assert configs[0] != configs[1] and requests[0].run_key != requests[1].run_key
    # the run says which window and seeds it plays
    assert requests[1].tags["rhythm/continuous_seeds"] == configs[1]["continuous_seeds"]
    assert int(requests[1].tags["rhythm/eval_window"]) == int(requests[0].tags["rhythm/eval_window"]) + 1
    for config in configs:
        assert not set(parse_seeds(config["continuous_seeds"])) & set(TRAINING_SEEDS["continuous"])
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


def test_history_accumulates_across_materializations(tmp_path):
    path = tmp_path / "eval_results" / "history"
    write_history(path, _results(0.4), run_id="a", timestamp=1.0, rollouts_version="r1")
    write_history(path, _results(0.5), run_id="b", timestamp=2.0, rollouts_version="r2")
    write_history(path, _results(0.6), run_id="b", timestamp=3.0, rollouts_version="r2")  # re-run of b
    table = read_store_history(LocalStore(tmp_path))
    assert table.height == 4 and len(list(path.glob("*/rows.parquet"))) == 3
    student = table.filter(pl.col("agent") == "student_grpo")
    assert student["final_score"].to_list() == [0.4, 0.6] and student["run_id"].to_list() == ["a", "b"]


@pytest.fixture
def instance(tmp_path, monkeypatch):
    monkeypatch.setenv("RHYTHM_ARTIFACTS", str(tmp_path / "artifacts"))
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as inst:
        yield inst


def test_lineage_names_what_produced_an_asset(instance, capsys, monkeypatch):
    from rhythm_pipeline.lineage import format_chain, lineage_chain

    result = defs.resolve_job_def("data_half").execute_in_process(
        instance=instance, run_config={"ops": {"teacher_trajectories": {"config": {"seeds": "1000-1003"}}}})
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


def test_sync_status_reads_dagsters_resolver_on_the_locked_release():
    """`rhythm_pipeline.ops status` uses Dagster internals (there is no public API outside GraphQL);
    with the locked release they load and answer for every asset."""
    import dagster as dg

    from rhythm_pipeline.definitions import defs
    from rhythm_pipeline.ops import unsynced_status

    with dg.DagsterInstance.ephemeral() as instance:
        status = unsynced_status(instance, defs)
    assert len(status) == 8 and set(status.values()) == {"MISSING"}


def test_the_published_recipe_is_a_job_dagster_validates_as_it_is(monkeypatch):
    """rhythm_lineage_published: the API teacher, the 3B student with LoRA, training and evaluation on
    HF Jobs. Its own config validates once the two keys are in the environment, and not before."""
    from rhythm_pipeline.defs.jobs import PUBLISHED_CONFIG

    job = defs.resolve_job_def("rhythm_lineage_published")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with pytest.raises(dg.DagsterInvalidConfigError, match="OPENAI_API_KEY"):
        dg.validate_run_config(job, PUBLISHED_CONFIG)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-real")
    monkeypatch.setenv("HF_TOKEN", "hf_test_not_real")
    config = dg.validate_run_config(job, PUBLISHED_CONFIG)
    assert config["ops"]["sft_checkpoint"]["config"]["base_model"] == "Qwen/Qwen2.5-3B-Instruct"
    assert config["resources"]["compute"]["config"]["backend"] == "hf_jobs"
    assert config["resources"]["compute"]["config"]["hf_flavor"] == "a10g-large"
    assert config["resources"]["teacher"]["config"]["backend"] == "openai"
    from rhythm_core.training.sft import SFTRunConfig

    assert SFTRunConfig(**PUBLISHED_CONFIG["ops"]["sft_checkpoint"]["config"]).lora
