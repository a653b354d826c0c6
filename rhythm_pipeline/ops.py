"""Operational entry points for scripts, tests and benchmarks, each in a fresh process (the active grader
is read when the definitions load, so switching graders means a new process), through Dagster's public API:

    python -m rhythm_pipeline.ops lineage --shards 1000-2999 --window 0 [--config '{"ops": {...}}']
    RHYTHM_GRADER=v2 python -m rhythm_pipeline.ops status            # JSON {asset: FRESH | STALE | MISSING}
    RHYTHM_GRADER=v2 python -m rhythm_pipeline.ops run regrade --partition 0

`lineage` is the whole lineage as runs in this process, one per piece a run can hold: each teacher shard
(added as a partition first), the training half, then the evaluation window. `make demo` runs the same as
one backfill of the `rhythm` code location.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import dagster as dg

DEFAULT_SHARDS = "1000-2999"  # the demo's teacher weeks, one shard (rhythm_core.distill.DEFAULT_TEACHER_SEEDS)


def job_config(run_config: dict, job: dg.JobDefinition) -> dict:
    """`run_config` cut to what `job` runs: the ops config of its own assets, and everything else as given."""
    ops = {name: value for name, value in (run_config.get("ops") or {}).items()
           if dg.AssetKey(name) in job.asset_layer.executable_asset_keys}
    return {**{k: v for k, v in run_config.items() if k != "ops"}, **({"ops": ops} if ops else {})}


def run_lineage(defs: dg.Definitions, instance: dg.DagsterInstance, *, shards: list[str], window: str,
                run_config: dict | None = None, log=print) -> dict:
    """Every shard of `shards` (added to the teacher_shards partitions first), the training half, then
    evaluation window `window`, each a run in this process; stops at the first run that fails."""
    from rhythm_pipeline.defs.partitions import TEACHER_SHARDS

    run_config = run_config or {}
    known = set(instance.get_dynamic_partitions(TEACHER_SHARDS.name))
    instance.add_dynamic_partitions(TEACHER_SHARDS.name, [s for s in shards if s not in known])
    runs = []
    plan = [("teacher_data", shard) for shard in shards] + [("training", None), ("reevaluate", window)]
    for job_name, partition in plan:
        job = defs.resolve_job_def(job_name)
        start = time.perf_counter()
        result = job.execute_in_process(instance=instance, run_config=job_config(run_config, job),
                                        partition_key=partition, raise_on_error=False)
        runs.append({"job": job_name, "partition": partition, "run_id": result.run_id, "success": result.success,
                     "wall_s": round(time.perf_counter() - start, 2)})
        log(json.dumps(runs[-1]))
        if not result.success:
            break
    return {"success": all(r["success"] for r in runs) and len(runs) == len(plan), "runs": runs}


def _latest(instance: dg.DagsterInstance, key: dg.AssetKey, partition: str | None = None, before: int | None = None):
    """The latest materialization record of `key` (of `partition`; at or before storage id `before`), or None."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition] if partition else None,
                              before_storage_id=None if before is None else before + 1), limit=1).records
    return records[0] if records else None


def _data_version(record) -> str | None:
    return (record.asset_materialization.tags or {}).get("dagster/data_version") if record else None


def _input_changed(instance, parent: dg.AssetKey, partitions: list[str | None], pointer: int) -> bool:
    """Whether any of `partitions` of `parent` has a data version other than the one it had when the
    materialization that read it (at storage id `pointer`) ran."""
    for partition in partitions:
        latest = _latest(instance, parent, partition)
        if latest is not None and latest.storage_id > pointer:
            if _data_version(_latest(instance, parent, partition, before=pointer)) != _data_version(latest):
                return True
    return False


def _materialized(instance, key: dg.AssetKey, partitions_def) -> list[str | None]:
    if partitions_def is None:
        return [None]
    keys = partitions_def.get_partition_keys(dynamic_partitions_store=instance)
    by_partition = instance.get_status_by_partition(key, keys, partitions_def) or {}
    return [p for p, status in by_partition.items() if status is not None and status.value == "MATERIALIZED"]


def unsynced_status(instance: dg.DagsterInstance, defs: dg.Definitions) -> dict[str, str]:
    """Each asset's sync status as the UI judges it, from public records: MISSING (never materialized), STALE
    (its code version is not the one its latest materialization recorded, or an input it read has another
    data version now) or FRESH. A partitioned asset is STALE where any materialized partition is."""
    specs = {spec.key: spec for spec in defs.resolve_all_asset_specs()}
    status = {}
    for key, spec in specs.items():
        states = []
        for partition in _materialized(instance, key, spec.partitions_def):
            record = _latest(instance, key, partition)
            if record is None:
                continue
            tags = record.asset_materialization.tags or {}
            stale = tags.get("dagster/code_version") != spec.code_version
            for dep in spec.deps:
                pointer = tags.get(f"dagster/input_event_pointer/{dep.asset_key.to_user_string()}")
                if stale or pointer is None:
                    continue
                parent = specs[dep.asset_key].partitions_def
                read = ([partition] if parent is not None and parent == spec.partitions_def
                        else _materialized(instance, dep.asset_key, parent))
                stale = _input_changed(instance, dep.asset_key, read, int(pointer))
            states.append("STALE" if stale else "FRESH")
        status[key.to_user_string()] = "MISSING" if not states else "STALE" if "STALE" in states else "FRESH"
    return status


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rhythm_pipeline.ops")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("status")
    run = sub.add_parser("run")
    run.add_argument("job")
    run.add_argument("--partition", default=None)
    run.add_argument("--config", default="{}")
    lineage = sub.add_parser("lineage")
    lineage.add_argument("--shards", default=DEFAULT_SHARDS, help="teacher shards, comma-separated (default: %(default)s)")
    lineage.add_argument("--window", default="0", help="the evaluation window (default: %(default)s)")
    lineage.add_argument("--config", default="{}")
    args = parser.parse_args(argv)

    from rhythm_pipeline.definitions import defs

    instance = dg.DagsterInstance.get()
    if args.command == "status":
        print(json.dumps(unsynced_status(instance, defs), sort_keys=True))
        return 0
    start = time.perf_counter()
    if args.command == "lineage":
        outcome = run_lineage(defs, instance, shards=args.shards.split(","), window=args.window,
                              run_config=json.loads(args.config), log=lambda line: print(line, file=sys.stderr))
        print(json.dumps({**outcome, "wall_s": round(time.perf_counter() - start, 2)}))
        return 0 if outcome["success"] else 1
    job = defs.resolve_job_def(args.job)
    result = job.execute_in_process(instance=instance, run_config=job_config(json.loads(args.config), job),
                                    partition_key=args.partition, raise_on_error=False)
    print(json.dumps({"run_id": result.run_id, "success": result.success,
                      "wall_s": round(time.perf_counter() - start, 2)}))
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main())
