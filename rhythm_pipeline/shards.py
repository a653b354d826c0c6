"""`rhythm shards`: the teacher shards of the instance at $DAGSTER_HOME (the `teacher_shards` partitions):
list them with what each holds, or add new ones. A shard is played by materializing its partition (the
`teacher_data` job, a backfill in the UI, or `make demo` for the demo's); adding one plays nothing.

    rhythm shards list
    rhythm shards add 3000-3999 [--size 500]     # 3000-3499 and 3500-3999
"""

import json

import dagster as dg

# `rhythm shards`'s line in `rhythm --help` (read from this source without importing Dagster).
DESCRIPTION = "list or add the teacher's seed shards (the teacher_shards partitions of $DAGSTER_HOME)"


def add_shards(instance: dg.DagsterInstance, spec: str, size: int | None = None) -> list[str]:
    """Add `spec` (`first-last`, cut into shards of `size` seeds if given) to the teacher_shards partitions;
    returns the keys added. A shard that is not one range of training seeds, or that shares a seed with a
    shard already there, is refused before anything is added."""
    from rhythm_core.teacher.shards import check_disjoint, shard_range, split_range
    from rhythm_pipeline.defs.partitions import TEACHER_SHARDS

    seeds = shard_range(spec)
    keys = split_range(seeds.start, seeds[-1], size) if size else [spec.strip()]
    existing = instance.get_dynamic_partitions(TEACHER_SHARDS.name)
    new = [k for k in keys if k not in existing]
    check_disjoint([*existing, *new])
    instance.add_dynamic_partitions(TEACHER_SHARDS.name, new)
    return new


def shard_table(instance: dg.DagsterInstance) -> list[dict]:
    """Each shard in seed order with its latest materialization's figures (or `not played`)."""
    from rhythm_core.teacher.shards import shard_range
    from rhythm_pipeline.defs.partitions import TEACHER_SHARDS

    rows = []
    for key in sorted(instance.get_dynamic_partitions(TEACHER_SHARDS.name), key=lambda k: shard_range(k).start):
        records = instance.fetch_materializations(dg.AssetRecordsFilter(
            asset_key=dg.AssetKey("teacher_trajectories"), asset_partitions=[key]), limit=1).records
        meta = records[0].asset_materialization.metadata if records else {}
        rows.append({"shard": key, "published": bool(records),
                     **{name: meta[name].value for name in ("episodes", "cost_usd", "invalid_answer_rate",
                                                            "prompt_tokens", "completion_tokens") if name in meta},
                     **({"version": records[0].asset_materialization.tags.get("dagster/data_version")} if records else {})})
    return rows


def cli(argv: list[str]) -> int:
    """`rhythm shards list|add` (entry point "rhythm.commands": shards). A mistake is one line and exit 2."""
    import os
    import sys

    from rhythm_core.cli.parsing import OneLineParser
    from rhythm_pipeline.lineage import _check_dagster_home

    parser = OneLineParser(prog="rhythm shards", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="every shard with its episodes, cost and version (JSON lines)")
    add = sub.add_parser("add", help="add a range of training seeds as one shard, or as shards of --size seeds")
    add.add_argument("seeds", help="first-last, e.g. 3000-3999")
    add.add_argument("--size", type=int, default=None, help="cut the range into shards of this many seeds")
    parser.add_argument("--debug", action="store_true", help="show the traceback of a mistake too (also RHYTHM_DEBUG=1)")
    args = parser.parse_args(argv)
    try:
        _check_dagster_home()
        instance = dg.DagsterInstance.get()
        if args.command == "add":
            added = add_shards(instance, args.seeds, args.size)
            print(f"added {len(added)} shard(s): {', '.join(added) or 'none (all there already)'}; play them with a "
                  "backfill of teacher_trajectories (the UI, or the teacher_data job)")
            return 0
        for row in shard_table(instance):
            print(json.dumps(row))
        return 0
    except ValueError as exc:
        if args.debug or os.environ.get("RHYTHM_DEBUG", "") not in ("", "0"):
            raise
        print(f"rhythm shards: error: {exc}", file=sys.stderr)
        return 2
