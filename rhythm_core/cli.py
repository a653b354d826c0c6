"""The `rhythm` command line."""

from __future__ import annotations

import argparse
import json
import sys

from .env.conditions import CONDITIONS, check_seed, check_training_seeds, parse_seeds
from .protocol import DEFAULT_PROMPT_FORMAT, DEFAULT_REASONING, PROMPT_FORMATS, REASONING


def _agents_arg(text: str) -> list[str]:
    from .agents import AGENTS

    names = [a.strip() for a in text.split(",") if a.strip()]
    unknown = [a for a in names if a not in AGENTS]
    if unknown or not names:
        shown = ", ".join(unknown) if unknown else repr(text)
        raise argparse.ArgumentTypeError(f"unknown agent(s) {shown}; allowed: {', '.join(AGENTS)}")
    return names


def _cmd_baselines(args) -> int:
    import polars as pl
    from tqdm import tqdm

    from .evaluation.baselines import BASELINE_AGENTS, baselines_table, run_baselines

    seeds = parse_seeds(args.seeds)
    for seed in (seeds[0], seeds[-1]):
        check_seed(args.condition, seed)
    agents = args.agents or list(BASELINE_AGENTS)
    with tqdm(total=len(seeds) * len(agents), desc="episodes", unit="ep", disable=args.json or None,
              file=sys.stderr) as bar:
        result = run_baselines(args.condition, seeds, args.grader, agents, on_progress=lambda _a, n: bar.update(n))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"condition={result['condition']} grader={result['grader']} episodes={result['n_episodes']}")
    with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=200, tbl_hide_dataframe_shape=True,
                   tbl_hide_column_data_types=True, float_precision=3):
        print(baselines_table(result))
    return 0


def _cmd_teacher(args) -> int:
    import os

    from tqdm import tqdm

    from .compute.threads import available_cores
    from .teacher.run import run_teacher
    from .teacher.settings import TeacherSettings

    purpose = None
    if args.purpose == "training":  # evaluation seeds never become training data
        seeds = parse_seeds(args.seeds)
        check_training_seeds(args.condition, seeds)
    else:
        from .env.conditions import eval_seed_list
        from .evaluation.teacher_play import EVALUATION_PURPOSE

        seeds = eval_seed_list(args.condition, args.seeds)  # refuses anything but evaluation seeds
        purpose = EVALUATION_PURPOSE
    settings = TeacherSettings(
        backend=args.backend, model=args.model or "", base_url=args.base_url,
        api_key=os.environ.get(args.api_key_env) if args.backend != "bayes" else None,
        azure_endpoint=args.azure_endpoint, concurrency=args.concurrency, request_timeout_s=args.timeout,
        max_retries=args.max_retries, price_input_per_m=args.price_input, price_output_per_m=args.price_output,
        price_cached_input_per_m=args.price_cached_input, max_cost_usd=args.max_cost_usd,
        temperature=args.temperature, max_tokens=args.max_tokens, reasoning_effort=args.reasoning_effort,
        structured_output=args.structured_output, prompt_format=args.prompt_format,
    )
    with tqdm(total=len(seeds), desc=f"teacher {settings.teacher_id}", unit="ep", file=sys.stderr) as bar:
        result = run_teacher(
            settings, args.condition, seeds, args.out,
            on_episode=lambda _record: bar.update(1), log=lambda message: tqdm.write(message, file=sys.stderr),
            purpose=purpose, workers=available_cores(),  # the Bayesian teacher's processes (RHYTHM_CPU_CORES caps them)
        )
    print(
        f"{result.path}: wrote {result.written}, kept {result.skipped} already written, "
        f"failed {len(result.failed_seeds)}; invalid answers {result.invalid_rate:.1%}; "
        f"tokens {result.prompt_tokens}+{result.completion_tokens}; cost ${result.cost_usd:.4f}; {result.wall_s:.1f}s"
        + (f"; stopped: {result.stopped_reason}" if result.stopped_reason else "")
    )
    if settings.backend != "bayes":
        shape = result.request_shape or {}
        print(
            f"prompt tokens {result.prompt_tokens} (cached {result.cached_prompt_tokens}, cache hit "
            f"{result.cache_hit_fraction:.1%}); completion tokens {result.completion_tokens} (reasoning "
            f"{result.reasoning_tokens}); requests {result.requests}, retries {result.retries}, empty answers "
            f"re-asked with a larger budget {result.length_reasks}; requests sent {shape.get('token_param')}, "
            f"structured output {'on' if shape.get('structured_output') else 'off'}"
        )
    return 1 if result.failed_seeds else 0


def _cmd_reeval(args) -> int:
    from .data.reeval_report import reeval_file

    report = reeval_file(args.jsonl, args.grader, args.out, compare_grader=args.compare)
    print(report.markdown())
    print(f"wrote {args.out}/per_episode.parquet, per_condition.parquet, report.json, report.md")
    return 0


