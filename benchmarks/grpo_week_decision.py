"""D37's decision: whole-week GRPO against the step design at the long preset's GRPO budget, on the demo's SFT students.

    python benchmarks/grpo_week_decision.py train OUT --seeds 1,2,0 [--arms week,step]
    python benchmarks/grpo_week_decision.py record OUT
    python benchmarks/paired_students.py --a step_s1=OUT/s1/grpo_step/<v>/model,... \
        --b week_s1=OUT/s1/grpo_week/<v>/model,... --windows 0,4,5,6,7,8,9 --reference '' --name grpo_week_decision

`train` builds the demo's data once (its teacher and seeds), then per SFT seed trains the demo's SFT
student with that seed (or takes the one published under OUT/s<seed>/sft_checkpoint/: seed 0's is the
demo's own, a3ce6b0cbe98ac9f, copied there) and on it two GRPO students: `step`, the
long preset's GRPO as PRESETS["long"] has it (the step design), and `week`, the same with
`design="week"` at learning rate 5e-5 (D37's lead), each published under OUT/s<seed>/<stage>/<version>/.
`record` writes every checkpoint's version, training seconds (OUT/times.json, the stage's wall time
on the machine as it was) and GRPO gate to benchmarks/results/grpo_week_training.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from results_file import write_result

ARMS = {"step": {}, "week": {"design": "week", "learning_rate": 5e-5}}


def train(root: Path, seeds: list[int], arms: list[str]) -> None:
    from rhythm_core.data.stages import dataset_stage
    from rhythm_core.distill import PRESETS
    from rhythm_core.graders import DEFAULT_GRADER
    from rhythm_core.store import is_version_folder, path_under
    from rhythm_core.store import write_result as write_stage_result
    from rhythm_core.teacher.settings import TeacherSettings
    from rhythm_core.teacher.stage import teacher_stage
    from rhythm_core.training.entry import run_stage
    from rhythm_core.training.publish import train_and_publish

    demo, long = PRESETS["demo"], PRESETS["long"]
    times_file = root / "times.json"
    times = json.loads(times_file.read_text()) if times_file.exists() else {}
    traj = teacher_stage(TeacherSettings(backend=demo["teacher"]), "continuous", demo["teacher_seeds"], root,
                         grader=DEFAULT_GRADER, log=print)
    data = dataset_stage(traj, root, **demo["dataset"])
    made_from = data.get("provenance") or json.loads((Path(data["path"]) / "provenance.json").read_text())
    provenance = {"sft_dataset": path_under(data["path"], root), "sft_dataset_version": data["version"],
                  "teacher": made_from["teacher"]["id"]}

    def stage(seed: int, name: str, kind: str, config: dict, init: str | None = None) -> dict:
        def run(staged):
            write_stage_result(staged, run_stage(kind, config, data["path"], str(staged), init, provenance=provenance,
                                                 on_log=lambda e: print(json.dumps(e, default=str), flush=True)))

        start = time.perf_counter()
        out = train_and_publish(root / f"s{seed}", name, run)
        times[f"{name}_s{seed}"] = round(time.perf_counter() - start, 1)
        times_file.write_text(json.dumps(times, indent=1))
        return out

    for seed in seeds:
        published = [d for d in sorted((root / f"s{seed}" / "sft_checkpoint").glob("*")) if is_version_folder(d.name)]
        sft = ({"model_dir": str(published[0] / "model")} if published
               else stage(seed, "sft_checkpoint", "sft", {**demo["sft"], "seed": seed}))
        for arm in arms:
            stage(seed, f"grpo_{arm}", "grpo", {**long["grpo"], "grader": DEFAULT_GRADER, **ARMS[arm]}, sft["model_dir"])


def record(root: Path) -> None:
    times = json.loads((root / "times.json").read_text()) if (root / "times.json").exists() else {}
    checkpoints = {}
    for result in sorted(root.glob("s*/*/*/result.json")):
        version, stage, seed = result.parent.name, result.parent.parent.name, result.parent.parent.parent.name
        found = json.loads(result.read_text())
        gate = found.get("validation") or {}
        checkpoints[f"{stage}_{seed}"] = {"version": version, "train_s": times.get(f"{stage}_{seed}"),
                                         **({"gate": {k: gate.get(k) for k in ("difference", "difference_se", "better")}}
                                            if gate else {})}
    from rhythm_core.distill import PRESETS
    from rhythm_core.training.grpo import GRPORunConfig

    arms = {arm: {k: getattr(GRPORunConfig(**{**PRESETS["long"]["grpo"], **change}), k)
                  for k in ("design", "max_steps", "learning_rate")} for arm, change in ARMS.items()}
    write_result("grpo_week_training", {"arms": arms, "checkpoints": checkpoints},
                 question="What do D37's whole-week and step-design GRPO students cost, and what do their gates say?")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=["train", "record"])
    p.add_argument("out", type=Path)
    p.add_argument("--seeds", default="1,2,0")
    p.add_argument("--arms", default="week,step")
    args = p.parse_args(argv)
    if args.mode == "train":
        train(args.out, [int(s) for s in args.seeds.split(",")], args.arms.split(","))
    else:
        record(args.out)


if __name__ == "__main__":
    main()
