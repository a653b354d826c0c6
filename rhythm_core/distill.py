"""The whole recipe outside Dagster, with named presets: teacher -> re-grade -> dataset -> SFT ->
GRPO -> evaluation, each stage publishing into <out>/<stage>/<version>/ like the assets do.

    rhythm distill --preset long --out runs/long     # >= 2,000 Bayesian-teacher episodes
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from .artifacts import write_result
from .evaluation.results import eval_results_stage
from .evaluation.rollouts import DEFAULT_EVAL_SEEDS, eval_rollouts_stage
from .stages import dataset_stage, reeval_stage, teacher_stage, train_and_publish
from .teacher.run import TeacherSettings
from .training.entry import run_stage

PRESETS: dict[str, dict] = {
    # What `make demo` runs (the asset defaults).
    "demo": {"teacher_seeds": "1000-1063", "dataset": {}, "sft": {}, "grpo": {}, "eval_seeds": DEFAULT_EVAL_SEEDS},
    # Distillation at scale on a CPU: 2,000 teacher episodes (56,000 steps), a longer SFT and GRPO.
    "long": {"teacher_seeds": "1000-2999", "dataset": {}, "sft": {"max_steps": 2000, "learning_rate": 3e-3},
             "grpo": {"max_steps": 100, "teacher_prompts": 2048, "student_episodes": 16},
             "eval_seeds": DEFAULT_EVAL_SEEDS},
}


def resolve_preset(preset: str | dict) -> dict:
    """A preset by name, or a preset dict (a named one with overrides) as it is."""
    if isinstance(preset, dict):
        return preset
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; allowed: {', '.join(PRESETS)}")
    return PRESETS[preset]


def run_distillation(out, preset: str | dict = "long", *, grader: str = "v3", log: Callable[[str], None] = print,
                     with_grpo: bool = True) -> dict:
    """Run the recipe into `out`; `preset` is a name of PRESETS or a dict of the same shape.
    `with_grpo=False` stops after SFT and evaluates the SFT student only (faster variant sweeps)."""
    spec = resolve_preset(preset)
    root = Path(out)
    timings = {}

    def timed(name, fn):
        start = time.perf_counter()
        result = fn()
        timings[name] = round(time.perf_counter() - start, 1)
        log(f"{name}: done in {timings[name]} s")
        return result

    traj = timed("teacher_trajectories", lambda: teacher_stage(TeacherSettings(), "continuous", spec["teacher_seeds"],
                                                               root, grader=grader, log=log))
    timed("reeval_report", lambda: reeval_stage(traj["path"], grader, root))
    data = timed("sft_dataset", lambda: dataset_stage(traj, root, **spec.get("dataset", {})))

    def train(stage, config, init=None):
        def run(staged):
            write_result(staged, run_stage(stage, config, data["path"], str(staged), init, on_log=lambda e: log(
                json.dumps({k: v for k, v in e.items() if not isinstance(v, dict)}))))

        return train_and_publish(root, f"{stage}_checkpoint", run)

    sft = timed("sft_checkpoint", lambda: train("sft", spec["sft"]))
    students = {"student_sft": sft["model_dir"]}
    grpo = {}
    if with_grpo:
        grpo = timed("grpo_checkpoint", lambda: train("grpo", {**spec["grpo"], "grader": grader}, sft["model_dir"]))
        students = {"student_grpo": grpo["model_dir"], **students}
    name = preset if isinstance(preset, str) else spec.get("name", "custom")
    rollouts = timed("eval_rollouts", lambda: eval_rollouts_stage(
        students, spec["eval_seeds"], root, log=log,
        provenance={"preset": name, "teacher_seeds": spec["teacher_seeds"], "dataset": spec.get("dataset", {}),
                    "sft": spec["sft"], "grpo": spec["grpo"] if with_grpo else None}))
    results = timed("eval_results", lambda: eval_results_stage(rollouts["dir"], grader, root))
    summary = {"preset": name, "timings_s": timings, "results_json": results["json"],
               "sft": {k: sft.get(k) for k in ("final_train_loss", "eval_loss", "valid_answer_rate_after", "steps",
                                               "total_parameters", "prompt_format", "reasoning")},
               "grpo": {k: grpo.get(k) for k in ("final_reward", "final_answer_validity", "steps")}}
    (root / "distill_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    log(results["markdown"])
    return {**summary, "markdown": results["markdown"]}
