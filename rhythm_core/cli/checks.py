"""The argument checks of the `rhythm` commands (rhythm_core.cli): `check_<command>(args)` runs before
any work and raises BadInput (or ValueError / OSError, which the CLI turns into one) naming the
argument or file; it may add what it resolved to `args` (seed lists, teacher settings, a model
folder) for the command to use."""

from __future__ import annotations

import argparse
import math
import os

from rhythm_env.sim.conditions import check_seed, check_training_seeds, parse_seeds

from ..errors import BadInput, UserError


def agents_arg(text: str) -> list[str]:
    """`--agents`: comma-separated agent names, each one rhythm_core.agents knows."""
    from ..agents import AGENTS

    names = [a.strip() for a in text.split(",") if a.strip()]
    unknown = [a for a in names if a not in AGENTS]
    if unknown or not names:
        shown = ", ".join(unknown) if unknown else repr(text)
        raise argparse.ArgumentTypeError(f"unknown agent(s) {shown}; allowed: {', '.join(AGENTS)}")
    return names


def check_baselines(args) -> None:
    args.seed_list = parse_seeds(args.seeds)
    if not args.seed_list:
        raise BadInput(f"--seeds {args.seeds!r} names no seed")
    for seed in (args.seed_list[0], args.seed_list[-1]):  # sorted: the ends bound the rest
        check_seed(args.condition, seed)


