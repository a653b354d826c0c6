"""Training on N data-parallel processes (rhythm_core.compute.launch, rhythm_core.training.distributed,
ComputeResource.processes): the same recipe as on one process, rank 0 alone writing, a failed or
killed rank failing the stage in one line with no process left."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from rhythm_core.compute.launch import launch_command
from rhythm_core.training.distributed import SHARDING_VAR, check_sharding, sharding_args, split_batch
from rhythm_core.training.entry import run_stage_launched
from rhythm_pipeline.defs.resources import ComputeResource

SFT = {"max_steps": 6, "short_context_steps": 0, "learning_rate": 3e-3, "per_device_train_batch_size": 8,
       "logging_steps": 1, "report_to": "none", "eval_examples": 8}


def _train(dataset: Path, out: Path, processes: int, config: dict, *, stage: str = "sft", init: Path | None = None,
           env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    config_file = out.parent / f"{out.name}.json"
    config_file.write_text(json.dumps(config))
    args = ["--stage", stage, "--config", str(config_file), "--dataset", str(dataset), "--out", str(out),
            *(["--init", str(init)] if init else [])]
    return subprocess.run(launch_command("rhythm_core.training.entry", args, processes), capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})


def _losses(out: Path) -> list[float]:
    history = json.loads((out / "metrics.json").read_text())["log_history"]
    return [e["loss"] for e in history if "loss" in e]


def test_the_global_batch_is_the_configs_on_any_number_of_processes():
    assert split_batch(8, 1, 1) == (8, 1)
    assert split_batch(8, 1, 2) == (4, 1)  # the batch split over the ranks
    assert split_batch(3, 4, 2) == (3, 2)  # else the accumulation steps
    with pytest.raises(ValueError, match="per_device_train_batch_size 3 × gradient_accumulation_steps 1 = 3 sequences"):
        split_batch(3, 1, 2)


def test_the_launch_command_is_the_plain_module_on_one_process_and_torchrun_on_more():
    assert launch_command("m", ["--x", "1"], 1, python="py") == ["py", "-m", "m", "--x", "1"]
    assert launch_command("m", ["--x"], 2, python="py") == ["py", "-m", "rhythm_core.compute.launch", "--processes=2",
                                                             "-m", "m", "--x"]
    with pytest.raises(ValueError, match="processes=0"):
        launch_command("m", [], 0)
    # the Hugging Face job's script writes the same command out (it cannot import rhythm_core)
    from rhythm_core.compute.hf_job_script import entry_command

    for processes in (1, 2, 8):
        assert entry_command("m", processes) == launch_command("m", [], processes)


def test_fsdp_is_an_option_of_the_launch_that_training_arguments_accept(monkeypatch):
    from transformers import TrainingArguments

    with pytest.raises(ValueError, match="needs processes ≥ 2"):
        check_sharding("full_shard", 1)
    with pytest.raises(ValueError, match="allowed"):
        check_sharding("zero3", 2)
    monkeypatch.setenv(SHARDING_VAR, "full_shard")
    monkeypatch.setenv("WORLD_SIZE", "2")
    fields = sharding_args()
    assert fields["fsdp"] == "full_shard auto_wrap" and fields["fsdp_config"]["version"] == 2
    monkeypatch.setenv("WORLD_SIZE", "1")  # TrainingArguments on this one process: the config is accepted
    args = TrainingArguments(output_dir="unused", use_cpu=True, report_to=[], **fields)
    assert args.fsdp and args.fsdp_plugin_args["fsdp_version"] == 2
    assert args.fsdp_plugin_args["reshard_after_forward"] is True


@pytest.mark.slow
def test_sft_on_two_processes_learns_what_one_process_learns(short_dataset, tmp_path):
    one = _train(short_dataset / "sft", tmp_path / "one", 1, SFT)
    assert one.returncode == 0, one.stderr[-3000:]
    logs = []  # the ranks launched as `rhythm distill --processes 2` launches them
    result = run_stage_launched("sft", SFT, str(short_dataset / "sft"), tmp_path / "two", None, {"note": "two"}, 2,
                                logs.append)
    first, second = _losses(tmp_path / "one"), _losses(tmp_path / "two")
    assert len(first) == len(second) == 6  # the same optimizer steps
    # The same examples in every step (the global batch split over the ranks), summed in another order:
    # measured within 2e-7 relative on this CPU.
    assert second == pytest.approx(first, rel=1e-5)
    metrics = json.loads((tmp_path / "two" / "metrics.json").read_text())
    assert metrics["processes"] == 2 and metrics["per_device_train_batch_size"] == 4
    assert json.loads((tmp_path / "one" / "metrics.json").read_text())["per_device_train_batch_size"] == 8
    # rank 0 alone wrote the log and the result
    assert sum("total_steps" in entry for entry in logs) == 1 and [e["loss"] for e in logs if "loss" in e] == second
    assert result["processes"] == 2 and json.loads((tmp_path / "two" / "model" / "README.md").read_text().split(
        "## Data\n\n```json\n")[1].split("```")[0]) == {"note": "two"}

    from rhythm_core.agents.rollout import rollout
    from rhythm_core.training.policy import LLMPolicyAgent

    agent = LLMPolicyAgent.from_checkpoint(tmp_path / "two" / "model")
    episodes = rollout(agent, "continuous", [3])  # the checkpoint loads and plays a week
    assert episodes.actions.shape == (1, 28)


def test_a_killed_rank_stops_the_others_and_the_launch_names_it(short_dataset, tmp_path):
    config_file = tmp_path / "long.json"
    config_file.write_text(json.dumps({**SFT, "max_steps": 2000}))
    command = launch_command("rhythm_core.training.entry", ["--stage", "sft", "--config", str(config_file), "--dataset",
                                                            str(short_dataset / "sft"), "--out", str(tmp_path / "out")], 2)
    launcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "OMP_NUM_THREADS": "1"})
    for line in launcher.stdout:  # training has begun on every rank
        if line.startswith("RHYTHM_LOG") and '"loss"' in line:
            break
    ranks = {int(p.environ().get("RANK", -1)): p for p in psutil.Process(launcher.pid).children(recursive=True)
             if "RANK" in p.environ()}
    assert sorted(ranks) == [0, 1]
    ranks[1].send_signal(signal.SIGKILL)
    killed = time.monotonic()
    _, stderr = launcher.communicate(timeout=120)
    assert launcher.returncode == 1
    assert time.monotonic() - killed < 60
    assert "rank 1 of 2 failed: died of SIGKILL (1 other rank(s) failed or were stopped)" in stderr
    assert not psutil.pid_exists(ranks[0].pid) or ranks[0].status() == psutil.STATUS_ZOMBIE
    assert not (tmp_path / "out" / "result.json").exists()


def test_a_rank_that_raises_fails_the_dagster_step_with_its_error_in_one_line(instance):
    from tests.partitioned import materialize_lineage
    from tests.test_pipeline_training import ALL, RESOURCES

    config = {"ops": {"sft_checkpoint": {"config": {"max_steps": 1, "short_context_steps": 0,
                                                    "per_device_train_batch_size": 3}}}}
    resources = {**RESOURCES, "compute": ComputeResource(processes=2)}
    result = materialize_lineage(ALL[:4], instance, shards=("1000-1003",), resources=resources, run_config=config,
                                 raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert failure.step_key == "sft_checkpoint"
    message = failure.event_specific_data.error.to_string()
    assert "training sft failed: rank " in message and " of 2 failed: ValueError: per_device_train_batch_size 3" in message
    leftover = [p for p in psutil.Process().children(recursive=True) if "rhythm_core.compute.launch" in " ".join(p.cmdline())]
    assert not leftover


@pytest.mark.slow
def test_the_lineage_trains_on_two_processes_grpo_included_and_gates(instance):
    from tests.partitioned import materialize_lineage
    from tests.test_pipeline_training import ALL, RESOURCES, SMALL, SMALL_SHARDS

    resources = {**RESOURCES, "compute": ComputeResource(processes=2)}
    result = materialize_lineage(ALL[:5], instance, shards=SMALL_SHARDS, resources=resources, run_config={"ops": {
        k: v for k, v in SMALL["ops"].items() if k != "eval_rollouts"}})
    assert result.success
    events = {e.asset_key.to_user_string(): e.event_specific_data.materialization.metadata
              for e in result.get_asset_materialization_events()}
    logs = " ".join(str(e.user_message) for run_id in result.run_ids for e in instance.all_logs(run_id))
    assert "training sft on 2 process(es)" in logs and "training grpo on 2 process(es)" in logs
    grpo = events["grpo_checkpoint"]
    assert grpo["validation_difference"].value is not None and grpo["headline_student"].value  # rank 0 ran the gate


@pytest.mark.slow
def test_fsdp_sft_on_two_cpu_processes_matches_ddp(short_dataset, tmp_path):
    ddp = _train(short_dataset / "sft", tmp_path / "ddp", 2, SFT)
    fsdp = _train(short_dataset / "sft", tmp_path / "fsdp", 2, SFT, env={SHARDING_VAR: "full_shard"})
    assert ddp.returncode == 0 and fsdp.returncode == 0, fsdp.stderr[-3000:]
    assert _losses(tmp_path / "fsdp") == pytest.approx(_losses(tmp_path / "ddp"), rel=1e-5)
    assert json.loads((tmp_path / "fsdp" / "metrics.json").read_text())["sharding"] == "full_shard"
    from rhythm_core.training.models import load_model_and_tokenizer

    load_model_and_tokenizer(str(tmp_path / "fsdp" / "model"))  # a whole checkpoint, gathered from the shards
