"""The FastAPI app serving RhythmEnv (OpenEnv's create_app), as `rhythm serve-env` serves it.

    uvicorn server.app:app --host 0.0.0.0 --port 8000       # in this folder (the Docker image's command)
    server --port 8000 --max-sessions 16                    # the installed script

RHYTHM_PURPOSE ("training" or "evaluation": the weeks a reset may start), RHYTHM_GRADER ("v3" or "v2")
and MAX_CONCURRENT_ENVS (sessions at once, 16) configure `app`.
"""

import os

from rhythm_core.text_env.openenv_server import create_rhythm_app

app = create_rhythm_app(purpose=os.getenv("RHYTHM_PURPOSE", "training"), grader=os.getenv("RHYTHM_GRADER", "v3"),
                        max_sessions=int(os.getenv("MAX_CONCURRENT_ENVS", "16")))


def main(argv=None):
    """Serve RhythmEnv until Ctrl-C: `server [--host H] [--port P] [--purpose P] [--max-sessions N]`."""
    import argparse

    import uvicorn

    parser = argparse.ArgumentParser(prog="server", description="Serve RhythmEnv over OpenEnv's HTTP and WebSocket API")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--purpose", choices=("training", "evaluation"), default=os.getenv("RHYTHM_PURPOSE", "training"))
    parser.add_argument("--grader", choices=("v3", "v2"), default=os.getenv("RHYTHM_GRADER", "v3"))
    parser.add_argument("--max-sessions", type=int, default=int(os.getenv("MAX_CONCURRENT_ENVS", "16")))
    args = parser.parse_args(argv)
    served = create_rhythm_app(purpose=args.purpose, grader=args.grader, max_sessions=args.max_sessions)
    uvicorn.run(served, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
