"""Held-out play: students and baselines on the evaluation seeds of every condition.

Rollouts store what happened (observations, prompts, raw answers, parsed beliefs and actions,
invalid flags, meters) and nothing a grader computes, so a grader change re-grades stored
trajectories without running any model again. Files use the trajectory schema of teacher data,
with the `teacher` field naming the player.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

from rhythm_env.sim import VectorRhythmEnv
from rhythm_env.sim.conditions import EVAL_SEEDS, eval_seed_list, get_condition
from rhythm_env.sim.spec import ACTIONS, BELIEF_DIMS, ENV_VERSION

from ..agents import get_agent
from ..agents.rollout import play_lockstep
from ..store import atomic_write_json, files_digest, publish_dir, sha256_file, staging, write_jsonl
from ..teacher.records import episode_record, step_record
from ..teacher.trajectories import read_trajectories
from ..training.side_by_side import run_side_by_side

EVAL_BASELINES = ("random", "heuristic", "heuristic_const_belief", "fallback", "bayes", "bayes_v3", "search", "oracle")
DEFAULT_EVAL_SEEDS = {"continuous": "0-99", "ood": "10000-10049", "discrete3": "20000-20014"}


def teacher_player(checkpoint) -> str | None:
    """The evaluation player that is the teacher a checkpoint was distilled from: an offline teacher's
    agent (`bayes`, `search`), or "teacher" (a model teacher, which plays with include_teacher); None
    when the checkpoint does not say (results then measure recovery against the Bayesian teacher)."""
    from ..agents import AGENTS
    from ..training.models import checkpoint_info

    teacher = checkpoint_info(checkpoint).get("provenance", {}).get("teacher")
    if not teacher:
        return None
    return teacher if teacher in AGENTS else "teacher"


def play_records(agent, condition: str, seeds, identity: dict) -> list[dict]:
    """Play `agent` on `seeds` in lockstep; one trajectory record per episode."""
    get_condition(condition)
    env = VectorRhythmEnv(condition)
    seeds = np.asarray(seeds, dtype=np.int64)
    n = len(seeds)
    steps: list[list[dict]] = [[] for _ in range(n)]
    beliefs: list[list[dict | None]] = [[] for _ in range(n)]
    for step in play_lockstep(agent, env, seeds):
        decision = step.decision
        # the step's newest user turn: the whole table (table format) or the new row and state (chat)
        prompts = [m[-1]["content"] for m in agent.last_messages] if getattr(agent, "last_messages", None) else None
        for i in range(n):
            raw = decision.reasoning[i] if decision.reasoning is not None else None
            parsed = agent.last_parsed[i] if prompts is not None else None
            stated = None
            if decision.beliefs is not None and not np.isnan(decision.beliefs[i]).any():
                stated = {d: float(v) for d, v in zip(BELIEF_DIMS, decision.beliefs[i])}
            beliefs[i].append(stated)
            steps[i].append(step_record(
                step.t, step.obs.item(i), prompts[i] if prompts else None, raw if prompts else None, parsed,
                ACTIONS[decision.actions[i]], bool(decision.invalid[i]) if decision.invalid is not None else False, 1,
                step.next_obs.meters[i], {"prompt_tokens": 0, "completion_tokens": 0, "requests": 0, "retries": 0}))
    return [episode_record(identity, condition, env.seeds[i], steps[i], env.meters_history[i], beliefs[i],
                           {"prompt_tokens": 0, "completion_tokens": 0, "requests": 0, "retries": 0, "cost_usd": 0.0})
            for i in range(n)]


def _players(checkpoints: dict[str, str], baselines, sampling,
             recorded_as: dict[str, str] | None = None) -> list[tuple[str, Callable[[], object], dict]]:
    players = []
    for name, model_dir in checkpoints.items():
        identity = {"backend": "checkpoint", "model": str((recorded_as or {}).get(name, model_dir)), "id": name}
        players.append((name, partial(_checkpoint_agent, model_dir, sampling, name), identity))
    for name in baselines:
        players.append((name, partial(get_agent, name), {"backend": "baseline", "model": name, "id": name}))
    return players


def _checkpoint_agent(model_dir: str, sampling, name: str):
    from ..training.policy import LLMPolicyAgent

    return LLMPolicyAgent.from_checkpoint(model_dir, sampling=sampling, name=name)


def _play_file(name: str, make: Callable[[], object], identity: dict, condition: str, seeds, staged) -> tuple[str, dict, str]:
    """One player on one condition into `staged`/<name>__<condition>.jsonl: the file's name, its
    manifest entry and a log line."""
    agent, start = make(), time.perf_counter()
    records = play_records(agent, condition, seeds, identity)
    file = f"{name}__{condition}.jsonl"
    write_jsonl(Path(staged) / file, records)
    invalid = float(np.mean([r["invalid"] for r in records]))
    entry = {"player": name, "condition": condition, "episodes": len(records), "invalid_rate": invalid,
             "sha256": sha256_file(Path(staged) / file)}
    if hasattr(agent, "writes_belief_sums"):  # a student: whether each belief was written as the sum of its reasoning
        entry["belief_sum"] = bool(agent.writes_belief_sums)
    cache = getattr(agent, "prompt_cache", None)
    reuse = f", prompt tokens reused {cache.reused_fraction:.0%}" if cache is not None else ""
    return file, entry, (f"{name} on {condition}: {len(records)} episodes in {time.perf_counter() - start:.1f} s, "
                         f"invalid answers {invalid:.1%}{reuse}")


def play_condition(checkpoints: dict[str, str], condition: str, seeds_spec: str, staged, *, sampling=None,
                   baselines=EVAL_BASELINES, log: Callable[[str], None] | None = None,
                   recorded_as: dict[str, str] | None = None) -> dict:
    """Play every player on one condition into `staged`/<player>__<condition>.jsonl; returns the
    files' manifest entries. Conditions are independent, so they can run in parallel processes; within
    one, the checkpoints play side by side (`training.side_by_side`), the baselines here after them.
    `recorded_as`: the model path a checkpoint's records name, where it is loaded from a copy (a
    remote job), so the files equal a local play's."""
    from ..training.generation import SamplingConfig

    log = log or (lambda message: None)
    sampling = sampling or SamplingConfig()
    seeds = eval_seed_list(condition, seeds_spec)
    jobs = [(name, make, identity, condition, seeds, staged) for name, make, identity
            in _players(checkpoints, baselines, sampling, recorded_as)]
    played = run_side_by_side(_play_file, jobs[:len(checkpoints)]) + [_play_file(*job) for job in jobs[len(checkpoints):]]
    files = {}
    for file, entry, line in played:
        files[file] = entry
        log(line)
    return files


