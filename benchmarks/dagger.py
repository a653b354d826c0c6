"""DAgger against plain distillation: does relabelling the student's own weeks by the teacher help?

    python benchmarks/dagger.py --out /tmp/dagger --student RUN/sft_checkpoint/<v>/model \
        --teacher search [--teacher-seeds 1000-2999] [--extra-seeds 3000-3999] [--windows 0,5]

The student (distilled from `--teacher`'s weeks on `--teacher-seeds`) plays `--extra-seeds`; the
teacher follows each of those weeks (its posterior updated by the actions the student really took)
and labels every step with its own belief and action. Two students are then trained from scratch
with the demo's SFT settings, side by side: "dagger" on the teacher's weeks plus the relabelled
student weeks, "more_teacher" on the teacher's weeks plus the teacher's own weeks on the same extra
seeds (same number of weeks and steps: only where the states come from differs). Both play the
evaluation windows next to the first student, the heuristic, the fallback-only policy and both
teachers, paired week by week with today's Bayesian teacher.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from beyond_teacher import window_table  # benchmarks/ is the script's own folder
from report import print_markdown


def relabelled_records(teacher: str, condition: str, seeds: np.ndarray, actions: np.ndarray) -> list[dict]:
    """Records of the student's weeks (its `actions`, (N, 28)) with the teacher's answer at each step."""
    from rhythm_core.env import VectorRhythmEnv
    from rhythm_core.env.spec import ACTIONS, STEPS_PER_EPISODE
    from rhythm_core.teacher.budget import zero_usage
    from rhythm_core.teacher.offline import OFFLINE_AGENTS, _step_record
    from rhythm_core.teacher.records import episode_record, teacher_protocol
    from rhythm_core.teacher.settings import TeacherSettings

    settings = TeacherSettings(backend=teacher)
    env = VectorRhythmEnv(condition)
    agent = OFFLINE_AGENTS[teacher](explain=True)
    obs, _ = env.reset(seeds)
    agent.reset(env)
    n = len(seeds)
    histories, rows, steps, beliefs = ([[] for _ in range(n)] for _ in range(4))
    for t in range(STEPS_PER_EPISODE):
        decision = agent.act(obs)
        taken = actions[:, t]
        agent.observe_actions(taken)
        next_obs, *_ = env.step(taken)
        for i in range(n):
            histories[i].append(obs.item(i))
            steps[i].append(_step_record(t, histories[i], rows[i], decision, i, ACTIONS[taken[i]], False,
                                         next_obs.meters[i]))
            beliefs[i].append(steps[i][-1]["parsed"]["belief"])
        obs = next_obs
    return [episode_record({**settings.describe(), "relabelled": True}, condition, seeds[i], steps[i],
                           env.meters_history[i], beliefs[i], {**zero_usage(), "cost_usd": 0.0},
                           protocol=teacher_protocol(settings)) for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--student", required=True, help="the first student's model directory")
    parser.add_argument("--teacher", default="search")
    parser.add_argument("--teacher-seeds", default="1000-2999")
    parser.add_argument("--extra-seeds", default="3000-3999")
    parser.add_argument("--windows", default="0,5")
    parser.add_argument("--arms", default="dagger,more_teacher")
    args = parser.parse_args()

    import rhythm_core.data.answers as answers
    from rhythm_core.agents.rollout import rollout
    from rhythm_core.artifacts import write_result
    from rhythm_core.data.sft_dataset import build_sft_dataset, save_sft_dataset
    from rhythm_core.env.conditions import parse_seeds
    from rhythm_core.teacher.offline import offline_chunks
    from rhythm_core.teacher.settings import TeacherSettings
    from rhythm_core.training.entry import run_stage
    from rhythm_core.training.generation import SamplingConfig
    from rhythm_core.training.policy import LLMPolicyAgent
    from rhythm_core.training.publish import train_and_publish

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.0f} s] {message}", flush=True)

    settings = TeacherSettings(backend=args.teacher)

    def teacher_weeks(spec: str) -> list[dict]:
        return [r for chunk in offline_chunks(settings, "continuous", parse_seeds(spec), workers=2) for r in chunk]

    base = teacher_weeks(args.teacher_seeds)
    extra_seeds = np.asarray(parse_seeds(args.extra_seeds), dtype=np.int64)
    log(f"teacher weeks: {len(base)}")
    arms: dict[str, list[dict]] = {}
    if "dagger" in args.arms:
        agent = LLMPolicyAgent.from_checkpoint(args.student, sampling=SamplingConfig(temperature=0.0))
        played = rollout(agent, "continuous", extra_seeds, chunk_size=256)
        log(f"student played {len(extra_seeds)} weeks")
        arms["dagger"] = base + relabelled_records(args.teacher, "continuous", extra_seeds, played.actions)
        agree = np.mean([s["parsed"]["action"] == s["action"] for r in arms["dagger"][len(base):] for s in r["steps"]])
        log(f"relabelled; the teacher agrees with the student's action on {agree:.1%} of steps")
    if "more_teacher" in args.arms:
        arms["more_teacher"] = base + teacher_weeks(args.extra_seeds)

    check = answers._answer

    def label_not_action(record, step, t, reasoning, evidence_text=None):
        # a relabelled step's answer is the teacher's action, not the one the student took
        if record["teacher"].get("relabelled"):
            step = {**step, "action": step["parsed"]["action"]}
            record = {**record, "actions": [*record["actions"][:t], step["action"], *record["actions"][t + 1:]]}
        return check(record, step, t, reasoning, evidence_text)

    answers._answer = label_not_action
    students = {"first": args.student}
    for name, records in arms.items():
        root = out / name
        dataset = build_sft_dataset(records)
        data = save_sft_dataset(dataset, root / "sft_dataset", {"teacher": {"id": args.teacher}, "arm": name})
        result = train_and_publish(root, "sft_checkpoint", lambda staged, path=data["path"]: write_result(
            staged, run_stage("sft", {"report_to": "none"}, path, str(staged), None)))
        students[name] = result["model_dir"]
        log(f"{name}: SFT final loss {result.get('final_train_loss')}")
    (out / "students.json").write_text(json.dumps(students, indent=2))

    table = window_table(students, [int(w) for w in args.windows.split(",")],
                         references=("heuristic", "fallback", "bayes", args.teacher), log=log)
    (out / "table.json").write_text(json.dumps(table, indent=1))
    print_markdown(table)

if __name__ == "__main__":
    main()
