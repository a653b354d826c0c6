"""The lineage's stages as plain functions: inputs and a storage root in, a published artifact out.

Dagster assets and the CLI both call these. Each stage writes into a staging directory and publishes
it under `<root>/<stage>/<version>/` in one rename, where the version is a hash of the content, so
the same inputs give the same folder and a crash never leaves a half-written artifact.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

from .artifacts import publish_dir, rebase_paths, sha256_file, staging, write_jsonl, write_result
from .compute.threads import available_cores
from .data.reeval_report import reeval_records, teacher_beats_heuristic, write_report
from .env.conditions import check_training_seeds, parse_seeds
from .env.spec import ENV_VERSION
from .graders import get_grader
from .protocol import DEFAULT_PROMPT_FORMAT, DEFAULT_REASONING
from .teacher.budget import usage_totals
from .teacher.run import run_teacher
from .teacher.settings import TeacherSettings
from .teacher.trajectories import read_trajectories, to_episode_batch


def teacher_stage(settings: TeacherSettings, condition: str, seeds_spec: str, root, *, grader: str = "v3",
                  log: Callable[[str], None] | None = None, client=None, workers: int | None = None) -> dict:
    """Play the teacher on the training seeds and publish the episodes sorted by seed. `workers`:
    processes the Bayesian teacher plays in (default: the cores this process may use).

    Episodes accumulate in `<root>/teacher_trajectories/work/<key>.jsonl` (key = teacher, condition,
    seeds), so an interrupted or over-budget run resumes where it stopped on the next attempt.
    """
    seeds = parse_seeds(seeds_spec)
    check_training_seeds(condition, seeds)
    stage_root = Path(root) / "teacher_trajectories"
    key = hashlib.sha256(f"{settings.teacher_id}|{condition}|{seeds_spec}|{ENV_VERSION}".encode()).hexdigest()[:16]
    work = stage_root / "work" / f"{key}.jsonl"
    result = run_teacher(settings, condition, seeds, work, log=log, client=client,
                         workers=available_cores() if workers is None else workers)
    run = {
        "episodes_written_this_run": result.written, "episodes_resumed": result.skipped,
        "invalid_answer_rate": result.invalid_rate, "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens, "requests": result.requests, "retries": result.retries,
        "cost_usd": result.cost_usd, "wall_s": result.wall_s, "work_file": str(work),
        "cached_prompt_tokens": result.cached_prompt_tokens, "reasoning_tokens": result.reasoning_tokens,
        "cache_hit_fraction": round(result.cache_hit_fraction, 4), "length_reasks": result.length_reasks,
        "request_shape": result.request_shape,
    }
    result.raise_if_incomplete("teacher run", run)
    records = read_trajectories(work, allow_truncated_tail=False).records
    in_order = [r["seed"] for r in records] == sorted(seeds)  # a fresh Bayesian run: the file as it is
    if not in_order:
        wanted = set(seeds)
        records = sorted((r for r in records if r["seed"] in wanted), key=lambda r: r["seed"])
    with staging(stage_root) as staged:
        path = staged / "trajectories.jsonl"
        if in_order:
            shutil.copyfile(work, path)  # its lines are jsonl_line(record) already; 190 MB at 2,000 weeks
        else:
            write_jsonl(path, records)
        version = sha256_file(path)[:16]
        final = publish_dir(staged, stage_root / version, kind="teacher_trajectories")
    batch = to_episode_batch(records, condition)
    steps = sum(len(r["steps"]) for r in records)
    invalid = sum(sum(r["invalid"]) for r in records)
    return {
        "path": str(final / "trajectories.jsonl"), "version": version, "condition": condition, "seeds": seeds_spec,
        "n_episodes": len(records), "n_steps": steps, "invalid_answer_rate": invalid / steps if steps else 0.0,
        "teacher": settings.describe(), "env_version": ENV_VERSION,
        **usage_totals(records),
        "mean_score": {g: float(get_grader(g).grade_batch(batch)[0].mean()) for g in dict.fromkeys([grader, "v2"])},
        "run": run,
    }


def reeval_stage(trajectories_path, grader: str, root, *, compare_grader: str = "v2") -> dict:
    """Re-grade the teacher's episodes and baselines on the same seeds; publish parquet + JSON + md."""
    records = read_trajectories(trajectories_path, allow_truncated_tail=False).records
    report = reeval_records(records, grader, compare_grader=compare_grader)
    stage_root = Path(root) / "reeval_report"
    with staging(stage_root) as staged:
        write_report(report, staged)
        version = sha256_file(staged / "report.json")[:16]
        final = publish_dir(staged, stage_root / version, kind="reeval_report")
    return {
        "dir": str(final), "version": version, "grader": grader, "graders": report.graders,
        "teacher": report.teacher, "n_episodes": len(records),
        "per_episode": str(final / "per_episode.parquet"), "per_condition": str(final / "per_condition.parquet"),
        "json": str(final / "report.json"), "markdown": report.markdown(),
        "teacher_vs_heuristic": {c: list(v) for c, v in teacher_beats_heuristic(report, grader).items()},
        "source_trajectories": str(trajectories_path),
    }