def publish_rollouts(staged, root, *, checkpoints: dict[str, str], seeds: dict[str, str], sampling, baselines,
                     files: dict, provenance: dict | None = None, extra_players: dict[str, dict] | None = None) -> dict:
    """Write the manifest of played files and publish `staged` under <root>/eval_rollouts/<hash>.
    `extra_players` (name -> identity) are players whose files were written by others (the teacher)."""
    players = _players(checkpoints, baselines, sampling)
    extra = extra_players or {}
    manifest = {"env_version": ENV_VERSION, "seeds": seeds, "sampling": sampling.__dict__,
                "players": {**{name: identity for name, _, identity in players}, **extra},
                "player_order": [name for name, _, _ in players] + list(extra), "files": files,
                "provenance": provenance or {}}
    digest = hashlib.sha256(json.dumps(manifest, sort_keys=True, default=str).encode()).hexdigest()[:16]
    atomic_write_json(Path(staged) / "manifest.json", manifest)
    final = publish_dir(staged, Path(root) / "eval_rollouts" / digest, kind="eval_rollouts", published=True)
    return {"dir": str(final), "version": digest, "files_digest": files_digest(final), "manifest": manifest}


def eval_rollouts_stage(
    checkpoints: dict[str, str],
    seeds: dict[str, str],
    root,
    *,
    sampling=None,
    baselines=EVAL_BASELINES,
    provenance: dict | None = None,
    log: Callable[[str], None] | None = None,
    include_teacher: bool = False,
    teacher=None,
    teacher_client=None,
) -> dict:
    """Play each checkpoint (name -> model dir) and each baseline on every condition's seeds, one
    condition after another, and publish `<root>/eval_rollouts/<content hash>/` (one JSONL per
    (player, condition) and a manifest.json describing players, seeds, sampling and provenance).

    `include_teacher` (off by default) also plays `teacher` (TeacherSettings) on the same seeds as
    player "teacher" (see teacher_play: resumable, exactly once, under its cost guard, never
    training data)."""
    from ..training.generation import SamplingConfig
    from .teacher_play import TEACHER_PLAYER, play_teacher, teacher_identity

    if include_teacher and teacher is None:
        raise ValueError("include_teacher needs the teacher's settings (teacher=TeacherSettings(...))")
    sampling = sampling or SamplingConfig()
    for condition, spec in seeds.items():
        eval_seed_list(condition, spec)  # refuse bad seeds before playing anything
    with staging(Path(root) / "eval_rollouts") as staged:
        files = {}
        for condition, spec in seeds.items():
            files.update(play_condition(checkpoints, condition, spec, staged, sampling=sampling,
                                        baselines=baselines, log=log))
        extra = {}
        if include_teacher:
            files.update(play_teacher(teacher, seeds, staged, root, log=log, client=teacher_client))
            extra = {TEACHER_PLAYER: teacher_identity(teacher)}
        return publish_rollouts(staged, root, checkpoints=checkpoints, seeds=seeds, sampling=sampling,
                                baselines=baselines, files=files, provenance=provenance, extra_players=extra)


def load_rollouts(rollouts_dir) -> tuple[dict, dict[tuple[str, str], list[dict]]]:
    """(manifest, {(player, condition): records}) of a published eval_rollouts directory."""
    root = Path(rollouts_dir)
    if not (root / "manifest.json").exists():
        raise FileNotFoundError(f"{root}: not an eval_rollouts directory (no manifest.json)")
    manifest = json.loads((root / "manifest.json").read_text())
    out = {}
    for file, info in manifest["files"].items():
        out[(info["player"], info["condition"])] = read_trajectories(root / file, allow_truncated_tail=False).records
    return manifest, out


EVAL_WINDOW_SIZES = {"continuous": 100, "ood": 50, "discrete3": 15}
# The windows every condition has room for: continuous's 1,000 evaluation seeds hold ten of 100.
EVAL_WINDOW_COUNT = min(len(EVAL_SEEDS[condition]) // size for condition, size in EVAL_WINDOW_SIZES.items())


def evaluation_window(index: int) -> dict[str, str]:
    """The index-th window of evaluation seeds per condition (window 0 is DEFAULT_EVAL_SEEDS), for index in
    0..EVAL_WINDOW_COUNT-1: windows tile each condition's evaluation range (continuous 0-999 in windows of
    100, ood in windows of 50, discrete3 in windows of 15 = 5 per profile), disjoint, never a training seed.
    """
    if not 0 <= index < EVAL_WINDOW_COUNT:
        raise ValueError(f"evaluation window {index} does not exist; windows are 0-{EVAL_WINDOW_COUNT - 1}")
    out = {}
    for condition, size in EVAL_WINDOW_SIZES.items():
        start = EVAL_SEEDS[condition].start + index * size
        out[condition] = f"{start}-{start + size - 1}"
    return out
