"""The teacher stage: play the teacher on training seeds and publish its episodes under
`<root>/teacher_trajectories/<content hash>/`, resuming an interrupted run (the Dagster asset and
`rhythm distill` call it)."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

from rhythm_env.graders import DEFAULT_GRADER, get_grader
from rhythm_env.sim.conditions import check_training_seeds, parse_seeds
from rhythm_env.sim.spec import ENV_VERSION

from ..compute.threads import available_cores
from ..store import (
    ArtifactChanged,
    ArtifactStore,
    LocalStore,
    atomic_write_json,
    files_digest,
    publish_dir,
    sha256_file,
    staging,
    write_jsonl,
)
from .budget import usage_totals
from .run import run_teacher
from .settings import TeacherSettings
from .trajectories import read_trajectories, to_episode_batch


def teacher_stage(settings: TeacherSettings, condition: str, seeds_spec: str, root, *, grader: str = DEFAULT_GRADER,
                  log: Callable[[str], None] | None = None, client=None, workers: int | None = None,
                  store: ArtifactStore | None = None) -> dict:
    """Play the teacher on the training seeds and publish the episodes sorted by seed. `workers`:
    processes an offline teacher plays in (default: the cores this process may use). `store`: the
    artifact store whose cache `root` is; the work file is kept on it as it grows, so a step retried
    on another machine resumes it (and finds the published episodes) instead of paying again.

    Episodes accumulate in `<root>/teacher_trajectories/work/<key>.jsonl` (key = teacher, condition,
    seeds), so an interrupted or over-budget run resumes where it stopped on the next attempt. Once
    published, the episodes are kept once: the work file moves into the published folder and
    `work/<key>.published` points to it, so the next run with the same key plays nothing.
    """
    seeds = parse_seeds(seeds_spec)
    check_training_seeds(condition, seeds)
    stage_root = Path(root) / "teacher_trajectories"
    key = hashlib.sha256(f"{settings.play_key}|{condition}|{seeds_spec}|{ENV_VERSION}".encode()).hexdigest()[:16]
    work = stage_root / "work" / f"{key}.jsonl"
    pointer = work.with_suffix(".published")
    store = store or LocalStore(Path(root))
    sync = store.work_sync(work)
    brought = sync.restore()
    if brought and log:
        log(f"teacher: resuming from the work the store kept ({brought} bytes of {work.name})")
    earlier = _published_earlier(pointer, store)
    if earlier is not None and not work.exists():
        final, version = earlier
        records = read_trajectories(final / "trajectories.jsonl", allow_truncated_tail=False).records
        run = {"episodes_written_this_run": 0, "episodes_resumed": len(records), "invalid_answer_rate": 0.0,
               **dict.fromkeys(("prompt_tokens", "completion_tokens", "requests", "retries", "cached_prompt_tokens",
                                "reasoning_tokens", "length_reasks"), 0),
               "cost_usd": 0.0, "wall_s": 0.0, "work_file": str(pointer), "cache_hit_fraction": 0.0,
               "request_shape": None}
        if log:
            log(f"teacher: the {len(records)} episodes of {seeds_spec} were published before ({final}); nothing to play")
        return _stage_result(final, version, records, settings, condition, seeds_spec, grader, run)
    try:
        result = run_teacher(settings, condition, seeds, work, log=log, client=client, on_episode=lambda _: sync.save(),
                             workers=available_cores() if workers is None else workers)
    finally:
        sync.save(force=True)  # what was played is on the store even when the run stopped
    run = {
        "episodes_written_this_run": result.written, "episodes_resumed": result.skipped,
        "invalid_answer_rate": result.invalid_rate, "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens, "requests": result.requests, "retries": result.retries,
        "cost_usd": result.cost_usd, "wall_s": result.wall_s, "work_file": str(pointer),
        "cached_prompt_tokens": result.cached_prompt_tokens, "reasoning_tokens": result.reasoning_tokens,
        "cache_hit_fraction": round(result.cache_hit_fraction, 4), "length_reasks": result.length_reasks,
        "request_shape": result.request_shape, "stopped_reason": result.stopped_reason,
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
            shutil.copyfile(work, path)  # its lines are jsonl_line(record) already; a large file
        else:
            write_jsonl(path, records)
        version = sha256_file(path)[:16]
        final = publish_dir(staged, stage_root / version, kind="teacher_trajectories", published=True)
    store.publish(final)
    atomic_write_json(pointer, {"version": version, "path": str(final), "files_digest": files_digest(final)})
    sync.finished(pointer)
    work.unlink()  # the published copy is the one kept (a paid teacher's work stays until it is published)
    return _stage_result(final, version, records, settings, condition, seeds_spec, grader, run)


def _published_earlier(pointer: Path, store: ArtifactStore) -> tuple[Path, str] | None:
    """(folder, version) of the published episodes `pointer` names, if the store has them, intact
    (fetched into this machine's cache where they are not there yet)."""
    if not pointer.is_file():
        return None
    recorded = json.loads(pointer.read_text())
    final = pointer.parent.parent / recorded["version"]  # the stage folder, wherever this machine's cache is
    try:
        store.fetch(store.url_of(final), recorded.get("files_digest"))
    except ArtifactChanged:
        if (final / "trajectories.jsonl").is_file() or store.exists(store.url_of(final)):
            raise  # published, but not as recorded
        return None  # removed since: play again
    return final, recorded["version"]


def _stage_result(final: Path, version: str, records: list[dict], settings: TeacherSettings, condition: str,
                  seeds_spec: str, grader: str, run: dict) -> dict:
    batch = to_episode_batch(records, condition)
    steps = sum(len(r["steps"]) for r in records)
    invalid = sum(sum(r["invalid"]) for r in records)
    return {
        "path": str(final / "trajectories.jsonl"), "version": version, "files_digest": files_digest(final),
        "condition": condition, "seeds": seeds_spec,
        "n_episodes": len(records), "n_steps": steps, "invalid_answer_rate": invalid / steps if steps else 0.0,
        "teacher": settings.describe(), "env_version": ENV_VERSION,
        **usage_totals(records),
        "mean_score": {g: float(get_grader(g).grade_batch(batch)[0].mean()) for g in dict.fromkeys([grader, "v2"])},
        "run": run,
    }
