"""The evaluation history: every materialization of every eval_results window, in time order, read from the
asset's own materializations (each records its rows as metadata). Partitions keep each window's evaluations;
the table puts all windows and re-evaluations side by side, the drift a weekly schedule is for."""

from __future__ import annotations

import dagster as dg

from rhythm_core.evaluation.results import history_rows

EVALUATION_ROWS = "evaluation_rows"  # the metadata entry holding an evaluation's rows


def evaluation_history(instance: dg.DagsterInstance, key: dg.AssetKey, current: tuple | None = None, page: int = 200):
    """The history table (polars) of asset `key`'s materializations, plus `current` (run id, timestamp, rows)
    for the one being made; materializations without rows (before this table read them) are left out."""
    evaluations, cursor = [], None
    while True:
        result = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key), limit=page, cursor=cursor)
        for record in result.records:
            entry = record.asset_materialization.metadata.get(EVALUATION_ROWS) if record.asset_materialization else None
            if entry is not None:
                evaluations.append((record.run_id, record.timestamp, entry.value))
        if not result.has_more:
            break
        cursor = result.cursor
    if current is not None:
        evaluations.append(current)
    return history_rows(evaluations)
