"""`make demo`: run the main job (the whole lineage) on the embedded default instance and print
where the results are. Runs show up in the Dagster UI of the same DAGSTER_HOME."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import dagster as dg

from rhythm_pipeline.definitions import defs


def main() -> int:
    instance = dg.DagsterInstance.get()  # DAGSTER_HOME (the Makefile points it at ./dagster_home)
    start = time.perf_counter()
    result = defs.resolve_job_def("rhythm_lineage").execute_in_process(instance=instance, raise_on_error=False)
    wall = time.perf_counter() - start
    print(f"\nrun {result.run_id}: {'SUCCESS' if result.success else 'FAILURE'} in {wall:.1f}s "
          f"(DAGSTER_HOME={instance.root_directory})")
    for event in result.get_asset_materialization_events():
        materialization = event.event_specific_data.materialization
        meta = materialization.metadata
        where = meta.get("artifact_path")
        print(f"- {materialization.asset_key.to_user_string()}: {where.value if where else ''}")
        if "results" in meta:
            print(meta["results"].value)
            results_dir = Path(where.value).parent
            print(f"  eval_results.json, final_scores.png, belief_accuracy.png in {results_dir}")
    for evaluation in result.get_asset_check_evaluations():
        status = "passed" if evaluation.passed else f"FAILED ({evaluation.severity.value})"
        print(f"- check {evaluation.asset_key.to_user_string()}.{evaluation.check_name}: {status}: {evaluation.description}")
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main())
