"""The whole recipe outside Dagster, with named presets: teacher -> re-grade -> dataset -> SFT ->
GRPO -> evaluation, each stage publishing into <out>/<stage>/<version>/ like the assets do.

    rhythm distill --out runs/demo                   # the demo preset: what `make demo` trains (demo.json)
    rhythm distill --preset long --out runs/long     # 3,000 search-teacher weeks (long_preset.json)
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from rhythm_env.graders import DEFAULT_GRADER

from .data.stages import dataset_stage, reeval_stage
from .evaluation.results import eval_results_stage
from .evaluation.rollouts import DEFAULT_EVAL_SEEDS, eval_rollouts_stage, teacher_player
from .store import is_version_folder, path_under, write_result
from .teacher.settings import DEFAULT_BACKEND, TeacherSettings
from .teacher.stage import teacher_stage
from .training.entry import run_stage, run_stage_launched
from .training.publish import train_and_publish

# 2,000 teacher weeks: with fewer the recipe's student stayed shy of extreme profiles (beliefs pulled
# back towards 0.5, where most of its training numbers lie) (benchmarks/README.md, D3).
DEFAULT_TEACHER_SEEDS = "1000-2999"

# One recipe (the decisions in benchmarks/README.md): an offline teacher's weeks (`teacher`, a backend of
# teacher/offline.py) written as labeled chat conversations with the evidence reasoning (its read-out
# fitted on those weeks), the tiny student with numeric embeddings and 8 heads trained in two phases
# (each week's first 512 tokens, then whole weeks), GRPO rewarded by the SFT student's own continuation
# of the week and gated on held-out training weeks. "demo" is what the asset defaults and `make demo`
# run; "long" is the same recipe with more data and steps, distilled from the search teacher.
PRESETS: dict[str, dict] = {
    # The search teacher: at the demo's 600 + 240 SFT steps its students are ahead of the Bayesian
    # teacher's on average in every condition (three SFT seeds, seven windows) at the same demo time
    # (benchmarks/README.md, D2).
    "demo": {"teacher": "search", "teacher_seeds": DEFAULT_TEACHER_SEEDS, "dataset": {}, "sft": {}, "grpo": {},
             "eval_seeds": DEFAULT_EVAL_SEEDS},
    # 3,000 weeks and 1,000 + 1,200 SFT steps: with fewer weeks and steps the OOD recovery fell short
    # (benchmarks/README.md, D13). The search teacher: at this budget its students score above the Bayesian teacher's
    # (benchmarks/README.md, D2). The innovation chain: its
    # students score above the linear chain's on continuous weeks, level elsewhere, paired over five
    # windows (benchmarks/README.md, D7); at the demo's
    # budget most SFT seeds do not learn it (D8).
    "long": {"teacher": "search", "teacher_seeds": "1000-3999", "dataset": {"readout_form": "innovation"},
             "sft": {"short_context_steps": 1000, "max_steps": 1200},
             "grpo": {"max_steps": 50, "teacher_prompts": 2048, "student_episodes": 16},
             "eval_seeds": DEFAULT_EVAL_SEEDS},
    # The published recipe's student: Qwen2.5-3B-Instruct with LoRA (r=16) on an API teacher's weeks.
    # Dagster runs it as the job rhythm_lineage_published (teacher gpt-5.4, training and evaluation on
    # Hugging Face Jobs, a10g-large); `rhythm distill --preset published` trains the same student on
    # this machine's GPU from the Bayesian teacher's weeks.
    "published": {"teacher": "bayes", "teacher_seeds": "1000-1299", "dataset": {},
                  # 8 conversations a step in micro-batches of 2: a step of 1 x 8 waits on the host
                  # (kernel launches), 2 x 4 does not (benchmarks/README.md, D36)
                  "sft": {"base_model": "Qwen/Qwen2.5-3B-Instruct", "learning_rate": 2e-4, "max_steps": 300,
                          "per_device_train_batch_size": 2, "gradient_accumulation_steps": 4, "lora_r": 16},
                  # 8 completions a step, the loss in micro-batches of 2 (a week's prompt is thousands of tokens)
                  "grpo": {"max_steps": 20, "per_device_train_batch_size": 2, "gradient_accumulation_steps": 4,
                           "num_generations": 8},
                  "eval_seeds": DEFAULT_EVAL_SEEDS},
}


# What `rhythm distill` and run_distillation run unless told otherwise: the quick one.
DEFAULT_PRESET = "demo"


def resolve_preset(preset: str | dict) -> dict:
    """A preset by name, or a preset dict (a named one with overrides) as it is."""
    if isinstance(preset, dict):
        return preset
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; allowed: {', '.join(PRESETS)}")
    return PRESETS[preset]


def _published(run_dir: Path, stage: str) -> dict:
    """The one published version of `stage` in an earlier run's output folder."""
    versions = [d for d in sorted((run_dir / stage).glob("*")) if d.is_dir() and is_version_folder(d.name)]
    if len(versions) != 1:
        raise ValueError(f"{run_dir / stage}: expected exactly one published version to reuse, found {len(versions)}")
    return {"path": str(versions[0]), "version": versions[0].name}


