"""The `rhythm` command line.

Each command checks every argument before any work (`checks.check_*`: types, ranges, names, seed
roles, a paid backend's key, where it writes); a mistake prints one line naming the argument or file
and exits 2 with nothing written, argparse's own mistakes included (`parsing`). Outputs follow `rhythm_core.store.outputs`: written beside their place and renamed
into it; an existing output is replaced only when it is ours or with --overwrite. A bug keeps its
traceback; `--debug` (or RHYTHM_DEBUG=1) shows a mistake's traceback too.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from rhythm_env.protocol import (
    DEFAULT_PROMPT_FORMAT,
    DEFAULT_READOUT_FORM,
    DEFAULT_REASONING,
    PROMPT_FORMATS,
    READOUT_FORMS,
    REASONING,
)
from rhythm_env.sim.conditions import CONDITIONS

from ..errors import BadInput, UserError
from .checks import (
    agents_arg,
    check_baselines,
    check_dataset,
    check_distill,
    check_env_dataset,
    check_eval,
    check_gpu_check,
    check_reeval,
    check_serve_env,
    check_teacher,
)
from .parsing import HelpFormatter, OneLineParser, package_version, plugin_commands, plugin_description


def _cmd_baselines(args) -> int:
    import polars as pl
    from tqdm import tqdm

    from ..evaluation.baselines import BASELINE_AGENTS, baselines_table, run_baselines

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


def _cmd_teacher(args) -> int:
    from tqdm import tqdm

    from ..compute.threads import available_cores
    from ..teacher.run import run_teacher

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
    if not settings.offline:
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
    from ..data.reeval_report import reeval_file

    report = reeval_file(args.jsonl, args.grader, args.out, compare_grader=args.compare, overwrite=args.overwrite)
    print(report.markdown())
    print(f"wrote {args.out}/per_episode.parquet, per_condition.parquet, report.json, report.md")
    return 0


def _cmd_dataset(args) -> int:
    from ..data.sft_dataset import build_sft_dataset, save_sft_dataset
    from ..teacher.trajectories import read_trajectories

    records = read_trajectories(args.jsonl, allow_truncated_tail=False).records
    keep = None
    if args.filter == "beat_heuristic":
        from ..data.reeval_report import seeds_where_teacher_beats_heuristic

        keep = seeds_where_teacher_beats_heuristic(records, args.grader)
    dataset = build_sft_dataset(records, validation_fraction=args.validation_fraction, keep_seeds=keep,
                                prompt_format=args.prompt_format, reasoning=args.reasoning,
                                readout_form=args.readout_form)
    provenance = {"teacher": records[0]["teacher"], "source_trajectories": str(args.jsonl), "filter": args.filter,
                  "filter_grader": args.grader if args.filter != "none" else None,
                  "prompt_format": args.prompt_format, "reasoning": args.reasoning,
                  **({"readout_form": args.readout_form} if args.reasoning == "evidence" else {})}
    summary = save_sft_dataset(dataset, args.out, provenance, overwrite=args.overwrite)
    print(f"{summary['path']}: examples {summary['examples']}, episodes {summary['episodes']}, "
          f"content {summary['content_hash'][:16]}")
    return 0


def _cmd_env_dataset(args) -> int:
    from rhythm_env.text.tool_env import env_prompt_dataset

    from ..data.env_dataset import save_env_dataset

    dataset = env_prompt_dataset(args.condition, args.seed_list, purpose=args.purpose)
    summary = save_env_dataset(dataset, args.out, {"condition": args.condition, "seeds": args.seeds,
                                                   "purpose": args.purpose}, overwrite=args.overwrite)
    print(f"{summary['path']}: {summary['rows']} weeks of {args.condition} ({args.purpose}), for "
          f"rhythm_env.text.tool_env.RhythmToolEnv(purpose='{args.purpose}')")
    return 0


def _cmd_eval(args) -> int:
    from tqdm import tqdm

    from ..evaluation.results import eval_results_stage
    from ..evaluation.rollouts import eval_rollouts_stage
    from ..training.generation import SamplingConfig
    from ..training.models import checkpoint_info

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


def _cmd_distill(args) -> int:
    from ..distill import run_distillation

    if args.store is None:
        summary = run_distillation(args.out, args.preset, grader=args.grader, processes=args.processes)
        print(f"summary: {args.out}/distill_summary.json; results: {summary['results_json']}")
        return 0
    from ..store import FILES_MANIFEST, is_version_folder

    store = args.store  # every stage publishes into the local cache; each published version then goes up
    summary = run_distillation(store.cache, args.preset, grader=args.grader, processes=args.processes)
    for record in sorted(store.cache.rglob(FILES_MANIFEST)):
        if is_version_folder(record.parent.name):
            adopted = store.publish(record.parent).adopted
            if adopted:
                print(adopted)
    print(f"artifacts: {store.url} (local copy {store.cache}); results: {store.to_store(summary['results_json'])}")
    return 0


def _cmd_gpu_check(args) -> int:
    import shutil
    import tempfile
    from pathlib import Path

    from ..gpu_check.run import WORK_PREFIX, run_check

    # A folder the user named is theirs to keep (it may hold an earlier run's stages, which --stages
    # can build on); the default temporary one (gigabytes on a GPU) goes at the end, an interrupt too.
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix=WORK_PREFIX))
    keep = args.keep or args.work is not None
    try:
        record = run_check(Path(args.out), work, args.smoke, args.stage_list, args.budget_scale, device=args.device)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"gpu-check: {'every stage finished' if record['ok'] else 'FAILED'}; figures in {args.out}, "
          + (f"work in {work}" if keep else "work folder removed (--keep keeps it)"))
    return 0 if record["ok"] else 1


def _cmd_serve_env(args) -> int:
    from rhythm_env.text.openenv_server import create_rhythm_app, serve

    app = create_rhythm_app(purpose=args.purpose, grader=args.grader, max_sessions=args.max_sessions)
    host, port = args.socket.getsockname()[:2]
    url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    serve(app, args.socket, on_ready=lambda: print(
        f"RhythmEnv at {url} ({args.purpose} weeks, grader {args.grader}, up to {args.max_sessions} sessions); play it "
        f"with rhythm_env.text.openenv_server.RhythmEnvClient(base_url='{url}'); Ctrl-C stops", flush=True))
    print("rhythm serve-env: stopped", file=sys.stderr)
    return 0


def _cmd_plugin(args) -> int:
    return plugin_commands()[args.command].load()(args.plugin_args)


def build_parser() -> argparse.ArgumentParser:
    from rhythm_env.graders import DEFAULT_GRADER, GRADERS

    parser = OneLineParser(prog="rhythm", description="RhythmEnv distillation toolkit", formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"rhythm {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name, help, func, check=None):
        p = sub.add_parser(name, help=help, description=help, formatter_class=HelpFormatter)
        p.add_argument("--debug", action="store_true",
                       help="show the traceback of a mistake too (also RHYTHM_DEBUG=1)")
        p.set_defaults(func=func, check=check)
        return p

    def grader(p, help="the grader that scores the episodes"):
        p.add_argument("--grader", choices=list(GRADERS), default=DEFAULT_GRADER, help=help)

    p = command("baselines", "score the baseline agents on a condition", _cmd_baselines, check_baselines)
    p.add_argument("--condition", choices=list(CONDITIONS), default="continuous", help="which kind of week to play")
    p.add_argument("--seeds", default="0-199", help="seed range, e.g. 0-199 or 1,2,10-12")
    grader(p)
    p.add_argument("--agents", type=agents_arg, default=None, help="comma-separated agent names (default: all)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")

    from ..teacher.settings import BACKENDS, REASONING_EFFORTS, STRUCTURED_OUTPUT_MODES, TeacherSettings

    defaults = TeacherSettings()
    p = command("teacher", "play teacher episodes into a resumable JSONL file", _cmd_teacher, check_teacher)
    p.add_argument("--backend", choices=list(BACKENDS), default=defaults.backend,
                   help="search: the Bayesian teacher's inference acting by Monte-Carlo rollouts (free, what the "
                        "recipe distils); bayes: the offline Bayesian teacher; bayes_v3: the same planning for "
                        "grader v3; openai: any OpenAI-compatible endpoint; azure: Azure OpenAI")
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

    p = command("reeval", "re-grade teacher episodes next to baselines on the same seeds", _cmd_reeval, check_reeval)
    p.add_argument("--jsonl", required=True, help="teacher trajectory file")
    grader(p, "the grader the report is about")
    p.add_argument("--compare", choices=list(GRADERS), default="v2", help="second grader, for the published numbers")
    p.add_argument("--out", required=True,
                   help="report folder, in a folder that exists; replaces an earlier report there")
    p.add_argument("--overwrite", action="store_true", help="replace --out even if it is not an earlier report")

    p = command("dataset", "build the SFT dataset (Hugging Face, conversational) from teacher episodes",
                _cmd_dataset, check_dataset)
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
    p.add_argument("--readout-form", choices=list(READOUT_FORMS), default=DEFAULT_READOUT_FORM,
                   help="the evidence chain: linear (each increment a function of the shown anomaly) or innovation "
                        "(also of the previous belief and the step; the long preset's)")

    p = command("env-dataset", "write the prompt dataset of RhythmEnv weeks for a TRL trainer "
                "(GRPOTrainer(environment_factory=RhythmToolEnv))", _cmd_env_dataset, check_env_dataset)
    p.add_argument("--condition", choices=list(CONDITIONS), default="continuous", help="which kind of week to play")
    p.add_argument("--seeds", default="1000-1999",
                   help="seed range, e.g. 1000-1999 (training: continuous training seeds outside 9500-9699)")
    p.add_argument("--purpose", choices=["training", "evaluation"], default="training",
                   help="training: only training seeds; evaluation: only evaluation seeds")
    p.add_argument("--out", required=True,
                   help="dataset folder (datasets.load_from_disk loads it), in a folder that exists; replaces an "
                        "earlier env dataset there")
    p.add_argument("--overwrite", action="store_true", help="replace --out even if it is not an earlier env dataset")

    p = command("serve-env", "serve RhythmEnv as an OpenEnv environment (HTTP and WebSocket) for other trainers; "
                "rhythm_env.text.openenv_server.RhythmEnvClient plays it", _cmd_serve_env, check_serve_env)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (0: a free one, printed)")
    p.add_argument("--max-sessions", type=int, default=16, help="weeks played at once, one WebSocket session each")
    p.add_argument("--purpose", choices=["training", "evaluation"], default="training",
                   help="training: weeks of training seeds outside the tuning seeds; evaluation: only evaluation seeds")
    grader(p, "the grader whose score of a week is the reward of its last step")

    from ..evaluation.rollouts import DEFAULT_EVAL_SEEDS, EVAL_BASELINES

    p = command("eval", "play a checkpoint and the baselines on the evaluation seeds, then grade", _cmd_eval,
                check_eval)
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

    from ..distill import DEFAULT_PRESET, PRESETS

    p = command("distill", "run the whole recipe (teacher to evaluation) with a named preset", _cmd_distill,
                check_distill)
    p.add_argument("--preset", choices=list(PRESETS), default=DEFAULT_PRESET,
                   help="demo: what `make demo` trains (on CPU; its time: docs/results.md); long: the same recipe with "
                        "more weeks and steps, from the search teacher, the innovation evidence chain; published: the 3B LoRA student (for a GPU)")
    p.add_argument("--out", required=True, help="output root, created if missing in a folder that exists, or an "
                                                "object store (s3://bucket/prefix: every version is uploaded there)")
    p.add_argument("--processes", type=int, default=1,
                   help="SFT and GRPO data-parallel on this many processes (torchrun: gloo on CPU, one GPU each on "
                        "CUDA); the preset's global batch is kept, so the recipe learns the same")
    grader(p)

    from ..gpu_check.run import STAGES

    p = command("gpu-check", "before paying for GPU time: every GPU stage offline on a random-weight 3B-shaped "
                "student and the demo's tiny one, each in a child process under a time budget; exit 1 when one "
                "crashes, overruns or fails", _cmd_gpu_check, check_gpu_check)
    p.add_argument("--smoke", action="store_true", help="the CPU form: tiny shapes, a minute or two (also runs on a GPU)")
    p.add_argument("--out", default="gpu_check.json", help="the JSON file the figures go to, rewritten as each stage ends")
    p.add_argument("--work", default=None,
                   help="folder for the stages' data and models, kept at the end (default: a temporary folder, "
                        "removed at the end unless --keep)")
    p.add_argument("--keep", action="store_true", help="keep the temporary work folder (its path is printed)")
    p.add_argument("--stages", default=",".join(STAGES), help="comma-separated, run in this order")
    p.add_argument("--budget-scale", type=float, default=1.0, help="multiply every stage's time budget (a slower GPU)")

    parser._plugin_names = set()
    for name, entry_point in sorted(plugin_commands().items()):
        if name in sub.choices:
            continue
        parser._plugin_names.add(name)
        p = sub.add_parser(name, add_help=False, help=plugin_description(entry_point).replace("%", "%%"))
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
    from ..processes import sigterm_interrupts
    from ..store import StageIncomplete

    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    if argv and argv[0] in parser._plugin_names:
        return plugin_commands()[argv[0]].load()(argv[1:])  # its own parser reads every argument
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