def _cmd_dataset(args) -> int:
    from .data.sft_dataset import build_sft_dataset, save_sft_dataset
    from .teacher.trajectories import read_trajectories

    records = read_trajectories(args.jsonl, allow_truncated_tail=False).records
    keep = None
    if args.filter == "beat_heuristic":
        from .data.reeval_report import seeds_where_teacher_beats_heuristic

        keep = seeds_where_teacher_beats_heuristic(records, args.grader)
    dataset = build_sft_dataset(records, validation_fraction=args.validation_fraction, keep_seeds=keep,
                                prompt_format=args.prompt_format, reasoning=args.reasoning)
    provenance = {"teacher": records[0]["teacher"], "source_trajectories": str(args.jsonl), "filter": args.filter,
                  "filter_grader": args.grader if args.filter != "none" else None,
                  "prompt_format": args.prompt_format, "reasoning": args.reasoning}
    summary = save_sft_dataset(dataset, args.out, provenance)
    print(f"{summary['path']}: examples {summary['examples']}, episodes {summary['episodes']}, "
          f"content {summary['content_hash'][:16]}")
    return 0


def _cmd_eval(args) -> int:
    from tqdm import tqdm

    from .evaluation.results import eval_results_stage
    from .evaluation.rollouts import eval_rollouts_stage
    from .training.generation import SamplingConfig
    from .training.models import checkpoint_info, resolve_model_dir

    model_dir = resolve_model_dir(args.checkpoint)
    seeds = {"continuous": args.continuous_seeds, "ood": args.ood_seeds, "discrete3": args.discrete3_seeds}
    sampling = SamplingConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=args.seed)
    baselines = [b for b in args.baselines.split(",") if b] if args.baselines else []
    with tqdm(total=(1 + len(baselines)) * len(seeds), desc="eval", unit="player x condition", file=sys.stderr) as bar:
        rollouts = eval_rollouts_stage({args.name: str(model_dir)}, seeds, args.out, sampling=sampling,
                                       baselines=baselines, provenance={"checkpoint": str(model_dir),
                                                                        **checkpoint_info(model_dir)},
                                       log=lambda message: (bar.update(1), tqdm.write(message, file=sys.stderr)))
    result = eval_results_stage(rollouts["dir"], args.grader, args.out)
    print(result["markdown"])
    print(f"rollouts: {rollouts['dir']}\nresults: {result['json']}\nplots: {result['final_scores_png']}, "
          f"{result['belief_accuracy_png']}")
    return 0


def _cmd_distill(args) -> int:
    from .distill import run_distillation

    summary = run_distillation(args.out, args.preset, grader=args.grader)
    print(f"summary: {args.out}/distill_summary.json; results: {summary['results_json']}")
    return 0


# Commands other packages add to `rhythm` (entry-point group "rhythm.commands", name -> a function
# taking the command's arguments and returning an exit code). rhythm_pipeline adds `lineage`, which
# reads the Dagster instance: the core never imports Dagster, and loads a plugin only when its
# command runs.
PLUGIN_GROUP = "rhythm.commands"


def _plugin_commands() -> dict:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=PLUGIN_GROUP)}


def _cmd_plugin(args) -> int:
    return _plugin_commands()[args.command].load()(args.plugin_args)


