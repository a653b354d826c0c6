"""After a grader change exactly the grading assets are unsynced, and `regrade` re-materializes only
them, from stored trajectories, with the new grader's scores. Each step runs in a fresh process,
as a user's would: the active grader is fixed when the definitions load."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from tests.test_pipeline_training import SMALL as PIPELINE_SMALL

REPO = Path(__file__).resolve().parents[1]
SMALL = {"ops": {
    "sft_checkpoint": {"config": {"max_steps": 10, "short_context_steps": 0}},
    "grpo_checkpoint": PIPELINE_SMALL["ops"]["grpo_checkpoint"],
    "eval_rollouts": {"config": {"continuous_seeds": "0-3", "ood_seeds": "10000-10001",
                                 "discrete3_seeds": "20000-20002", "max_new_tokens": 48}},
}}
GRADING = {"reeval_report", "eval_results"}


def ops(home: Path, artifacts: Path, grader: str, *args: str, pythonpath: Path | None = None) -> dict:
    env = {**os.environ, "DAGSTER_HOME": str(home), "RHYTHM_ARTIFACTS": str(artifacts), "RHYTHM_GRADER": grader}
    if pythonpath is not None:  # the packages of an edited checkout (run from there: `-m` puts the cwd first)
        env["PYTHONPATH"] = str(pythonpath)
    out = subprocess.run([sys.executable, "-m", "rhythm_pipeline.ops", *args], cwd=pythonpath or REPO, env=env,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_grader_switch_marks_and_regrades_only_the_grading_assets(tmp_path):
    home, artifacts = tmp_path / "home", tmp_path / "artifacts"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")

    full = ops(home, artifacts, "v3", "lineage", "--shards", "1000-1007", "--window", "0", "--config", json.dumps(SMALL))
    assert full["success"]
    fresh = ops(home, artifacts, "v3", "status")
    assert set(fresh.values()) == {"FRESH"}, json.dumps(fresh)

    status = ops(home, artifacts, "v2", "status")
    assert {asset for asset, s in status.items() if s != "FRESH"} == GRADING

    # A user's edit to training code: the assets whose computation runs it are unsynced (SFT, and GRPO,
    # whose training entry runs either stage), nothing above and not the evaluation, whose play runs no
    # training code; Dagster 1.13 marks an asset unsynced by its own code version and its inputs' data
    # versions, so the evaluation follows once the checkpoints are re-materialized. A comment-only edit
    # changes nothing.
    from tests.test_code_version import clone, edit_function

    edited = clone(tmp_path / "edited")
    edit_function(edited / "rhythm_core" / "training" / "sft.py", "run_sft", "assert out is not None")
    status = ops(home, artifacts, "v3", "status", pythonpath=edited)
    assert {asset for asset, s in status.items() if s != "FRESH"} == {"sft_checkpoint", "grpo_checkpoint"}, status
    commented = clone(tmp_path / "commented")
    sft = commented / "rhythm_core" / "training" / "sft.py"
    sft.write_text("# only a comment\n" + sft.read_text())
    assert set(ops(home, artifacts, "v3", "status", pythonpath=commented).values()) == {"FRESH"}

    regrade = ops(home, artifacts, "v2", "run", "regrade", "--partition", "0")
    assert regrade["success"]
    after = ops(home, artifacts, "v2", "status")
    assert set(after.values()) == {"FRESH"}, after

    with dg.DagsterInstance.from_config(str(home)) as instance:
        records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=dg.AssetKey("eval_results")),
                                                  limit=10).records
        by_run: dict[str, set] = {}
        for key in map(dg.AssetKey, ["teacher_trajectories", "reeval_report", "sft_dataset", "sft_checkpoint",
                                     "grpo_checkpoint", "eval_rollouts", "eval_results"]):
            for record in instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key), limit=10).records:
                by_run.setdefault(record.run_id, set()).add(key.to_user_string())
        assert by_run[regrade["run_id"]] == GRADING  # nothing upstream re-ran
        steps = {e.step_key for e in instance.all_logs(regrade["run_id"]) if e.step_key}
        assert not any(s.startswith(("teacher", "sft_", "grpo", "eval_rollouts")) for s in steps)

        latest, first = records[0].asset_materialization, records[-1].asset_materialization
        assert latest.metadata["grader"].value == "v2" and first.metadata["grader"].value == "v3"
        before, after = first.metadata["scores"].value, latest.metadata["scores"].value
        assert before.keys() == after.keys() and before != after  # the scores are the new grader's
        report = instance.get_latest_materialization_event(dg.AssetKey("reeval_report")).asset_materialization
        assert report.metadata["grader"].value == "v2" and "**grader v2**" in report.metadata["report"].value
