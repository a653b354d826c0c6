"""`dagster dev` on the repository's workspace as a context manager, and Dagster's public GraphQL API on it:
what `make demo` launches its backfill through, and what the UI tests drive.

The server runs in its own process group (webserver, daemon, code server, run workers), stopped as one on
exit: SIGTERM, then SIGKILL to whatever is left after a grace period.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
START_S = 180.0


class DevServerError(RuntimeError):
    """dagster dev exited or did not answer; the message ends with its log's last lines."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class DevServer:
    def __init__(self, base: str, proc: subprocess.Popen, log: Path):
        self.base, self.proc, self.log = base, proc, log

    def log_tail(self, n: int = 40) -> str:
        lines = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        return "\n".join(lines[-n:])

    def graphql(self, query: str, variables: dict | None = None, timeout: float = 60) -> dict:
        """The data of a GraphQL answer; a RuntimeError naming its errors."""
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        request = urllib.request.Request(self.base + "/graphql", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer = json.load(response)
        if answer.get("errors"):
            raise RuntimeError(f"GraphQL errors: {answer['errors']}")
        return answer["data"]

    def wait_until_ready(self, start_s: float = START_S) -> None:
        """Until GET /server_info answers and the code location has loaded its repository."""
        deadline = time.monotonic() + start_s
        while True:
            if self.proc.poll() is not None:
                raise DevServerError(f"dagster dev exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.base + "/server_info", timeout=5):
                    pass
                repos = self.graphql("{ repositoriesOrError { ... on RepositoryConnection { nodes { name } } } }")
                if repos["repositoriesOrError"].get("nodes"):
                    return
            except (OSError, ValueError, RuntimeError):  # not listening yet, or answering before it is ready
                pass
            if time.monotonic() > deadline:
                raise DevServerError(f"dagster dev did not answer within {start_s:.0f} s:\n{self.log_tail()}")
            time.sleep(1)

    def repository(self) -> dict:
        """The `rhythm` location's repository selector."""
        repos = self.graphql("{ repositoriesOrError { ... on RepositoryConnection { nodes { name location { name } } } } }")
        node = repos["repositoriesOrError"]["nodes"][0]
        return {"repositoryLocationName": node["location"]["name"], "repositoryName": node["name"]}


def default_sigint() -> None:
    # dagster dev maps SIGTERM to its SIGINT handler; under a shell that started us in the background
    # SIGINT is inherited as ignored, and dagster dev would then ignore SIGTERM too.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def stop(proc: subprocess.Popen, grace_s: float = 30) -> None:
    """SIGTERM to the process group, then SIGKILL to whatever is left of it."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 30.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
        try:  # the leader is gone; its group may still hold children
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return


@contextmanager
def dev_server(dagster_home: Path, log: Path, env: dict | None = None, start_s: float = START_S):
    """`dagster dev` on workspace.yaml for the instance at `dagster_home`, its output appended to `log`;
    yields a ready DevServer and stops the whole process group on exit."""
    dagster = Path(sys.executable).parent / "dagster"
    port = free_port()
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [str(dagster), "dev", "-w", str(REPO / "workspace.yaml"), "-h", "127.0.0.1", "-p", str(port)],
            cwd=REPO, env={**os.environ, **(env or {}), "DAGSTER_HOME": str(dagster_home)},
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=default_sigint)
    server = DevServer(f"http://127.0.0.1:{port}", proc, log)
    try:
        server.wait_until_ready(start_s)
        yield server
    finally:
        stop(proc)
