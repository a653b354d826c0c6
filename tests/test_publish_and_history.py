"""Publishing over an existing version on a local root never leaves a moment without it, and a
publish killed between its two renames (where the OS cannot exchange two folders in one call) is
put back by the next staging in that folder; the evaluation history is one published file per
write, so writers at once lose no row."""

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import polars as pl

from rhythm_core.evaluation.results import read_history, write_history
from rhythm_core.evaluation.steps import read_store_history
from rhythm_core.store import LocalStore, publish_dir, staging, staging_dir, verify_artifact
from tests.test_operations import _results

REPO = Path(__file__).resolve().parents[1]


def _publish(root: Path, text: str) -> Path:
    with staging(root / "eval_results") as staged:
        (staged / "eval_results.json").write_text(text)
        return publish_dir(staged, root / "eval_results" / "latest", kind="eval_results")


def test_replacing_a_version_exchanges_the_folders_in_one_call(tmp_path):
    _publish(tmp_path, "old")
    final = _publish(tmp_path, "new")
    assert (final / "eval_results.json").read_text() == "new"
    assert sorted(p.name for p in final.parent.iterdir()) == ["latest"]  # no .old- or .staging- left
    verify_artifact(final)


def test_a_publish_killed_between_its_two_renames_keeps_the_previous_version(tmp_path):
    _publish(tmp_path, "old")
    child = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(REPO)!r})
        from pathlib import Path
        from rhythm_core.store import files as artifacts
        artifacts.exchange_dirs = lambda a, b: False  # an OS without renameat2's exchange
        replace = os.replace
        def replace_then_die(src, dst):
            replace(src, dst)
            if Path(dst).name.startswith(".old-"):
                os.kill(os.getpid(), signal.SIGKILL)  # between the two renames
        os.replace = replace_then_die
        root = Path({str(tmp_path)!r})
        with artifacts.staging(root / "eval_results") as staged:
            (staged / "eval_results.json").write_text("new")
            artifacts.publish_dir(staged, root / "eval_results" / "latest", kind="eval_results")
    """)
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL, done.stderr
    folder = tmp_path / "eval_results"
    assert not (folder / "latest").exists() and [p for p in folder.iterdir() if p.name.startswith(".old-latest-")]

    staging_dir(folder)  # what the next publish in this folder does first
    assert (folder / "latest" / "eval_results.json").read_text() == "old"
    verify_artifact(folder / "latest")
    assert not [p for p in folder.iterdir() if p.name.startswith(".old-")]


def test_twenty_evaluations_writing_history_at_once_lose_no_row(tmp_path):
    history = tmp_path / "eval_results" / "history"
    writer = textwrap.dedent(f"""
        import sys, json
        sys.path.insert(0, {str(REPO)!r})
        from rhythm_core.evaluation.results import write_history
        i = int(sys.argv[1])
        write_history({str(history)!r}, json.loads(sys.argv[2]), run_id=f"run{{i}}", timestamp=float(i),
                      rollouts_version="r")
    """)
    procs = [subprocess.Popen([sys.executable, "-c", writer, str(i), json.dumps(_results(i / 100))])
             for i in range(20)]
    assert [p.wait(timeout=300) for p in procs] == [0] * 20
    write_history(history, _results(0.9), run_id="run20", timestamp=20.0, rollouts_version="r")
    table = read_store_history(LocalStore(tmp_path))
    assert table.height == 42 and sorted(set(table["run_id"])) == sorted(f"run{i}" for i in range(21))
    student = table.filter(pl.col("agent") == "student_grpo")
    assert student["final_score"].to_list() == [i / 100 for i in range(20)] + [0.9]


def test_a_rerun_of_the_same_run_replaces_its_rows_and_an_older_history_file_is_kept(tmp_path):
    history = tmp_path / "eval_results" / "history"
    history.parent.mkdir(parents=True)
    pl.DataFrame({"timestamp": [0.5], "run_id": ["old"], "grader": ["v3"], "rollouts": ["r0"], "condition": ["ood"],
                  "seeds": ["0-3"], "agent": ["student_grpo"], "n": [4], "final_score": [0.3], "ci95_lo": [0.2],
                  "ci95_hi": [0.4], "belief_mae": [0.2], "invalid_rate": [0.0]}).write_parquet(
        history.parent / "history.parquet")
    write_history(history, _results(0.4), run_id="a", timestamp=1.0, rollouts_version="r1")
    write_history(history, _results(0.5), run_id="b", timestamp=2.0, rollouts_version="r2")
    write_history(history, _results(0.6), run_id="b", timestamp=3.0, rollouts_version="r2")  # b again
    table = read_store_history(LocalStore(tmp_path))
    student = table.filter(pl.col("agent") == "student_grpo")
    assert student["run_id"].to_list() == ["old", "a", "b"] and student["final_score"].to_list() == [0.3, 0.4, 0.6]
    folders = sorted(p.parent for p in history.glob("*/.rhythm-files.json"))
    assert len(folders) == 3 and read_history(folders).height == 4  # without the older file
    os.remove(history.parent / "history.parquet")


def test_a_staging_folder_that_already_holds_its_record_is_no_version(tmp_path):
    from rhythm_core.store import write_files_manifest

    history = tmp_path / "eval_results" / "history"
    write_history(history, _results(0.4), run_id="a", timestamp=1.0, rollouts_version="r1")
    # another (live) writer's staging, its record written, caught just before its rename into place
    import socket

    staged = history / f".staging-{socket.gethostname()}-{os.getpid()}-caught"
    staged.mkdir()
    write_files_manifest(staged, "eval_history", published=True)
    write_history(history, _results(0.5), run_id="b", timestamp=2.0, rollouts_version="r2")
    assert sorted(set(read_store_history(LocalStore(tmp_path))["run_id"])) == ["a", "b"]
    versions = LocalStore(tmp_path).list_versions("eval_results/history")
    assert len(versions) == 2 and not any("/.staging" in v for v in versions)
