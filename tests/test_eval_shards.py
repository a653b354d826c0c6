"""Evaluation play sharded over workers: a condition's seeds split into contiguous runs, each run
played by a worker of its own, the files merged into exactly what one worker writes (same lines,
same order, same bytes, same manifest entries); a failed worker fails the step naming itself and
stops the others."""

import os
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from rhythm_core.evaluation.entry import play_students
from rhythm_core.evaluation.shards import merge_played, seeds_spec, shard_configs, split_seeds, worker_resources
from rhythm_core.teacher.trajectories import read_trajectories
from rhythm_env.sim.conditions import parse_seeds

CONFIG = {"condition": "continuous", "seeds": "0-4", "sampling": {"max_new_tokens": 96}}


def test_seeds_split_into_contiguous_runs_that_cover_them_once():
    assert split_seeds(list(range(10)), 3) == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert split_seeds([5, 9], 4) == [[5], [9]]  # never an empty run
    assert split_seeds([1, 2, 3], 1) == [[1, 2, 3]]
    for spec in ("0-99", "3,5-7,20", "10000-10049"):
        seeds = parse_seeds(spec)
        runs = split_seeds(seeds, 4)
        assert [s for run in runs for s in run] == seeds and max(map(len, runs)) - min(map(len, runs)) <= 1
        assert parse_seeds(seeds_spec(seeds)) == seeds and [parse_seeds(seeds_spec(run)) for run in runs] == runs
    assert seeds_spec([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    with pytest.raises(ValueError, match="workers must be at least 1, got 0"):
        split_seeds([1], 0)
    assert [c["seeds"] for c in shard_configs(CONFIG, 2)] == ["0-2", "3-4"]


def test_sampled_play_and_more_workers_than_gpus_are_refused_naming_the_setting():
    with pytest.raises(ValueError, match=r"sampling.temperature is 0.7.*play_workers=1"):
        shard_configs({**CONFIG, "sampling": {"temperature": 0.7}}, 2)
    assert len(shard_configs({**CONFIG, "sampling": {"temperature": 0.7}}, 1)) == 1  # one worker samples as before
    with pytest.raises(ValueError, match=r"play workers 3: more than the 2 visible GPU\(s\) \(0,1\)"):
        worker_resources(3, 8, ["0", "1"])
    gpus = worker_resources(2, 8, ["0", "1"])
    assert [r["env"]["CUDA_VISIBLE_DEVICES"] for r in gpus] == ["0", "1"] and [r["threads"] for r in gpus] == [4, 4]
    cpu = worker_resources(2, 3, [])
    assert [r["threads"] for r in cpu] == [1, 1] and cpu[0]["env"]["OMP_NUM_THREADS"] == "1"
    assert "CUDA_VISIBLE_DEVICES" not in cpu[0]["env"]


def played_files(out: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(out.glob("*.jsonl"))}


def test_two_shards_merged_equal_one_workers_play_week_for_week(sft_result, tmp_path):
    checkpoints = {"student_sft": sft_result[0]["model_dir"]}
    one = play_students(CONFIG, checkpoints, tmp_path / "one", threads=1)
    shards = shard_configs(CONFIG, 2)
    folders = [tmp_path / f"shard-{index}" for index in range(len(shards))]
    played = [play_students(shard, checkpoints, folder, threads=1)["files"] for shard, folder in zip(shards, folders)]
    merged = merge_played(folders, played, tmp_path / "merged")

    assert merged == one["files"]  # episodes, invalid rate, sha256, belief_sum: one worker's entries
    assert played_files(tmp_path / "merged") == played_files(tmp_path / "one")
    records = {name: read_trajectories(tmp_path / "merged" / name).records for name in merged}
    assert [r["seed"] for r in records["student_sft__continuous.jsonl"]] == [0, 1, 2, 3, 4]
    # shards that played different players cannot merge
    with pytest.raises(ValueError, match="shard 1 played"):
        merge_played(folders, [played[0], {}], tmp_path / "refused")


def play_in_a_run(compute, checkpoints: dict, out: Path, threads: int) -> dict:
    from rhythm_pipeline.defs.resources import ComputeResource

    @dg.asset
    def played(context: dg.AssetExecutionContext, compute: ComputeResource) -> dg.Output[dict]:
        return dg.Output(compute.play(context, config=CONFIG, checkpoints=checkpoints, out_dir=str(out),
                                      threads=threads))

    with dg.DagsterInstance.ephemeral() as instance:
        result = dg.materialize([played], instance=instance, resources={"compute": compute})
        logs = [e.message for e in instance.all_logs(result.run_id) if e.message]
    return {"result": result.output_for_node("played"), "logs": logs}


@pytest.mark.slow  # three subprocesses load the student: about 70 s on two cores
def test_the_resource_plays_on_two_worker_processes_what_one_plays(sft_result, tmp_path):
    """One process with 2 threads against 2 processes of 1 thread each, as the resource shares them out."""
    from rhythm_pipeline.defs.resources import ComputeResource

    checkpoints = {"student_sft": sft_result[0]["model_dir"]}
    one = play_in_a_run(ComputeResource(), checkpoints, tmp_path / "one", threads=2)
    two = play_in_a_run(ComputeResource(play_workers=2), checkpoints, tmp_path / "two", threads=2)
    assert two["result"]["files"] == one["result"]["files"] and two["result"]["hf_job"] is None
    assert played_files(tmp_path / "two") == played_files(tmp_path / "one")
    assert any("play worker 1/2 (continuous seeds 0-2)" in line for line in two["logs"])
    assert any("play worker 2/2 (continuous seeds 3-4): student_sft on continuous: 2 episodes" in line
               for line in two["logs"])


# A worker that fails after a second (role "fail"), or one that writes its pid and would run for minutes.
WORKER = """
import os, pathlib, sys, time
if os.environ["ROLE"] == "fail":
    time.sleep(1)
    sys.exit("worker broke: no such checkpoint")
pathlib.Path(os.environ["PID_FILE"]).write_text(str(os.getpid()))
time.sleep(300)
"""


def test_a_failed_worker_fails_the_step_naming_itself_and_stops_the_others(tmp_path):
    from rhythm_pipeline.defs.pipes_workers import PipesWorker, run_pipes_workers

    pid_file = tmp_path / "sleeper.pid"
    workers = [PipesWorker("play worker 1/2 (sleeps)", {}, {"ROLE": "sleep", "PID_FILE": str(pid_file)}),
               PipesWorker("play worker 2/2 (fails)", {}, {"ROLE": "fail"})]

    @dg.asset
    def played(context: dg.AssetExecutionContext) -> dg.Output[list]:
        return dg.Output(run_pipes_workers(context, [sys.executable, "-c", WORKER], workers))

    started = time.monotonic()
    with dg.DagsterInstance.ephemeral() as instance:
        result = dg.materialize([played], instance=instance, raise_on_error=False)
    assert not result.success and time.monotonic() - started < 60
    failure = result.get_step_failure_events()[0].step_failure_data.error
    assert ("play worker 2/2 (fails) exited with code 1: worker broke: no such checkpoint "
            "(the other 1 worker(s) were stopped)") in failure.message
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
