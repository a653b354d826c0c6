"""Scheduled re-evaluation (off by default; turn it on in the UI under Automation).

Every Monday 06:00 UTC it re-runs eval_rollouts and eval_results for the latest checkpoints on the
next window of evaluation seeds (derived from the tick's week number, still disjoint from training
seeds), so eval_results' history table shows drift and variance over time.
"""

import dagster as dg

from rhythm_core.evaluation.rollouts import evaluation_window

WEEK_S = 7 * 24 * 3600


def window_index(when) -> int:
    return int(when.timestamp() // WEEK_S)


@dg.schedule(job_name="reevaluate", cron_schedule="0 6 * * 1", execution_timezone="UTC",
             default_status=dg.DefaultScheduleStatus.STOPPED,
             description="Weekly re-evaluation of the latest checkpoints on a fresh window of evaluation seeds.")
def weekly_reevaluation(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
    index = window_index(context.scheduled_execution_time)
    seeds = evaluation_window(index)
    return dg.RunRequest(
        run_key=f"reevaluation-{index}",
        run_config={"ops": {"eval_rollouts": {"config": {"continuous_seeds": seeds["continuous"],
                                                         "ood_seeds": seeds["ood"],
                                                         "discrete3_seeds": seeds["discrete3"]}}}},
        tags={"rhythm/eval_window": str(index), **{f"rhythm/{c}_seeds": s for c, s in seeds.items()}},
    )