DATASET_FILTERS = ("none", "beat_heuristic")


def dataset_stage(trajectories: dict, root, *, filter: str = "none", filter_grader: str = "v3",
                  validation_fraction: float = 0.1, split_seed: int = 0,
                  prompt_format: str | None = None, reasoning: str | None = None) -> dict:
    """Turn teacher episodes into an SFT DatasetDict saved under <root>/sft_dataset/<content hash>.

    filter "beat_heuristic" keeps the episodes where the teacher out-scored the heuristic on the same
    seed under `filter_grader` — a fixed choice of the dataset's config, not the active grader, so a
    grader switch never changes training data (nor, through it, any checkpoint).
    """
    from .data.reeval_report import seeds_where_teacher_beats_heuristic
    from .data.sft_dataset import (
        build_sft_dataset,
        content_hash,
        dataset_format,
        evidence_readout,
        save_sft_dataset,
    )

    if filter not in DATASET_FILTERS:
        raise ValueError(f"unknown dataset filter {filter!r}; allowed: {', '.join(DATASET_FILTERS)}")
    records = read_trajectories(trajectories["path"], allow_truncated_tail=False).records
    keep = seeds_where_teacher_beats_heuristic(records, filter_grader) if filter == "beat_heuristic" else None
    dataset = build_sft_dataset(records, validation_fraction=validation_fraction, keep_seeds=keep, seed=split_seed,
                                prompt_format=prompt_format or DEFAULT_PROMPT_FORMAT,
                                reasoning=reasoning or DEFAULT_REASONING)
    data_format = dataset_format(dataset)
    readout = evidence_readout(dataset)
    digest = content_hash(dataset)
    version = digest[:16]
    provenance = {
        "teacher": records[0]["teacher"], "env_version": ENV_VERSION, "condition": trajectories["condition"],
        "seeds": trajectories["seeds"], "source_trajectories": trajectories["path"],
        "source_trajectories_version": trajectories["version"], "filter": filter,
        "filter_grader": filter_grader if filter != "none" else None, "validation_fraction": validation_fraction,
        "split_seed": split_seed, "episodes_in_source": len(records), **data_format.as_dict(),
        **({"evidence_readout_fit": readout.fit} if readout is not None else {}),
    }
    summary = save_sft_dataset(dataset, Path(root) / "sft_dataset" / version, provenance, digest=digest)
    return {**summary, "version": version, "provenance": provenance}


def train_and_publish(root, stage: str, train: Callable[[Path], None]) -> dict:
    """Run `train(staged_dir)` (which leaves result.json and model/ there) and publish the directory
    with `publish_checkpoint`; a failed run leaves nothing behind."""
    with staging(Path(root) / stage) as staged:
        train(staged)
        return publish_checkpoint(staged, root, stage)


def publish_checkpoint(staged, root, stage: str) -> dict:
    """Publish a trained stage's directory under <root>/<stage>/<weights hash>; returns result.json
    with its paths rewritten to the published location."""
    staged = Path(staged)
    result = json.loads((staged / "result.json").read_text())
    weights = sorted((staged / "model").glob("*.safetensors"))
    if not weights:
        raise FileNotFoundError(f"{staged / 'model'}: the training run saved no *.safetensors weights")
    digest = hashlib.sha256()
    for w in weights:
        digest.update(sha256_file(w).encode())
    version = digest.hexdigest()[:16]
    final = publish_dir(staged, Path(root) / stage / version, kind="checkpoint")
    result = rebase_paths(result, staged, final)
    write_result(final, result)
    return {**result, "version": version, "path": str(final)}


def push_checkpoint(model_dir, repo_id: str, *, api, private: bool = True) -> dict:
    """Upload a checkpoint directory to a Hub model repo; returns repo id, revision and URL."""
    api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
    commit = api.upload_folder(folder_path=str(model_dir), repo_id=repo_id, repo_type="model",
                               commit_message=f"rhythm checkpoint from {Path(model_dir).parent.name}")
    return {"repo_id": repo_id, "revision": commit.oid, "url": f"https://huggingface.co/{repo_id}"}
