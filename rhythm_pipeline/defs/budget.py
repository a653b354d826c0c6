"""The teacher's budget for the whole backfill: each shard's step plays under the resource's per-shard cap
(`max_cost_usd`) and under what the backfill's cap (`backfill_max_cost_usd`) leaves after the shards of the
same backfill that played before it (and those playing beside it, each counted at its own cap). Every
shard's spend is recorded as an observation of its partition, played or stopped, so failures count too."""

from __future__ import annotations

import dataclasses

import dagster as dg

from rhythm_pipeline.defs.partitions import BACKFILL_TAG

TEACHER_KEY = dg.AssetKey("teacher_trajectories")


def record_spend(context: dg.AssetExecutionContext, shard: str, cost_usd: float) -> None:
    """Record what this run of `shard` paid, whether it published or stopped (the backfill's ledger)."""
    context.log_event(dg.AssetObservation(asset_key=TEACHER_KEY, partition=shard,
                                          metadata={"cost_usd": float(cost_usd or 0.0)}))


def backfill_spend(instance: dg.DagsterInstance, backfill_id: str, this_run_id: str) -> tuple[float, int]:
    """(dollars the teacher steps of backfill `backfill_id` recorded so far, its other runs playing a shard now)."""
    runs = instance.get_run_records(filters=dg.RunsFilter(tags={BACKFILL_TAG: backfill_id}))
    run_ids = {r.dagster_run.run_id for r in runs}
    since = min((r.create_timestamp.timestamp() for r in runs), default=None)
    spent, cursor = 0.0, None
    while True:
        page = instance.fetch_observations(dg.AssetRecordsFilter(asset_key=TEACHER_KEY, after_timestamp=since),
                                           limit=500, cursor=cursor)
        for record in page.records:
            cost = record.asset_observation.metadata.get("cost_usd") if record.asset_observation else None
            if record.run_id in run_ids and cost is not None:
                spent += float(cost.value)
        if not page.has_more:
            break
        cursor = page.cursor
    playing = sum(1 for r in runs if r.dagster_run.run_id != this_run_id
                  and r.dagster_run.status == dg.DagsterRunStatus.STARTED
                  and TEACHER_KEY in (r.dagster_run.asset_selection or ()))
    return spent, playing


def teacher_run_budget(context: dg.AssetExecutionContext, teacher) -> object:
    """The teacher settings this shard plays under: the resource's, with `max_cost_usd` lowered to what the
    backfill's cap leaves (a Failure, not retried, once nothing is left)."""
    settings = teacher.settings()
    backfill_id = context.run.tags.get(BACKFILL_TAG)
    cap = teacher.backfill_max_cost_usd
    if cap is None or backfill_id is None or settings.offline:
        return settings
    spent, playing = backfill_spend(context.instance, backfill_id, context.run.run_id)
    reserved = playing * (settings.max_cost_usd or 0.0)
    left = cap - spent - reserved
    context.log.info(f"backfill {backfill_id}: ${spent:.4f} spent by its shards, ${reserved:.4f} reserved by "
                     f"{playing} playing now, ${max(left, 0):.4f} of backfill_max_cost_usd ${cap:.2f} left")
    if left <= 0:
        raise dg.Failure(description=f"backfill {backfill_id} has spent its teacher budget (backfill_max_cost_usd "
                                     f"${cap:.2f}: ${spent:.4f} spent, ${reserved:.4f} reserved); this shard is not "
                                     "played", metadata={"spent_usd": spent, "reserved_usd": reserved},
                         allow_retries=False)
    shard_cap = left if settings.max_cost_usd is None else min(settings.max_cost_usd, left)
    return dataclasses.replace(settings, max_cost_usd=shard_cap)
