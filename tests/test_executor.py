"""The default executor path (the UI's "Materialize all"): model-running steps share the machine's
cores instead of oversubscribing them, and the evaluation figures reach the metadata as numbers the
Plots tab can chart.

The whole lineage through `dagster job execute` on the multiprocess executor is tests/test_store_lineage.py's
S3 run (every step a process of its own, none that imported Dagster loading a model).
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import pytest

from rhythm_core.compute import threads
from rhythm_core.compute.threads import available_cores, thread_budget, thread_env, torch_steps_at_once
from rhythm_core.evaluation.results import headline_figures
from rhythm_env.sim.conditions import CONDITIONS
from rhythm_pipeline.definitions import defs
from rhythm_pipeline.defs.executor import EXECUTOR_NAME, TORCH_TAG, _multiprocess_config, step_thread_budget
from rhythm_pipeline.lineage import tidy_metadata

REPO = Path(__file__).resolve().parents[1]


# -- the thread budget -----------------------------------------------------------------------------


@pytest.mark.parametrize(("cores", "at_once", "budget_of_three"), [(1, 1, 1), (2, 1, 2), (3, 1, 3), (4, 2, 2),
                                                                   (8, 4, 2), (16, 8, 5)])
def test_steps_at_once_and_their_thread_budget_never_exceed_the_cores(cores, at_once, budget_of_three):
    assert torch_steps_at_once(cores) == at_once
    # three evaluation conditions, at most `at_once` of them together
    running = min(at_once, len(CONDITIONS))
    assert thread_budget(running, cores=cores) == budget_of_three
    assert running * thread_budget(running, cores=cores) <= cores
    assert thread_budget(1, cores=cores) == cores  # a step that runs alone gets every core
    with pytest.raises(ValueError, match="at least 1"):
        thread_budget(0, cores=cores)


def test_available_cores_honours_the_cgroup_quota_and_the_override(tmp_path, monkeypatch):
    monkeypatch.delenv(threads.CORES_ENV, raising=False)
    affinity = len(os.sched_getaffinity(0))
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert available_cores(tmp_path) == affinity
    (tmp_path / "cpu.max").write_text("150000 100000\n")  # a 1.5-core Kubernetes limit runs 2 threads
    assert available_cores(tmp_path) == min(affinity, 2)
    (tmp_path / "cpu.max").write_text("50000 100000\n")
    assert available_cores(tmp_path) == 1
    monkeypatch.setenv(threads.CORES_ENV, "12")
    assert available_cores(tmp_path) == 12
    monkeypatch.setenv(threads.CORES_ENV, "many")
    with pytest.raises(ValueError, match="RHYTHM_CPU_CORES='many'"):
        available_cores(tmp_path)


def test_limit_threads_sizes_torch_and_the_env_of_children(monkeypatch):
    import torch

    for name in threads.THREAD_ENV_VARS:
        monkeypatch.setenv(name, "99")
    before = torch.get_num_threads()
    try:
        assert threads.limit_threads(1) == before
        assert torch.get_num_threads() == 1
        assert all(os.environ[name] == "1" for name in threads.THREAD_ENV_VARS)
    finally:
        torch.set_num_threads(before)
    assert thread_env(3) == {name: "3" for name in threads.THREAD_ENV_VARS}


def _context(executor: str, execution_config: dict | None = None):
    run_config = {"execution": {"config": execution_config}} if execution_config is not None else {}
    return SimpleNamespace(job_def=SimpleNamespace(executor_def=SimpleNamespace(name=executor)), run_config=run_config)


def test_step_thread_budget_follows_the_executor(monkeypatch):
    monkeypatch.setenv(threads.CORES_ENV, "12")
    # in-process (make demo): one step at a time, every core
    assert step_thread_budget(_context("execute_in_process_executor"), parallel_steps=3) == 12
    # multiprocess, defaults: 12 // 2 = 6 torch steps allowed, only 3 conditions exist -> 4 threads each
    assert step_thread_budget(_context(EXECUTOR_NAME), parallel_steps=3) == 4
    # the launchpad lowered the limit: 2 at once -> 6 threads each
    assert step_thread_budget(_context(EXECUTOR_NAME, {"torch_steps_at_once": 2}), parallel_steps=3) == 6
    # max_concurrent below the torch limit also bounds what runs together
    assert step_thread_budget(_context(EXECUTOR_NAME, {"max_concurrent": 1}), parallel_steps=3) == 12
    # training runs alone in its run
    assert step_thread_budget(_context(EXECUTOR_NAME)) == 12
    monkeypatch.setenv(threads.CORES_ENV, "2")
    assert step_thread_budget(_context(EXECUTOR_NAME), parallel_steps=3) == 2  # 1 at a time on 2 cores


def test_every_job_runs_on_the_executor_that_limits_torch_steps():
    for job_name in ("teacher_data", "data_half", "training", "reevaluate", "rhythm_lineage_long", "regrade",
                     "__ASSET_JOB"):
        assert defs.resolve_job_def(job_name).executor_def.name == EXECUTOR_NAME
    settings = {"max_concurrent": 0, "torch_steps_at_once": 3, "forkserver": True, "in_process": False}
    config = _multiprocess_config(settings)["multiprocess"]
    assert config["tag_concurrency_limits"] == [{"key": TORCH_TAG, "value": "parallel", "limit": 3}]
    assert "rhythm_pipeline.definitions" in config["start_method"]["forkserver"]["preload_modules"]
    assert _multiprocess_config({**settings, "torch_steps_at_once": 1, "forkserver": False})["multiprocess"][
        "start_method"] == {"spawn": {}}
    # make demo's runs: the same executor, every step in the run's own process (re-executed the same way)
    assert list(_multiprocess_config({**settings, "in_process": True})) == ["in_process"]
    # The three evaluation steps carry the tag; nothing else does (training runs alone).
    job = defs.resolve_job_def("__ASSET_JOB")
    tagged = sorted(node.name for node in job.graph.iterate_op_defs() if node.tags.get(TORCH_TAG) == "parallel")
    assert tagged == sorted(f"play_{c}" for c in CONDITIONS)


# -- numbers the Plots tab can chart ---------------------------------------------------------------


def _results() -> dict:
    agent = {"final_score": 0.4891234567, "belief_mae": None, "invalid_rate": 0.0, "recovery": None}
    return {"conditions": {"continuous": {"agents": {
        "student_grpo": {**agent, "belief_mae": 0.20812345, "invalid_rate": 0.00123456, "recovery": 0.261234},
        "heuristic": agent, "fallback": {**agent, "invalid_rate": 1.0},
        "bayes": {**agent, "final_score": 0.63, "belief_mae": 0.101}}}}}


def test_headline_figures_are_flat_rounded_numbers():
    figures = headline_figures(_results())
    assert figures == {
        "continuous/student_grpo/final_score": 0.4891, "continuous/student_grpo/belief_mae": 0.2081,
        "continuous/student_grpo/invalid_rate": 0.0012, "continuous/student_grpo/recovery": 0.2612,
        "continuous/heuristic/final_score": 0.4891, "continuous/fallback/final_score": 0.4891,
        "continuous/bayes/final_score": 0.63, "continuous/bayes/belief_mae": 0.101,
    }


def test_json_metadata_floats_are_rounded_to_four_decimals():
    meta = tidy_metadata({"scores": dg.MetadataValue.json({"a": 0.123456789, "b": [1.23456789, {"c": 2}], "d": "x"}),
                          "loss": 0.123456789, "n": 3})
    assert meta["scores"].data == {"a": 0.1235, "b": [1.2346, {"c": 2}], "d": "x"}
    assert meta["loss"] == 0.123456789 and meta["n"] == 3  # plain numbers keep their precision
