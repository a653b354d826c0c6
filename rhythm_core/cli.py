"""The `rhythm` command line.

Each command checks every argument before any work (`_check_*`: types, ranges, names, seed roles, a
paid backend's key, where it writes); a mistake prints one line naming the argument or file and exits
2 with nothing written. Outputs follow `rhythm_core.outputs`: written beside their place and renamed
into it; an existing output is replaced only when it is ours or with --overwrite. A bug keeps its
traceback; `--debug` (or RHYTHM_DEBUG=1) shows a mistake's traceback too.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

from .env.conditions import CONDITIONS, check_seed, check_training_seeds, parse_seeds
from .errors import BadInput, UserError
from .protocol import DEFAULT_PROMPT_FORMAT, DEFAULT_REASONING, PROMPT_FORMATS, REASONING


def _agents_arg(text: str) -> list[str]:
    from .agents import AGENTS

    names = [a.strip() for a in text.split(",") if a.strip()]
    unknown = [a for a in names if a not in AGENTS]
    if unknown or not names:
        shown = ", ".join(unknown) if unknown else repr(text)
        raise argparse.ArgumentTypeError(f"unknown agent(s) {shown}; allowed: {', '.join(AGENTS)}")
    return names


def _check_baselines(args) -> None:
    args.seed_list = parse_seeds(args.seeds)
    if not args.seed_list:
        raise BadInput(f"--seeds {args.seeds!r} names no seed")
    for seed in (args.seed_list[0], args.seed_list[-1]):  # sorted: the ends bound the rest
        check_seed(args.condition, seed)


def _cmd_baselines(args) -> int:
    import polars as pl
    from tqdm import tqdm

    from .evaluation.baselines import BASELINE_AGENTS, baselines_table, run_baselines

    seeds = args.seed_list
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


def _check_teacher(args) -> None:
    from .outputs import check_output_file
    from .teacher.settings import TeacherSettings
    from .teacher.trajectories import TrajectoryError, check_resumable

    args.purpose_stamp = None
    if args.purpose == "training":  # evaluation seeds never become training data
        args.seed_list = parse_seeds(args.seeds)
        check_training_seeds(args.condition, args.seed_list)
    else:
        from .env.conditions import eval_seed_list
        from .evaluation.teacher_play import EVALUATION_PURPOSE

        args.seed_list = eval_seed_list(args.condition, args.seeds)  # refuses anything but evaluation seeds
        args.purpose_stamp = EVALUATION_PURPOSE
    if not args.seed_list:
        raise BadInput(f"--seeds {args.seeds!r} names no seed")
    if args.backend == "bayes":
        given = [flag for flag, value in (("--model", args.model), ("--base-url", args.base_url),
                                          ("--azure-endpoint", args.azure_endpoint)) if value]
        if given:
            raise BadInput(f"{', '.join(given)}: only for --backend openai or azure (the bayes teacher is offline)")
    try:
        args.settings = TeacherSettings(
            backend=args.backend, model=args.model or "", base_url=args.base_url,
            api_key=os.environ.get(args.api_key_env) if args.backend != "bayes" else None,
            api_key_env=args.api_key_env, azure_endpoint=args.azure_endpoint, concurrency=args.concurrency,
            request_timeout_s=args.timeout, connect_budget_s=args.connect_budget, max_retries=args.max_retries,
            price_input_per_m=args.price_input, price_output_per_m=args.price_output,
            price_cached_input_per_m=args.price_cached_input, max_cost_usd=args.max_cost_usd,
            temperature=args.temperature, max_tokens=args.max_tokens, reasoning_effort=args.reasoning_effort,
            structured_output=args.structured_output, prompt_format=args.prompt_format,
        )
    except ValueError as exc:  # the settings name their field; the user knows it as a flag
        raise BadInput(_as_flags(str(exc))) from exc
    args.settings.check_credentials()
    check_output_file(args.out, arg="--out")
    if os.path.exists(args.out):  # resumed: the same teacher and purpose only, a file we may extend
        try:
            check_resumable(args.out, teacher_id=args.settings.teacher_id, purpose=args.purpose_stamp)
        except TrajectoryError as exc:
            raise BadInput(f"--out: cannot resume: {exc}") from exc


# TeacherSettings' field names -> the flags that set them, for messages.
_FLAGS = {"request_timeout_s": "--timeout", "connect_budget_s": "--connect-budget", "max_retries": "--max-retries",
          "price_input_per_m": "--price-input", "price_cached_input_per_m": "--price-cached-input",
          "price_output_per_m": "--price-output", "max_cost_usd": "--max-cost-usd", "temperature": "--temperature",
          "max_tokens": "--max-tokens", "concurrency": "--concurrency", "azure_endpoint": "--azure-endpoint",
          "base_url": "--base-url", "a model name": "a --model"}


def _as_flags(message: str) -> str:
    for field, flag in _FLAGS.items():
        message = message.replace(field, flag)
    return message


def _cmd_teacher(args) -> int:
    from tqdm import tqdm

    from .compute.threads import available_cores
    from .teacher.run import run_teacher

    settings, seeds, purpose = args.settings, args.seed_list, args.purpose_stamp
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


def _check_reeval(args) -> None:
    from .outputs import check_input_file, check_output_dir

    check_input_file(args.jsonl, arg="--jsonl")
    check_output_dir(args.out, "reeval_report", inputs=[("--jsonl", args.jsonl)], overwrite=args.overwrite)


def _cmd_reeval(args) -> int:
    from .data.reeval_report import reeval_file

    report = reeval_file(args.jsonl, args.grader, args.out, compare_grader=args.compare, overwrite=args.overwrite)
    print(report.markdown())
    print(f"wrote {args.out}/per_episode.parquet, per_condition.parquet, report.json, report.md")
    return 0


def _check_dataset(args) -> None:
    from .outputs import check_input_file, check_output_dir

    if not 0 < args.validation_fraction < 1:
        raise BadInput(f"--validation-fraction must be above 0 and below 1, got {args.validation_fraction}")
    check_input_file(args.jsonl, arg="--jsonl")
    check_output_dir(args.out, "sft_dataset", inputs=[("--jsonl", args.jsonl)], overwrite=args.overwrite)


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
    summary = save_sft_dataset(dataset, args.out, provenance, overwrite=args.overwrite)
    print(f"{summary['path']}: examples {summary['examples']}, episodes {summary['episodes']}, "
          f"content {summary['content_hash'][:16]}")
    return 0


def _check_eval(args) -> None:
    from .env.conditions import eval_seed_list
    from .evaluation.rollouts import EVAL_BASELINES
    from .outputs import check_output_root
    from .training.models import resolve_model_dir

    args.seed_specs = {"continuous": args.continuous_seeds, "ood": args.ood_seeds, "discrete3": args.discrete3_seeds}
    for condition, spec in args.seed_specs.items():
        try:
            if not eval_seed_list(condition, spec):
                raise ValueError(f"{spec!r} names no seed")
        except ValueError as exc:
            raise BadInput(f"--{condition}-seeds: {exc}") from exc
    args.baseline_list = [b.strip() for b in args.baselines.split(",") if b.strip()] if args.baselines else []
    unknown = [b for b in args.baseline_list if b not in EVAL_BASELINES]
    if unknown:
        raise BadInput(f"--baselines: unknown baseline(s) {', '.join(unknown)}; allowed: {', '.join(EVAL_BASELINES)}")
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise BadInput(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    if not (math.isfinite(args.temperature) and 0 <= args.temperature <= 2):
        raise BadInput(f"--temperature must be between 0 and 2, got {args.temperature}")
    check_output_root(args.out, inputs=[("--checkpoint", args.checkpoint)])
    args.model_dir = resolve_model_dir(args.checkpoint)


def _cmd_eval(args) -> int:
    from tqdm import tqdm

    from .evaluation.results import eval_results_stage
    from .evaluation.rollouts import eval_rollouts_stage
    from .training.generation import SamplingConfig
    from .training.models import checkpoint_info

    model_dir, seeds, baselines = args.model_dir, args.seed_specs, args.baseline_list
    sampling = SamplingConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=args.seed)
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


def _check_distill(args) -> None:
    from .outputs import check_output_root

    check_output_root(args.out)


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


class _Parser(argparse.ArgumentParser):
    """argparse's own mistakes (a missing or unknown option, a bad choice) on one line, exit 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's help ends with its default (none shown for flags and required options)."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False or action.required or action.default == argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rhythm")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    from .graders import GRADERS

    parser = _Parser(prog="rhythm", description="RhythmEnv distillation toolkit", formatter_class=_Help)
    parser.add_argument("--version", action="version", version=f"rhythm {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name, help, func, check=None):
        p = sub.add_parser(name, help=help, description=help, formatter_class=_Help)
        p.add_argument("--debug", action="store_true",
                       help="show the traceback of a mistake too (also RHYTHM_DEBUG=1)")
        p.set_defaults(func=func, check=check)
        return p

    def grader(p, help="the grader that scores the episodes"):
        p.add_argument("--grader", choices=list(GRADERS), default="v3", help=help)

    p = command("baselines", "score the baseline agents on a condition", _cmd_baselines, _check_baselines)
    p.add_argument("--condition", choices=list(CONDITIONS), default="continuous", help="which kind of week to play")
    p.add_argument("--seeds", default="0-199", help="seed range, e.g. 0-199 or 1,2,10-12")
    grader(p)
    p.add_argument("--agents", type=_agents_arg, default=None, help="comma-separated agent names (default: all)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")

    from .teacher.settings import REASONING_EFFORTS, STRUCTURED_OUTPUT_MODES, TeacherSettings

    defaults = TeacherSettings()
    p = command("teacher", "play teacher episodes into a resumable JSONL file", _cmd_teacher, _check_teacher)
    p.add_argument("--backend", choices=["bayes", "openai", "azure"], default="bayes",
                   help="bayes: the offline Bayesian teacher (free); openai: any OpenAI-compatible endpoint; "
                        "azure: Azure OpenAI")
    p.add_argument("--condition", choices=list(CONDITIONS), default="continuous", help="which kind of week to play")
    p.add_argument("--seeds", default="1000-1029", help="seeds to play, e.g. 1000-1029 (continuous training seeds: "
                                                        "1000-9999)")
    p.add_argument("--purpose", choices=["training", "evaluation"], default="training",
                   help="training: only training seeds; evaluation: only evaluation seeds, records stamped purpose "
                        "'evaluation', which no SFT dataset accepts")
    p.add_argument("--out", required=True,
                   help="JSONL file, in a folder that exists; an existing file of the same teacher and purpose is "
                        "resumed (its episodes are kept), any other file is refused")
    p.add_argument("--base-url", default=None,
                   help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 (default: OpenAI's)")
    p.add_argument("--azure-endpoint", default=None, help="Azure OpenAI resource URL (--backend azure)")
    p.add_argument("--model", default=None, help="model (or Azure deployment) name; required by openai and azure")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY",
                   help="environment variable holding the API key (required except for an endpoint on this machine)")
    p.add_argument("--concurrency", type=int, default=defaults.concurrency, help="episodes played at once")
    p.add_argument("--timeout", type=float, default=defaults.request_timeout_s, help="request timeout in seconds")
    p.add_argument("--connect-budget", type=float, default=defaults.connect_budget_s,
                   help="seconds an unreachable endpoint is retried before the run fails")
    p.add_argument("--max-retries", type=int, default=defaults.max_retries,
                   help="retries of one request on 429, 5xx, timeouts and dropped connections")
    p.add_argument("--price-input", type=float, default=0.0, help="USD per 1M (uncached) prompt tokens")
    p.add_argument("--price-cached-input", type=float, default=None,
                   help="USD per 1M cached prompt tokens (default: the --price-input rate)")
    p.add_argument("--price-output", type=float, default=0.0, help="USD per 1M completion tokens (reasoning included)")
    p.add_argument("--reasoning-effort", choices=list(REASONING_EFFORTS), default=None,
                   help="sent only when given (reasoning models)")
    p.add_argument("--prompt-format", choices=list(PROMPT_FORMATS), default="table",
                   help="how each request renders the week: table (cheapest billed), chat or chat_labeled")
    p.add_argument("--structured-output", choices=list(STRUCTURED_OUTPUT_MODES), default="auto",
                   help="strict JSON schema answers; auto falls back to free text if the endpoint refuses it")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="completion budget (default 400, or 4000 for reasoning models)")
    p.add_argument("--temperature", type=float, default=None,
                   help="0 to 2 (default 0.0, or the model's own default for reasoning models)")
    p.add_argument("--max-cost-usd", type=float, default=None,
                   help="stop before spending more than this many dollars (default: no limit)")

    p = command("reeval", "re-grade teacher episodes next to baselines on the same seeds", _cmd_reeval, _check_reeval)
    p.add_argument("--jsonl", required=True, help="teacher trajectory file")
    grader(p, "the grader the report is about")
    p.add_argument("--compare", choices=list(GRADERS), default="v2", help="second grader, for the published numbers")
    p.add_argument("--out", required=True,
                   help="report folder, in a folder that exists; replaces an earlier report there")
    p.add_argument("--overwrite", action="store_true", help="replace --out even if it is not an earlier report")

    p = command("dataset", "build the SFT dataset (Hugging Face, conversational) from teacher episodes",
                _cmd_dataset, _check_dataset)
    p.add_argument("--jsonl", required=True, help="teacher trajectory file")
    p.add_argument("--out", required=True,
                   help="dataset folder (datasets.load_from_disk loads it), in a folder that exists; replaces an "
                        "earlier dataset there")
    p.add_argument("--overwrite", action="store_true", help="replace --out even if it is not an earlier dataset")
    p.add_argument("--filter", choices=["none", "beat_heuristic"], default="none",
                   help="beat_heuristic keeps the weeks where the teacher out-scored the heuristic")
    grader(p, "the grader the filter uses")
    p.add_argument("--validation-fraction", type=float, default=0.1, help="share of weeks held out, above 0 and below 1")
    p.add_argument("--prompt-format", choices=list(PROMPT_FORMATS), default=DEFAULT_PROMPT_FORMAT,
                   help="chat_labeled: the week as one conversation, every number after its meter's name; chat: the "
                        "same without the names; table: one example per step")
    p.add_argument("--reasoning", choices=list(REASONING), default=DEFAULT_REASONING,
                   help="what the answer carries: evidence (this step's increment of a linear read-out fitted on "
                        "these teacher records, and the running belief), none (belief and action), or full (the "
                        "teacher's own reasoning)")

    from .evaluation.rollouts import DEFAULT_EVAL_SEEDS, EVAL_BASELINES

    p = command("eval", "play a checkpoint and the baselines on the evaluation seeds, then grade", _cmd_eval,
                _check_eval)
    p.add_argument("--checkpoint", required=True, help="model folder (or a published checkpoint folder holding model/)")
    p.add_argument("--out", required=True,
                   help="output root, created if missing in a folder that exists (eval_rollouts/ and eval_results/ "
                        "go under it)")
    p.add_argument("--name", default="student", help="the checkpoint's player name in the results")
    grader(p)
    for condition in ("continuous", "ood", "discrete3"):
        p.add_argument(f"--{condition}-seeds", default=DEFAULT_EVAL_SEEDS[condition],
                       help=f"evaluation seeds of {condition}")
    p.add_argument("--baselines", default=",".join(EVAL_BASELINES), help="comma-separated reference agents, "
                                                                          "empty for none")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help="answer budget (default: 1.5x the longest teacher answer the checkpoint was trained on)")
    p.add_argument("--temperature", type=float, default=0.0, help="sampling temperature, 0 to 2 (0: greedy)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")

    from .distill import PRESETS

    p = command("distill", "run the whole recipe (teacher to evaluation) with a named preset", _cmd_distill,
                _check_distill)
    p.add_argument("--preset", choices=list(PRESETS), default="long",
                   help="demo: what `make demo` trains; long: the same recipe with more weeks and steps")
    p.add_argument("--out", required=True, help="output root, created if missing in a folder that exists")
    grader(p)

    parser._plugin_names = set()
    for name, entry_point in sorted(_plugin_commands().items()):
        if name in sub.choices:
            continue
        parser._plugin_names.add(name)
        p = sub.add_parser(name, add_help=False, help=f"from {entry_point.value.split(':')[0]} ({name} --help)")
        p.add_argument("plugin_args", nargs=argparse.REMAINDER)
        p.set_defaults(func=_cmd_plugin, check=None, debug=False)
    return parser