def build_parser() -> argparse.ArgumentParser:
    from .graders import GRADERS

    parser = argparse.ArgumentParser(prog="rhythm", description="RhythmEnv distillation toolkit")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("baselines", help="score the baseline agents on a condition")
    p.add_argument("--condition", choices=list(CONDITIONS), default="continuous")
    p.add_argument("--seeds", default="0-199", help="seed range, e.g. 0-199 or 1,2,10-12")
    p.add_argument("--grader", choices=list(GRADERS), default="v3")
    p.add_argument("--agents", type=_agents_arg, default=None, help="comma-separated agent names")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.set_defaults(func=_cmd_baselines)

    from .teacher.settings import REASONING_EFFORTS, STRUCTURED_OUTPUT_MODES

    p = sub.add_parser("teacher", help="play teacher episodes into a resumable JSONL file")
    p.add_argument("--backend", choices=["bayes", "openai", "azure"], default="bayes")
    p.add_argument("--condition", choices=list(CONDITIONS), default="continuous")
    p.add_argument("--seeds", default="1000-1029", help="training seeds (continuous 1000-9999)")
    p.add_argument("--purpose", choices=["training", "evaluation"], default="training",
                   help="training (default): only training seeds; evaluation: only evaluation seeds, records "
                        "stamped purpose 'evaluation', which no SFT dataset accepts")
    p.add_argument("--out", required=True, help="JSONL file; an existing file is resumed")
    p.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--azure-endpoint", default=None)
    p.add_argument("--model", default=None)
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--timeout", type=float, default=60.0, help="request timeout in seconds")
    p.add_argument("--max-retries", type=int, default=6)
    p.add_argument("--price-input", type=float, default=0.0, help="USD per 1M (uncached) prompt tokens")
    p.add_argument("--price-cached-input", type=float, default=None,
                   help="USD per 1M cached prompt tokens (default: the --price-input rate)")
    p.add_argument("--price-output", type=float, default=0.0, help="USD per 1M completion tokens (reasoning included)")
    p.add_argument("--reasoning-effort", choices=list(REASONING_EFFORTS), default=None,
                   help="sent only when given (reasoning models)")
    p.add_argument("--prompt-format", choices=list(PROMPT_FORMATS), default="table",
                   help="how each request renders the week: table (default, cheapest billed) or chat")
    p.add_argument("--structured-output", choices=list(STRUCTURED_OUTPUT_MODES), default="auto",
                   help="strict JSON schema answers; auto falls back to free text if the endpoint refuses it")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="completion budget (default 400, or 4000 for reasoning models)")
    p.add_argument("--temperature", type=float, default=None,
                   help="default 0.0, or the model's own default for reasoning models")
    p.add_argument("--max-cost-usd", type=float, default=None)
    p.set_defaults(func=_cmd_teacher)

    p = sub.add_parser("reeval", help="re-grade teacher episodes next to baselines on the same seeds")
    p.add_argument("--jsonl", required=True, help="teacher trajectory file")
    p.add_argument("--grader", choices=list(GRADERS), default="v3")
    p.add_argument("--compare", choices=list(GRADERS), default="v2", help="second grader, for the published numbers")
    p.add_argument("--out", required=True, help="output directory")
    p.set_defaults(func=_cmd_reeval)

    p = sub.add_parser("dataset", help="build the SFT dataset (Hugging Face, conversational) from teacher episodes")
    p.add_argument("--jsonl", required=True, help="teacher trajectory file")
    p.add_argument("--out", required=True, help="output directory (datasets.load_from_disk loads it)")
    p.add_argument("--filter", choices=["none", "beat_heuristic"], default="none")
    p.add_argument("--grader", choices=list(GRADERS), default="v3", help="grader used by the filter")
    p.add_argument("--validation-fraction", type=float, default=0.1)
    p.add_argument("--prompt-format", choices=list(PROMPT_FORMATS), default=DEFAULT_PROMPT_FORMAT,
                   help="chat_labeled (default): the week as one conversation, every number after its meter's "
                        "name; chat: the same without the names; table: one example per step")
    p.add_argument("--reasoning", choices=list(REASONING), default=DEFAULT_REASONING,
                   help="what the answer carries: evidence (default: this step's increment of a linear read-out "
                        "fitted on these teacher records, and the running belief), none (belief and action), or "
                        "full (the teacher's own reasoning)")
    p.set_defaults(func=_cmd_dataset)

    from .evaluation.rollouts import DEFAULT_EVAL_SEEDS, EVAL_BASELINES

    p = sub.add_parser("eval", help="play a checkpoint and the baselines on the evaluation seeds, then grade")
    p.add_argument("--checkpoint", required=True, help="model directory (or a published checkpoint folder)")
    p.add_argument("--out", required=True, help="output root (eval_rollouts/ and eval_results/ go under it)")
    p.add_argument("--name", default="student")
    p.add_argument("--grader", choices=list(GRADERS), default="v3")
    p.add_argument("--continuous-seeds", default=DEFAULT_EVAL_SEEDS["continuous"])
    p.add_argument("--ood-seeds", default=DEFAULT_EVAL_SEEDS["ood"])
    p.add_argument("--discrete3-seeds", default=DEFAULT_EVAL_SEEDS["discrete3"])
    p.add_argument("--baselines", default=",".join(EVAL_BASELINES), help="comma-separated, empty for none")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help="default: 1.5x the longest teacher answer the checkpoint was trained on")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_cmd_eval)

    from .distill import PRESETS

    p = sub.add_parser("distill", help="run the whole recipe (teacher to evaluation) with a named preset")
    p.add_argument("--preset", choices=list(PRESETS), default="long")
    p.add_argument("--out", required=True)
    p.add_argument("--grader", choices=list(GRADERS), default="v3")
    p.set_defaults(func=_cmd_distill)

    parser._plugin_names = set()
    for name, entry_point in sorted(_plugin_commands().items()):
        if name in sub.choices:
            continue
        parser._plugin_names.add(name)
        p = sub.add_parser(name, add_help=False, help=f"from {entry_point.value.split(':')[0]} ({name} --help)")
        p.add_argument("plugin_args", nargs=argparse.REMAINDER)
        p.set_defaults(func=_cmd_plugin)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    if argv and argv[0] in _plugin_commands() and getattr(parser, "_plugin_names", set()) >= {argv[0]}:
        return _plugin_commands()[argv[0]].load()(argv[1:])  # its own parser reads every argument
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"rhythm {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
