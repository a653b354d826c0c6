"""How the lineage is cut for scale: the teacher's data by seed shard, the evaluation by seed window.

- `teacher_shards`: dynamic partitions, each a range of training seeds (`1000-2999`) that a user adds
  (`rhythm shards add`, the launchpad, or `instance.add_dynamic_partitions`) and the teacher plays and
  publishes on its own; a published shard is never played again, so growing the data pays for the new
  shards only. Dynamic, not static: an offline teacher plays thousands of weeks in seconds and an API
  teacher bills each one, so the size a shard should be is the user's, and the presets' ranges (300,
  2,000, 3,000 weeks) share no fixed size that is neither hundreds of runs nor more weeks than asked.
- `eval_windows`: the evaluation seed windows `0`..`9` (rhythm_core.evaluation.rollouts.evaluation_window):
  window 0 is the default evaluation, every window is disjoint from the others and from training seeds.
"""

import dagster as dg

from rhythm_core.evaluation.rollouts import EVAL_WINDOW_COUNT

TEACHER_SHARDS = dg.DynamicPartitionsDefinition(name="teacher_shards")
EVAL_WINDOWS = dg.StaticPartitionsDefinition([str(index) for index in range(EVAL_WINDOW_COUNT)])
DEFAULT_EVAL_WINDOW = "0"
# A run that is part of a backfill carries its id under this tag (Dagster's own).
BACKFILL_TAG = "dagster/backfill"
