"""Small operational entry points used by tests and benchmarks in fresh processes (the active grader
is read when the definitions load, so switching graders means a new process):

    RHYTHM_GRADER=v2 python -m rhythm_pipeline.ops status        # JSON {asset: unsynced status}
    RHYTHM_GRADER=v2 python -m rhythm_pipeline.ops run regrade   # run a job on $DAGSTER_HOME
    python -m rhythm_pipeline.ops run rhythm_lineage --config '{"ops": {...}}'
"""

import argparse
import json
import sys
import time

import dagster as dg


def _stale_status_resolver():
    """Dagster's own resolver of the UI's sync status. Dagster exposes it only through GraphQL (a
    running server), so this reaches into its internals: checked here, with a message naming the
    Dagster release when they moved."""
    try:
        from dagster._core.definitions.data_version import CachingStaleStatusResolver
        from dagster._core.loader import LoadingContextForTest
    except ImportError as exc:
        raise RuntimeError(f"dagster {dg.__version__} moved the sync-status resolver this command reads "
                           f"(dagster._core.definitions.data_version.CachingStaleStatusResolver, tested with the "
                           f"release in requirements.lock): {exc}") from exc
    return CachingStaleStatusResolver, LoadingContextForTest


def unsynced_status(instance: dg.DagsterInstance, defs: dg.Definitions) -> dict[str, str]:
    """Each asset's sync status as the UI shows it: FRESH, STALE (unsynced) or MISSING."""
    CachingStaleStatusResolver, LoadingContextForTest = _stale_status_resolver()

    graph = defs.resolve_asset_graph()
    resolver = CachingStaleStatusResolver(instance, graph, LoadingContextForTest(instance))
    return {key.to_user_string(): resolver.get_status(key).value for key in graph.get_all_asset_keys()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rhythm_pipeline.ops")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("status")
    run = sub.add_parser("run")
    run.add_argument("job")
    run.add_argument("--config", default="{}")
    args = parser.parse_args(argv)

    from rhythm_pipeline.definitions import defs

    instance = dg.DagsterInstance.get()
    if args.command == "status":
        print(json.dumps(unsynced_status(instance, defs), sort_keys=True))
        return 0
    start = time.perf_counter()
    result = defs.resolve_job_def(args.job).execute_in_process(instance=instance, run_config=json.loads(args.config),
                                                               raise_on_error=False)
    print(json.dumps({"run_id": result.run_id, "success": result.success,
                      "wall_s": round(time.perf_counter() - start, 2)}))
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main())
