"""Scheduled re-evaluation (off by default; turn it on in the UI under Automation).

Every Monday 06:00 UTC it runs the `reevaluate` job on the next evaluation window (a partition of
eval_rollouts and eval_results), so the history shows drift and variance over time. A Monday the daemon
missed leaves its window missing (or unsynced once the checkpoints change): a backfill of those windows
catches up.
"""

import dagster as dg

from rhythm_core.evaluation.rollouts import EVAL_WINDOW_COUNT
from rhythm_pipeline.defs.jobs import reevaluate

WEEK_S = 7 * 24 * 3600


def window_of_week(when) -> str:
    """The evaluation window the week of `when` evaluates: weeks walk the windows in order, 0 after the last."""
    return str(int(when.timestamp() // WEEK_S) % EVAL_WINDOW_COUNT)


@dg.schedule(job=reevaluate, cron_schedule="0 6 * * 1", execution_timezone="UTC",
             default_status=dg.DefaultScheduleStatus.STOPPED,
             description="Weekly re-evaluation of the latest checkpoints on the next evaluation window.")
def weekly_reevaluation(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
    window = window_of_week(context.scheduled_execution_time)
    week = int(context.scheduled_execution_time.timestamp() // WEEK_S)
    return dg.RunRequest(run_key=f"reevaluation-week-{week}", partition_key=window,
                         tags={"rhythm/eval_window": window})
