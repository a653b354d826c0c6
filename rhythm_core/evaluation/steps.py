"""The evaluation as steps that may run on different machines, sharing nothing but the artifact store:
a run's staging folder (plan, play per condition, publish), each step's view of the plan in its own
cache, the provenance the rollouts record, and the history of every evaluation."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..store import STAGING_PREFIX, ArtifactStore
from .results import read_history, write_history

# A run's evaluation steps write into `<cache>/eval_rollouts/.staging-run-<run id>`.
RUN_STAGING_PREFIX = f"{STAGING_PREFIX}run-"
# The single-file history evaluations appended to before each wrote its own published rows.
LEGACY_HISTORY = Path("eval_results") / "history.parquet"
HISTORY_DIR = "eval_results/history"


def run_staging_dir(store: ArtifactStore, run_id: str, run_is_live: Callable[[str], bool]) -> Path:
    """The staging folder of run `run_id`'s evaluation steps, after removing those of runs that are
    no longer running (`run_is_live(run id)` False), here and on the store."""
    parent = store.cache / "eval_rollouts"
    parent.mkdir(parents=True, exist_ok=True)
    for name in store.shared_folders(parent, RUN_STAGING_PREFIX):
        if not run_is_live(name.removeprefix(RUN_STAGING_PREFIX)):
            store.remove_shared(parent / name)
    staged = parent / f"{RUN_STAGING_PREFIX}{run_id}"
    staged.mkdir(exist_ok=True)
    return staged


def remove_run_staging(store: ArtifactStore, run_id: str) -> None:
    """Remove run `run_id`'s staging folder (a run that stopped)."""
    store.remove_shared(store.cache / "eval_rollouts" / f"{RUN_STAGING_PREFIX}{run_id}")


def localized_plan(store: ArtifactStore, plan: dict, *, students: bool = True) -> dict:
    """The plan (in the store's terms) for one step: its paths in this step's cache, the students
    fetched there and checked (`students`), the staging folder made here; `recorded_as` names each
    student as the store does, whatever cache it was read from."""
    if students:
        for checkpoint in plan["upstream"].values():
            store.fetch_value(checkpoint)
    local = store.to_local(plan)
    Path(local["staged"]).mkdir(parents=True, exist_ok=True)
    return {**local, "recorded_as": {name: store.name_of(ref) for name, ref in plan["checkpoints"].items()}}


def rollouts_provenance(store: ArtifactStore, sft: dict, grpo: dict, seeds: dict, distilled_from: str | None) -> dict:
    """What eval_rollouts records about the students it played."""
    return {"grpo_checkpoint_version": grpo["version"], "sft_checkpoint_version": sft["version"],
            "base_model": sft.get("base_model"), "sft_checkpoint": store.name_of(sft["model_dir"]),
            "grpo_checkpoint": store.name_of(grpo["model_dir"]), "seeds": seeds,
            # the better student on the held-out training weeks GRPO was validated on (the gate)
            "headline_student": (grpo.get("validation") or {}).get("better", "student_grpo"),
            # recovery is measured against it (and against the Bayesian teacher)
            "distilled_from": distilled_from}


def publish_history(store: ArtifactStore, results: dict, *, run_id: str, timestamp: float,
                    rollouts_version: str) -> tuple[object, str]:
    """Publish this evaluation's rows (one version per evaluation, so evaluations at once never lose
    each other's rows) and read the whole history back through the store: (table, where it lives)."""
    history_dir = store.cache / HISTORY_DIR
    store.publish(write_history(history_dir, results, run_id=run_id, timestamp=timestamp,
                                rollouts_version=rollouts_version))
    return read_store_history(store), store.url_of(history_dir)


def read_store_history(store: ArtifactStore):
    """The history of every evaluation as `eval_results` reads it: every row file the store lists,
    each fetched and verified, plus the older single-file history where there is one."""
    return read_history([store.fetch(url) for url in store.list_versions(HISTORY_DIR)],
                        legacy=store.cache / LEGACY_HISTORY)
