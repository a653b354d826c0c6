"""The lineage's stages as plain functions: inputs and a storage root in, a published artifact out,
each in its stage's folder (`teacher.stage`, `data.stages`, `training.publish`) and gathered here.

Dagster assets and the CLI both call these. Each stage writes into a staging directory and publishes
it under `<root>/<stage>/<version>/` in one rename, where the version is a hash of the content, so
the same inputs give the same folder and a crash never leaves a half-written artifact.
"""

from .data.stages import DATASET_FILTERS, dataset_stage, reeval_stage
from .teacher.stage import teacher_stage
from .training.publish import publish_checkpoint, push_checkpoint, train_and_publish

__all__ = ["DATASET_FILTERS", "dataset_stage", "publish_checkpoint", "push_checkpoint", "reeval_stage",
           "teacher_stage", "train_and_publish"]
