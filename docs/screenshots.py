"""Regenerate the README's screenshots from an instance this code materialized (after `make demo`):

    .venv/bin/python docs/screenshots.py [--home dagster_home] [--out docs]

- asset_graph.png: the Dagster UI's global asset lineage (headless Chromium on `dagster dev`, the
  instance copied first so the source stays untouched);
- mlflow_runs.png: the MLflow UI's `rhythm` experiment as it opens (checked to be its runs table,
  not the GenAI traces view);
- mlflow_registry.png: the `rhythm-student` registered model and its versions.

Needs Debian's chromium (`apt-get install chromium`; tests/test_ui.py uses the same helpers).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rhythm_core.tracking.store import MODEL_TRAINING_VIEW, experiment_url  # noqa: E402
from tests.test_ui import (  # noqa: E402 - the helpers the UI test uses
    LINEAGE_PATH,
    chromium_run,
    crop_to_graph,
    dev_server,
    find_chromium,
    free_port,
    page_text,
    pixel_stats,
)

MLFLOW_WINDOW = "1600,1000"


def asset_graph(chromium: str, home: Path, out: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix="rhythm-ui-") as tmp:
        copy = Path(tmp) / "home"
        shutil.copytree(home, copy, ignore=shutil.ignore_patterns("rhythm", ".nux", "*.log"))
        with dev_server(copy, env={"RHYTHM_ARTIFACTS": str(Path(tmp) / "artifacts")}) as running:
            raw = Path(tmp) / "raw.png"
            chromium_run(chromium, running.base + LINEAGE_PATH, f"--screenshot={raw}", window="2800,1100")
            text = page_text(chromium_run(chromium, running.base + LINEAGE_PATH, "--dump-dom", window="2800,1100"))
        crop_to_graph(raw, out / "asset_graph.png")
    assert "registered_student" in text, "the lineage page does not show registered_student"
    return out / "asset_graph.png"


def mlflow_server(store: Path):
    """`mlflow server` on the demo's tracking store (as `make mlflow` runs it), on a free port."""
    port = free_port()
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "mlflow"), "server", "--backend-store-uri",
         f"sqlite:///{store / 'mlflow.db'}", "--default-artifact-root", str(store / "artifacts"),
         "-h", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(base + "/health", timeout=5):
                return proc, base
        except OSError:
            time.sleep(1)
    os.killpg(proc.pid, signal.SIGTERM)
    raise RuntimeError("mlflow server did not answer within 120 s")


def experiment_id(base: str, name: str = "rhythm") -> str:
    with urllib.request.urlopen(f"{base}/api/2.0/mlflow/experiments/get-by-name?experiment_name={name}") as r:
        return json.load(r)["experiment"]["experiment_id"]


def mlflow_pages(chromium: str, store: Path, out: Path) -> list[Path]:
    proc, base = mlflow_server(store)
    try:
        experiment = experiment_id(base)
        runs_url = experiment_url(base, experiment)
        text = page_text(chromium_run(chromium, runs_url, "--dump-dom", window=MLFLOW_WINDOW))
        # The experiment opens on its runs (training and evaluation), not on an empty traces view.
        assert "sft_checkpoint" in text and "eval_results" in text, f"no runs on the experiment's page:\n{text[:3000]}"
        chromium_run(chromium, runs_url, f"--screenshot={out / 'mlflow_runs.png'}", window=MLFLOW_WINDOW)
        registry_url = f"{base}/#/models/rhythm-student?{MODEL_TRAINING_VIEW}"
        text = page_text(chromium_run(chromium, registry_url, "--dump-dom", window=MLFLOW_WINDOW))
        assert "champion" in text, f"no champion alias on the registry page:\n{text[:3000]}"
        chromium_run(chromium, registry_url, f"--screenshot={out / 'mlflow_registry.png'}", window=MLFLOW_WINDOW)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    return [out / "mlflow_runs.png", out / "mlflow_registry.png"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, default=REPO / "dagster_home", help="a DAGSTER_HOME after `make demo`")
    parser.add_argument("--out", type=Path, default=REPO / "docs")
    parser.add_argument("--only", choices=["graph", "mlflow"], default=None)
    args = parser.parse_args()
    chromium = find_chromium()
    if not chromium:
        sys.exit("chromium is not installed: apt-get install -y chromium")
    shots = []
    if args.only in (None, "mlflow"):
        shots += mlflow_pages(chromium, args.home / "storage" / "rhythm" / "mlflow", args.out)
    if args.only in (None, "graph"):
        shots.append(asset_graph(chromium, args.home, args.out))
    for shot in shots:
        colours, ink = pixel_stats(shot)
        print(f"{shot}: {shot.stat().st_size // 1024} KiB, {colours} colours, {ink:.0%} ink")
    return 0


if __name__ == "__main__":
    sys.exit(main())
