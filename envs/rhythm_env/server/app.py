"""The FastAPI app serving RhythmEnv (OpenEnv's create_app), as `rhythm serve-env` serves it.

    uvicorn server.app:app --host 0.0.0.0 --port 8000       # in this folder (the Docker image's command)
    server --port 8000 --max-sessions 16                    # the installed script

RHYTHM_PURPOSE ("training" or "evaluation": the weeks a reset may start), RHYTHM_GRADER ("v3" or "v2")
and MAX_CONCURRENT_ENVS (sessions at once, 16) configure `app`.
"""

import argparse
import os
import sys

from rhythm_env.text.openenv_server import create_rhythm_app


def _sessions(text: str, name: str = "") -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < 1:
        raise ValueError(f"{name + ' ' if name else ''}must be an integer >= 1, got {text!r}")
    return value


def __getattr__(name: str):
    # `app` is made when first asked for (uvicorn's `server.app:app`), so the `server` script, which makes its
    # own from its flags, answers a bad setting in one line instead of failing at import.
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()["app"] = served = create_rhythm_app(
        purpose=os.getenv("RHYTHM_PURPOSE", "training"), grader=os.getenv("RHYTHM_GRADER", "v3"),
        max_sessions=_sessions(os.getenv("MAX_CONCURRENT_ENVS", "16"), "MAX_CONCURRENT_ENVS"))
    return served


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        # One line, as the pipeline's CLI answers: the usage is --help's.
        self.exit(2, f"{self.prog}: error: {message}\n")


def _max_sessions(text: str) -> int:
    try:
        return _sessions(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv=None):
    """Serve RhythmEnv until Ctrl-C: `server [--host H] [--port P] [--purpose P] [--grader G] [--max-sessions N]`."""
    import uvicorn

    parser = _Parser(prog="server", description="Serve RhythmEnv over OpenEnv's HTTP and WebSocket API")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--purpose", choices=("training", "evaluation"), default=os.getenv("RHYTHM_PURPOSE", "training"))
    parser.add_argument("--grader", choices=("v3", "v2"), default=os.getenv("RHYTHM_GRADER", "v3"))
    parser.add_argument("--max-sessions", type=_max_sessions, default=os.getenv("MAX_CONCURRENT_ENVS", "16"),
                        help="weeks played at once, one WebSocket session each (MAX_CONCURRENT_ENVS)")
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error(f"argument --port: must be in 0..65535, got {args.port}")
    served = create_rhythm_app(purpose=args.purpose, grader=args.grader, max_sessions=args.max_sessions)
    try:
        uvicorn.run(served, host=args.host, port=args.port, log_level="warning")
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