def run_distillation(out, preset: str | dict = DEFAULT_PRESET, *, grader: str = DEFAULT_GRADER, log: Callable[[str], None] = print,
                     with_grpo: bool = True, reuse_sft_from=None, processes: int = 1) -> dict:
    """Run the recipe into `out`; `preset` is a name of PRESETS or a dict of the same shape.
    `processes`: SFT and GRPO data-parallel on that many processes (torchrun), the global batch the preset's.
    `with_grpo=False` stops after SFT and evaluates the SFT student only (faster variant sweeps).
    `reuse_sft_from`: an earlier run's output folder of the same configuration whose sft_dataset and
    sft_checkpoint are reused as they are (GRPO and evaluation run anew), to iterate on GRPO."""
    spec = resolve_preset(preset)
    root = Path(out)
    timings = {}

    def timed(name, fn):
        start = time.perf_counter()
        result = fn()
        timings[name] = round(time.perf_counter() - start, 1)
        log(f"{name}: done in {timings[name]} s")
        return result

    if reuse_sft_from is None:
        teacher = TeacherSettings(backend=spec.get("teacher", DEFAULT_BACKEND))
        traj = timed("teacher_trajectories", lambda: teacher_stage(teacher, "continuous", spec["teacher_seeds"], root,
                                                                   grader=grader, log=log))
        timed("reeval_report", lambda: reeval_stage(traj["path"], grader, root))
        data = timed("sft_dataset", lambda: dataset_stage(traj, root, **spec.get("dataset", {})))
    else:
        data = _published(Path(reuse_sft_from), "sft_dataset")

    # what the checkpoints record of their data (the evaluation names the teacher they were distilled from)
    made_from = data.get("provenance") or json.loads((Path(data["path"]) / "provenance.json").read_text())
    provenance = {"sft_dataset": path_under(data["path"], root), "sft_dataset_version": data["version"],
                  "teacher": made_from["teacher"]["id"]}

    def show(entry: dict) -> None:
        log(json.dumps({k: v for k, v in entry.items() if not isinstance(v, dict)}))

    def train(stage, config, init=None):
        def run(staged):
            if processes == 1:
                write_result(staged, run_stage(stage, config, data["path"], str(staged), init, on_log=show,
                                               provenance=provenance))
            else:  # the ranks under torchrun; rank 0 writes the result
                run_stage_launched(stage, config, data["path"], staged, init, provenance, processes, show)

        return train_and_publish(root, f"{stage}_checkpoint", run)

    if reuse_sft_from is None:
        sft = timed("sft_checkpoint", lambda: train("sft", spec["sft"]))
    else:
        sft_dir = Path(_published(Path(reuse_sft_from), "sft_checkpoint")["path"])
        sft = {**json.loads((sft_dir / "result.json").read_text()), "model_dir": str(sft_dir / "model")}
        log(f"reusing {data['path']} and {sft_dir} from {reuse_sft_from}")
    students = {"student_sft": sft["model_dir"]}
    grpo = {}
    if with_grpo:
        grpo = timed("grpo_checkpoint", lambda: train("grpo", {**spec["grpo"], "grader": grader}, sft["model_dir"]))
        students = {"student_grpo": grpo["model_dir"], **students}
    name = preset if isinstance(preset, str) else spec.get("name", "custom")
    rollouts = timed("eval_rollouts", lambda: eval_rollouts_stage(
        students, spec["eval_seeds"], root, log=log,
        provenance={"preset": name, "teacher_seeds": spec["teacher_seeds"], "dataset": spec.get("dataset", {}),
                    "sft": spec["sft"], "grpo": spec["grpo"] if with_grpo else None,
                    "distilled_from": teacher_player(sft["model_dir"])}))
    results = timed("eval_results", lambda: eval_results_stage(rollouts["dir"], grader, root))
    summary = {"preset": name, "timings_s": timings, "results_json": results["json"],
               "sft": {k: sft.get(k) for k in ("final_train_loss", "eval_loss", "valid_answer_rate_after", "steps",
                                               "total_parameters", "prompt_format", "reasoning")},
               "grpo": {k: grpo.get(k) for k in ("final_reward", "final_answer_validity", "steps")}}
    (root / "distill_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    log(results["markdown"])
    return {**summary, "markdown": results["markdown"]}