def check_teacher(args) -> None:
    from ..store import check_output_file
    from ..teacher.settings import OFFLINE_MODELS, TeacherSettings
    from ..teacher.trajectories import TrajectoryError, check_resumable

    args.purpose_stamp = None
    if args.purpose == "training":  # evaluation seeds never become training data
        args.seed_list = parse_seeds(args.seeds)
        check_training_seeds(args.condition, args.seed_list)
    else:
        from rhythm_env.sim.conditions import eval_seed_list

        from ..evaluation.teacher_play import EVALUATION_PURPOSE

        args.seed_list = eval_seed_list(args.condition, args.seeds)  # refuses anything but evaluation seeds
        args.purpose_stamp = EVALUATION_PURPOSE
    if not args.seed_list:
        raise BadInput(f"--seeds {args.seeds!r} names no seed")
    if args.backend in OFFLINE_MODELS:
        given = [flag for flag, value in (("--model", args.model), ("--base-url", args.base_url),
                                          ("--azure-endpoint", args.azure_endpoint)) if value]
        if given:
            raise BadInput(f"{', '.join(given)}: only for --backend openai or azure (the {args.backend} teacher is "
                           "offline)")
    try:
        args.settings = TeacherSettings(
            backend=args.backend, model=args.model or "", base_url=args.base_url,
            api_key=os.environ.get(args.api_key_env) if args.backend not in OFFLINE_MODELS else None,
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


def check_reeval(args) -> None:
    from ..store import check_input_file, check_output_dir

    check_input_file(args.jsonl, arg="--jsonl")
    check_output_dir(args.out, "reeval_report", inputs=[("--jsonl", args.jsonl)], overwrite=args.overwrite)


def check_dataset(args) -> None:
    from ..store import check_input_file, check_output_dir

    if not 0 < args.validation_fraction < 1:
        raise BadInput(f"--validation-fraction must be above 0 and below 1, got {args.validation_fraction}")
    check_input_file(args.jsonl, arg="--jsonl")
    check_output_dir(args.out, "sft_dataset", inputs=[("--jsonl", args.jsonl)], overwrite=args.overwrite)


def check_env_dataset(args) -> None:
    from rhythm_env.sim.conditions import check_purpose_seeds

    from ..store import check_output_dir

    try:
        args.seed_list = check_purpose_seeds(args.condition, parse_seeds(args.seeds), args.purpose)
    except ValueError as exc:
        raise BadInput(f"--seeds: {exc}") from exc
    check_output_dir(args.out, "env_dataset", overwrite=args.overwrite)


def check_eval(args) -> None:
    from rhythm_env.sim.conditions import eval_seed_list

    from ..evaluation.rollouts import EVAL_BASELINES
    from ..evaluation.teacher_play import TEACHER_PLAYER
    from ..store import check_output_root
    from ..training.models import resolve_model_dir

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
    # The checkpoint's player name names its rollout files (<name>__<condition>.jsonl) and its row in the
    # results: a reference agent's name would mix the two players up.
    if args.name in (*EVAL_BASELINES, TEACHER_PLAYER):
        raise BadInput(f"--name {args.name}: the name of a reference agent; pick another (e.g. student, grpo)")
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise BadInput(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    if not (math.isfinite(args.temperature) and 0 <= args.temperature <= 2):
        raise BadInput(f"--temperature must be between 0 and 2, got {args.temperature}")
    check_output_root(args.out, inputs=[("--checkpoint", args.checkpoint)])
    args.model_dir = resolve_model_dir(args.checkpoint)


def check_distill(args) -> None:
    from ..store import check_output_root, open_store, split_url

    if args.processes < 1:
        raise BadInput(f"--processes {args.processes}: expected a whole number ≥ 1 (training processes, data-parallel)")

    if split_url(args.out)[0] is not None:  # an object store: the run writes into a local cache, then uploads
        import tempfile
        from pathlib import Path

        args.store = open_store(args.out, default_root=Path(tempfile.gettempdir()) / "rhythm-distill", variable="--out")
        args.store.check()
        return
    args.store = None
    check_output_root(args.out)


def check_gpu_check(args) -> None:
    import math

    from ..gpu_check.run import STAGES, probe_device
    from ..store import check_output_file

    args.stage_list = [s.strip() for s in args.stages.split(",") if s.strip()]
    unknown = [s for s in args.stage_list if s not in STAGES]
    if unknown or not args.stage_list:
        raise BadInput(f"--stages: unknown stage {', '.join(unknown)}; allowed: {', '.join(STAGES)}" if unknown
                       else f"--stages {args.stages!r} names no stage; allowed: {', '.join(STAGES)}")
    if not (math.isfinite(args.budget_scale) and args.budget_scale > 0):
        raise BadInput(f"--budget-scale must be above 0, got {args.budget_scale}")
    check_output_file(args.out, arg="--out")
    if args.work is not None and os.path.exists(args.work) and not os.path.isdir(args.work):
        raise BadInput(f"--work {args.work} is a file; give a folder")
    args.device = probe_device()
    if not args.smoke and args.device[0] != "cuda":
        raise BadInput("no CUDA GPU is visible to torch here (a CPU build of torch, or no GPU): install a CUDA build "
                       "(`make TORCH_SPEC=torch install`) on a GPU machine, or run the CPU form with --smoke")


def check_serve_env(args) -> None:
    import errno
    import importlib
    import socket

    try:  # openenv (with uvicorn) comes with the environment package, but an install without its dependencies lacks it
        importlib.import_module("rhythm_env.text.openenv_server")
        importlib.import_module("uvicorn")
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing not in ("openenv", "uvicorn", "fastapi", "starlette", "websockets"):
            raise
        raise UserError(f"no module named {missing!r}; install the openenv extra: "
                        "pip install 'rhythm[openenv]'") from exc
    if args.max_sessions < 1:
        raise BadInput(f"--max-sessions must be >= 1, got {args.max_sessions}")
    if not 0 <= args.port <= 65535:
        raise BadInput(f"--port must be 0-65535 (0: a free port), got {args.port}")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(args.host, args.port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        raise BadInput(f"--host {args.host}: not an address to listen on ({exc.strerror})") from exc
    # Bound here, before any work, so a port in use is one line; the server then serves on this socket.
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise BadInput(f"--port {args.port}: {args.host}:{args.port} is already in use; pick another port "
                           "(--port 0 takes a free one)") from exc
        raise BadInput(f"--host {args.host} --port {args.port}: cannot listen there ({exc.strerror})") from exc
    args.socket = sock
