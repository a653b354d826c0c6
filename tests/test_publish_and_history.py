"""Publishing over an existing version on a local root never leaves a moment without it, and a
publish killed between its two renames (where the OS cannot exchange two folders in one call) is
put back by the next staging in that folder; the evaluation history reads every window's
materializations, so evaluations at once lose no row."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import polars as pl

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


def _evaluation(instance, window: str, score: float, *, run_id: str | None = None):
    """An eval_results materialization of `window` as the asset records it (its rows in the metadata)."""
    import dagster as dg

    from rhythm_core.evaluation.results import evaluation_rows
    from rhythm_pipeline.defs.assets.history import EVALUATION_ROWS

    rows = evaluation_rows(_results(score), window=window, rollouts_version=f"r{window}")
    instance.report_runless_asset_event(dg.AssetMaterialization(
        asset_key="eval_results", partition=window, metadata={EVALUATION_ROWS: dg.MetadataValue.json(rows)}))


def test_the_history_reads_every_window_and_evaluation_from_the_partitions(tmp_path):
    """Every eval_results materialization of every window, in time order, with the one being made; twenty
    evaluations recorded at once (the instance's event log is their one writer) lose no row."""
    import threading

    import dagster as dg

    from rhythm_core.evaluation.results import evaluation_rows, history_markdown
    from rhythm_pipeline.defs.assets.history import evaluation_history

    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        assert evaluation_history(instance, dg.AssetKey("eval_results")).is_empty()
        threads = [threading.Thread(target=_evaluation, args=(instance, str(i % 10), i / 100)) for i in range(20)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        current = ("current-run", 2e9, evaluation_rows(_results(0.9), window="3", rollouts_version="r3"))
        table = evaluation_history(instance, dg.AssetKey("eval_results"), current=current, page=7)
    assert table.height == 42  # 21 evaluations x (student, heuristic)
    student = table.filter(pl.col("agent") == "student_grpo")
    assert sorted(student["final_score"].to_list()[:-1]) == [i / 100 for i in range(20)]
    assert student["final_score"].to_list()[-1] == 0.9 and student["run_id"].to_list()[-1] == "current-run"
    assert sorted(set(student["window"].to_list())) == [str(w) for w in range(10)]
    assert "| 3 | v3 | continuous | 0-3 | student_grpo | 0.900 |" in history_markdown(table)


def test_a_run_that_evaluated_a_window_twice_keeps_its_latest_rows():
    from rhythm_core.evaluation.results import evaluation_rows, history_rows

    def rows(score, window="0"):
        return evaluation_rows(_results(score), window=window, rollouts_version="r")

    table = history_rows([("a", 1.0, rows(0.4)), ("b", 2.0, rows(0.5)), ("b", 3.0, rows(0.6)),
                          ("b", 4.0, rows(0.7, window="1"))])
    student = table.filter(pl.col("agent") == "student_grpo")
    assert student["run_id"].to_list() == ["a", "b", "b"] and student["final_score"].to_list() == [0.4, 0.6, 0.7]


def test_a_staging_folder_that_already_holds_its_record_is_no_version(tmp_path):
    from rhythm_core.store import write_files_manifest

    def publish(name: str):
        with staging(tmp_path / "eval_results") as staged:
            (staged / "eval_results.json").write_text(name)
            publish_dir(staged, tmp_path / "eval_results" / name, kind="eval_results", published=True)

    publish("a")
    # another (live) writer's staging, its record written, caught just before its rename into place
    import socket

    staged = tmp_path / "eval_results" / f".staging-{socket.gethostname()}-{os.getpid()}-caught"
    staged.mkdir()
    write_files_manifest(staged, "eval_results", published=True)
    publish("b")
    versions = LocalStore(tmp_path).list_versions("eval_results")
    assert len(versions) == 2 and not any("/.staging" in v for v in versions)