def _fail(command: str, exc: BaseException, debug: bool) -> int:
    if debug:
        raise exc
    message = " ".join(str(exc).split()) or type(exc).__name__  # one line
    print(f"rhythm {command}: error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    from .artifacts import StageIncomplete
    from .forked import sigterm_interrupts

    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    if argv and argv[0] in _plugin_commands() and getattr(parser, "_plugin_names", set()) >= {argv[0]}:
        return _plugin_commands()[argv[0]].load()(argv[1:])  # its own parser reads every argument
    args = parser.parse_args(argv)
    debug = args.debug or os.environ.get("RHYTHM_DEBUG", "") not in ("", "0")
    with sigterm_interrupts():  # a `kill` cleans up as Ctrl-C does: no staging folder or worker left
        try:
            if args.check is not None:
                try:
                    args.check(args)
                except UserError:
                    raise
                except (ValueError, OSError) as exc:  # the checks raise these for a bad argument, never for a bug
                    raise BadInput(str(exc)) from exc
            return args.func(args)
        except UserError as exc:
            return _fail(args.command, exc, debug)
        except StageIncomplete as exc:  # stopped early, its work kept for a re-run
            _fail(args.command, exc, debug)
            return 1
        except KeyboardInterrupt:
            print(f"rhythm {args.command}: interrupted; what was finished is kept", file=sys.stderr)
            return 130
        except BrokenPipeError:  # `rhythm baselines | head -1`: the reader is gone, nothing left to say
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 141


if __name__ == "__main__":
    sys.exit(main())
