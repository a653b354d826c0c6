"""The data stages: the re-grade report and the SFT dataset, each published under
`<root>/<stage>/<content hash>/` (the Dagster assets and `rhythm distill` call them)."""

from __future__ import annotations

from pathlib import Path

from rhythm_env.graders import DEFAULT_GRADER
from rhythm_env.protocol import DEFAULT_PROMPT_FORMAT, DEFAULT_READOUT_FORM, DEFAULT_REASONING
from rhythm_env.sim.spec import ENV_VERSION

from ..store import files_digest, path_under, publish_dir, sha256_file, staging
from ..teacher.shards import teacher_records


def reeval_stage(trajectories, grader: str, root, *, compare_grader: str = "v2",
                 files_digest_recorded: str | None = None) -> dict:
    """Re-grade the teacher's episodes and baselines on the same seeds; publish parquet + JSON + md.
    `trajectories`: a trajectory file's path, or the teacher data of one shard or several
    (`teacher.shards.teacher_data`). The episodes are checked against their artifact's record first (and
    `files_digest_recorded` or each shard's `files_digest`, what their materializations recorded)."""
    from .reeval_report import reeval_records, teacher_beats_heuristic, write_report  # polars: only the report needs it

    if not isinstance(trajectories, dict):
        trajectories = {"path": str(trajectories), "files_digest": files_digest_recorded}
    records = teacher_records(trajectories)
    report = reeval_records(records, grader, compare_grader=compare_grader)
    stage_root = Path(root) / "reeval_report"
    with staging(stage_root) as staged:
        write_report(report, staged)
        version = sha256_file(staged / "report.json")[:16]
        final = publish_dir(staged, stage_root / version, kind="reeval_report", published=True)
    return {
        "dir": str(final), "version": version, "files_digest": files_digest(final), "grader": grader, "graders": report.graders,
        "teacher": report.teacher, "n_episodes": len(records),
        "per_episode": str(final / "per_episode.parquet"), "per_condition": str(final / "per_condition.parquet"),
        "json": str(final / "report.json"), "markdown": report.markdown(),
        "teacher_vs_heuristic": {c: list(v) for c, v in teacher_beats_heuristic(report, grader).items()},
        "source_trajectories": trajectories["path"],
    }


DATASET_FILTERS = ("none", "beat_heuristic")


def dataset_stage(trajectories: dict, root, *, filter: str = "none", filter_grader: str = DEFAULT_GRADER,
                  validation_fraction: float = 0.1, split_seed: int = 0,
                  prompt_format: str | None = None, reasoning: str | None = None,
                  readout_form: str | None = None, readout_target: str = "teacher") -> dict:
    """Turn teacher episodes (`trajectories`: the teacher data of one shard or several, merged in seed
    order) into an SFT DatasetDict saved under <root>/sft_dataset/<content hash>.

    filter "beat_heuristic" keeps the episodes where the teacher out-scored the heuristic on the same
    seed under `filter_grader` — a fixed choice of the dataset's config, not the active grader, so a
    grader switch never changes training data (nor, through it, any checkpoint).
    """
    from .sft_dataset import (
        build_sft_dataset,
        content_hash,
        dataset_format,
        evidence_readout,
        save_sft_dataset,
    )

    if filter not in DATASET_FILTERS:
        raise ValueError(f"unknown dataset filter {filter!r}; allowed: {', '.join(DATASET_FILTERS)}")
    records = teacher_records(trajectories)
    keep = None
    if filter == "beat_heuristic":
        from .reeval_report import seeds_where_teacher_beats_heuristic

        keep = seeds_where_teacher_beats_heuristic(records, filter_grader)
    dataset = build_sft_dataset(records, validation_fraction=validation_fraction, keep_seeds=keep, seed=split_seed,
                                prompt_format=prompt_format or DEFAULT_PROMPT_FORMAT,
                                reasoning=reasoning or DEFAULT_REASONING,
                                readout_form=readout_form or DEFAULT_READOUT_FORM, readout_target=readout_target)
    data_format = dataset_format(dataset)
    readout = evidence_readout(dataset)
    digest = content_hash(dataset)
    version = digest[:16]
    provenance = {
        "teacher": records[0]["teacher"], "env_version": ENV_VERSION, "condition": trajectories["condition"],
        "seeds": trajectories["seeds"], **_source(trajectories, root), "filter": filter,
        "filter_grader": filter_grader if filter != "none" else None, "validation_fraction": validation_fraction,
        "split_seed": split_seed, "episodes_in_source": len(records), **data_format.as_dict(),
        **({"readout_form": readout.form, "evidence_readout_fit": readout.fit} if readout is not None else {}),
        **({"readout_target": readout_target} if readout_target != "teacher" else {}),
    }
    summary = save_sft_dataset(dataset, Path(root) / "sft_dataset" / version, provenance, digest=digest, published=True)
    return {**summary, "version": version, "files_digest": files_digest(summary["path"]), "provenance": provenance}


def _source(trajectories: dict, root) -> dict:
    """How a dataset names the episodes it was made from: the shard's file and version (as before shards
    existed), or each shard's."""
    shards = trajectories.get("shards")
    if not shards:
        return {"source_trajectories": path_under(trajectories["path"], root),
                "source_trajectories_version": trajectories["version"]}
    return {"source_trajectories": [path_under(s["path"], root) for s in shards],
            "source_trajectories_version": [s["version"] for s in shards], "teacher_shards": [s["seeds"] for s in shards]}
