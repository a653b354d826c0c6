"""The evaluation as steps that may run on different machines, sharing nothing but the artifact store:
a run's staging folder (plan, play per condition, publish), each step's view of the plan in its own
cache, and the provenance the rollouts record."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..store import STAGING_PREFIX, ArtifactStore

# A run's evaluation steps write into `<cache>/eval_rollouts/.staging-run-<run id>`.
RUN_STAGING_PREFIX = f"{STAGING_PREFIX}run-"


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
