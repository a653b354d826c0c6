"""The link `make mlflow` prints before it serves a local tracking store: the rhythm experiment's runs.

MLflow 3's UI opens an experiment clicked in its list on the GenAI overview (traces), empty for
rhythm's training and evaluation runs; the experiment's own runs page opens on them, and its address
needs the experiment's id. The id is read from the store's SQLite file, read-only: nothing is
created, neither the file nor the experiment. A store without the experiment yet gets the list link.

    python -m rhythm_core.tracking.ui_link STORE_DIR [--ui-url URL] [--experiment NAME]
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path
from urllib.request import pathname2url

from .store import DEFAULT_EXPERIMENT, DEFAULT_UI_URL, MODEL_TRAINING_VIEW, experiment_url


def stored_experiment_id(db: Path, experiment: str = DEFAULT_EXPERIMENT) -> str | None:
    """The id of the active experiment named `experiment` in the SQLite tracking store `db`; None when
    the file, its tables or the experiment are not there. Opened read-only: nothing is written."""
    if not Path(db).is_file():
        return None
    try:
        with sqlite3.connect(f"file:{pathname2url(str(Path(db).resolve()))}?mode=ro", uri=True) as connection:
            row = connection.execute("SELECT experiment_id FROM experiments WHERE name = ? AND "
                                     "lifecycle_stage = 'active'", (experiment,)).fetchone()
    except sqlite3.Error:  # not an MLflow store (yet): no experiments table
        return None
    return None if row is None else str(row[0])


def runs_link(store_dir, ui_url: str = DEFAULT_UI_URL, experiment: str = DEFAULT_EXPERIMENT) -> str:
    """What `make mlflow` prints for the store in `store_dir` (its mlflow.db): the experiment's runs
    page, or the experiments list and why."""
    db = Path(store_dir) / "mlflow.db"
    experiment_id = stored_experiment_id(db, experiment)
    if experiment_id is not None:
        return f"MLflow UI: {experiment_url(ui_url.rstrip('/'), experiment_id)} (the {experiment} experiment's runs)"
    return (f"MLflow UI: {ui_url.rstrip('/')}/#/experiments?{MODEL_TRAINING_VIEW} (no {experiment} experiment in "
            f"{db} yet: the first training or evaluation run creates it; `make mlflow` then prints the link to "
            "its runs)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rhythm_core.tracking.ui_link", description=__doc__.splitlines()[0])
    parser.add_argument("store", help="the tracking store's folder (holding mlflow.db)")
    parser.add_argument("--ui-url", default=DEFAULT_UI_URL, help=f"where the UI is served (default: {DEFAULT_UI_URL})")
    parser.add_argument("--experiment", default=DEFAULT_EXPERIMENT,
                        help=f"the experiment's name (default: {DEFAULT_EXPERIMENT})")
    args = parser.parse_args(argv)
    print(runs_link(args.store, args.ui_url, args.experiment))
    return 0


if __name__ == "__main__":
    sys.exit(main())
