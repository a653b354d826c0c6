"""Distillation, measured: one named configuration from teacher data to evaluation, outside Dagster.

    python benchmarks/distillation.py --preset demo
    python benchmarks/distillation.py --preset long --out runs/long
    python benchmarks/distillation.py --preset long --teacher bayes --sft '{"seed": 1}' --grpo '{"seed": 1}'
    python benchmarks/distillation.py --preset demo --prompt-format table --name demo-table   # a variant

Runs `rhythm_core.distill.run_distillation` (the same stages the assets call) and prints, per
condition: the students' v3 score with its 95% CI, the heuristic, the fallback-only policy, the
teacher, recovery = (student - heuristic) / (teacher - heuristic), belief MAE against the constant
prior's, the invalid-answer rate; then the wall time of every stage and the student's size.
Compare variants side by side by running them one after another on a quiet machine.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rhythm_core.distill import PRESETS, run_distillation  # noqa: E402
from rhythm_core.evaluation.belief_probe import belief_probe  # noqa: E402
from rhythm_core.protocol import CHAT_FORMATS, PROMPT_FORMATS, READOUT_FORMS, REASONING  # noqa: E402


def configuration(args) -> dict:
    spec = copy.deepcopy(PRESETS[args.preset])
    spec["name"] = args.name or args.preset
    if args.teacher_seeds:
        spec["teacher_seeds"] = args.teacher_seeds
    if args.teacher:
        spec["teacher"] = args.teacher
    for key in ("prompt_format", "reasoning", "readout_form"):
        if getattr(args, key):
            spec["dataset"][key] = getattr(args, key)
    spec["sft"].update(json.loads(args.sft))
    spec["grpo"].update(json.loads(args.grpo))
    if args.eval_seeds:
        spec["eval_seeds"] = json.loads(args.eval_seeds)
    return spec


def report(summary: dict, wall: float) -> str:
    results = json.loads(Path(summary["results_json"]).read_text())
    lines = [f"configuration {summary['preset']}: student {summary['sft'].get('total_parameters')} parameters, "
             f"prompt format {summary['sft'].get('prompt_format')}, reasoning {summary['sft'].get('reasoning')}", "",
             "| condition | student | v3 score [95% CI] | heuristic | fallback | teacher | recovery | belief MAE "
             "(constant belief, same seeds) | invalid |", "|---|---|---|---|---|---|---|---|---|"]
    for condition, block in results["conditions"].items():
        agents = block["agents"]
        ref = {name: agents[name]["final_score"] if name in agents else float("nan")
               for name in ("heuristic", "fallback", block.get("recovery_teacher") or "bayes")}
        teacher = ref[block.get("recovery_teacher") or "bayes"]
        for name, m in agents.items():
            if not name.startswith("student"):
                continue
            mae = "–" if m["belief_mae"] is None else f"{m['belief_mae']:.3f}"
            constant = agents.get("heuristic_const_belief", {}).get("belief_mae")
            rec = "–" if m.get("recovery") is None else f"{m['recovery']:.0%}"
            lines.append(f"| {condition} | {name} | {m['final_score']:.3f} [{m['ci95'][0]:.3f}, {m['ci95'][1]:.3f}] | "
                         f"{ref['heuristic']:.3f} | {ref['fallback']:.3f} | {teacher:.3f} | {rec} | {mae} "
                         f"({'–' if constant is None else f'{constant:.3f}'}) | {m['invalid_rate']:.1%} |")
    if summary.get("probes"):
        lines += ["", "Teacher-forced belief probe (validation weeks, the teacher's answers in context; last-step MAE vs "
                  "the truth, and mean distance to the teacher's numbers against copying its previous belief):", "",
                  "| student | probe belief MAE | teacher | probe vs teacher | copy-previous vs teacher | numbers |",
                  "|---|---|---|---|---|---|"]
        for name, pr in summary["probes"].items():
            cells = [pr.get(k) for k in ("probe_belief_mae", "teacher_belief_mae", "probe_vs_teacher", "copy_vs_teacher",
                                         "number_rate")]
            lines.append(f"| {name} | " + " | ".join("–" if c is None else f"{c:.3f}" for c in cells) + " |")
    lines += ["", "| stage | wall s |", "|---|---|"]
    lines += [f"| {stage} | {seconds} |" for stage, seconds in summary["timings_s"].items()]
    lines.append(f"| whole run | {wall:.0f} |")
    return "\n".join(lines)


def probe_students(out: Path, reused: Path | None = None) -> dict:
    """The belief probe of each student checkpoint the run used, on its chat-format dataset."""
    def published(root: Path, stage: str) -> list[Path]:
        return [d for d in sorted((root / stage).glob("*")) if d.is_dir() and not d.name.startswith(".")]

    source = reused or out
    dataset = published(source, "sft_dataset")
    if len(dataset) != 1:
        return {}
    import datasets

    from rhythm_core.data.sft_dataset import dataset_format

    if dataset_format(datasets.load_from_disk(str(dataset[0]))).prompt_format not in CHAT_FORMATS:
        return {}
    probes = {}
    for root, stage, name in ((source, "sft_checkpoint", "student_sft"), (out, "grpo_checkpoint", "student_grpo")):
        for version in published(root, stage):
            probes[name] = belief_probe(version / "model", dataset[0])
    return probes


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=list(PRESETS), default="demo")
    p.add_argument("--name", help="the configuration's name in the output (default: the preset)")
    p.add_argument("--out", help="output root (default runs/bench-<name>)")
    p.add_argument("--teacher", choices=["bayes", "bayes_v3", "search"], help="the offline teacher (default: the preset's)")
    p.add_argument("--teacher-seeds")
    p.add_argument("--prompt-format", choices=list(PROMPT_FORMATS))
    p.add_argument("--reasoning", choices=REASONING)
    p.add_argument("--readout-form", choices=READOUT_FORMS, help="the evidence chain's form (default: the preset's)")
    p.add_argument("--sft", default="{}", help='SFT overrides as JSON, e.g. \'{"max_steps": 400}\'')
    p.add_argument("--grpo", default="{}", help="GRPO overrides as JSON")
    p.add_argument("--no-grpo", action="store_true", help="stop after SFT; evaluate the SFT student only")
    p.add_argument("--eval-seeds", help='JSON {condition: seed spec}; default: the preset\'s')
    p.add_argument("--reuse-sft-from", help="an earlier run's output folder of the same configuration: reuse its "
                   "sft_dataset and sft_checkpoint, run GRPO and evaluation anew (stage times then exclude them)")
    p.add_argument("--quiet", action="store_true", help="print only stage timings and the final report")
    args = p.parse_args(argv)
    spec = configuration(args)
    out = Path(args.out or REPO / "runs" / f"bench-{spec['name']}")
    log = (lambda m: print(m, flush=True) if m.endswith(" s") or "done in" in m else None) if args.quiet else print
    start = time.perf_counter()
    summary = run_distillation(out, spec, log=log, with_grpo=not args.no_grpo, reuse_sft_from=args.reuse_sft_from)
    summary["probes"] = probe_students(out, Path(args.reuse_sft_from) if args.reuse_sft_from else None)
    text = report(summary, time.perf_counter() - start)
    (out / "benchmark.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
