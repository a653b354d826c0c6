"""The Dagster UI as a user sees it: `dagster dev` on the repo's workspace.yaml with a temporary
instance, the asset graph over GraphQL, the data half launched from GraphQL, and the global asset
lineage page rendered by headless Chromium (a screenshot that is not blank, a DOM with the seven
assets, three of them materialized).

Needs Debian's `chromium` (CI installs it); RHYTHM_SKIP_UI=1 skips the module.

The same helpers regenerate the README screenshot from an instance with the whole lineage
materialized (the instance is copied first, so the source stays untouched):

    .venv/bin/python -m tests.test_ui --home dagster_home --out docs/asset_graph.png
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ASSETS = ["teacher_trajectories", "reeval_report", "sft_dataset", "sft_checkpoint", "grpo_checkpoint",
          "eval_rollouts", "eval_results"]
EDGES = {("teacher_trajectories", "reeval_report"), ("teacher_trajectories", "sft_dataset"),
         ("sft_dataset", "sft_checkpoint"), ("sft_checkpoint", "grpo_checkpoint"),
         ("sft_dataset", "grpo_checkpoint"), ("grpo_checkpoint", "eval_rollouts"), ("sft_checkpoint", "eval_rollouts"),
         ("eval_rollouts", "eval_results")}
GROUPS = ["data", "training", "evaluation"]
# The global asset lineage page of Dagster 1.13, every group expanded (`expanded` is the query-string
# form of the page's "Expand all groups" state; group ids are global@global:<group>).
LINEAGE_PATH = "/asset-groups?expanded=" + "%2C".join(f"global%40global%3A{g}" for g in GROUPS)
# Below about 2,300 px of width the graph is zoomed out to fit and the nodes switch to a minimal
# rendering that truncates long names (teac…_trajectories); this width shows full nodes.
WINDOW = "2560,1000"
SERVER_START_S = 120
RUN_TIMEOUT_S = 300

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("RHYTHM_SKIP_UI") == "1", reason="RHYTHM_SKIP_UI=1"),
]


# -- the dev server --------------------------------------------------------------------------------


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

    def graphql(self, query: str, variables: dict | None = None) -> dict:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        request = urllib.request.Request(self.base + "/graphql", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            answer = json.load(response)
        assert not answer.get("errors"), answer["errors"]
        return answer["data"]


def _default_sigint() -> None:
    # dagster dev maps SIGTERM to its SIGINT handler; under a shell that started us in the background
    # SIGINT is inherited as ignored, and dagster dev would then ignore SIGTERM too.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextmanager
def dev_server(dagster_home: Path, env: dict | None = None):
    """`dagster dev` from the repo root, in its own process group; the whole group is stopped on exit.
    Yields once GET /server_info answers and the code location has loaded."""
    port = free_port()
    log = dagster_home / "dagster_dev.log"
    # No "Join the Dagster community" dialog over the page: the file a dismissed dialog leaves behind.
    (dagster_home / ".nux").mkdir(parents=True, exist_ok=True)
    (dagster_home / ".nux" / "nux.yaml").write_text("seen: 1\n")
    dagster = Path(sys.executable).parent / "dagster"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(dagster), "dev", "-w", str(REPO / "workspace.yaml"), "-h", "127.0.0.1", "-p", str(port)],
            cwd=REPO, env={**os.environ, **(env or {}), "DAGSTER_HOME": str(dagster_home)},
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=_default_sigint,
        )
    server = DevServer(f"http://127.0.0.1:{port}", proc, log)
    try:
        wait_until_ready(server)
        yield server
    finally:
        stop(proc)


def wait_until_ready(server: DevServer) -> None:
    deadline = time.monotonic() + SERVER_START_S
    while True:
        if server.proc.poll() is not None:
            pytest.fail(f"dagster dev exited with {server.proc.returncode}:\n{server.log_tail()}")
        try:
            with urllib.request.urlopen(server.base + "/server_info", timeout=5) as response:
                info = json.load(response)
            repos = server.graphql("{ repositoriesOrError { ... on RepositoryConnection { nodes { name } } } }")
            if repos["repositoriesOrError"].get("nodes"):
                assert info["dagster_webserver_version"]
                return
        except (OSError, ValueError):  # not listening yet, or answering before it is ready
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"dagster dev did not answer within {SERVER_START_S} s:\n{server.log_tail()}")
        time.sleep(1)


def stop(proc: subprocess.Popen, grace_s: float = 30) -> None:
    """SIGTERM to the process group (dagster dev, its code server, daemon and run workers), then
    SIGKILL to whatever is left of the group."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


# -- the browser -----------------------------------------------------------------------------------


def find_chromium() -> str | None:
    return os.environ.get("RHYTHM_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def chromium_run(chromium: str, url: str, *args: str, window: str = WINDOW, timeout: float = 180) -> str:
    """One headless Chromium visit with a fresh profile; returns stdout. Virtual time lets the React
    app fetch its GraphQL data and lay out the graph before the capture."""
    with tempfile.TemporaryDirectory(prefix="rhythm-chromium-") as profile:
        result = subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--hide-scrollbars", f"--user-data-dir={profile}", f"--window-size={window}",
             "--virtual-time-budget=20000", *args, url],
            capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        )
    assert result.returncode == 0, f"chromium exited with {result.returncode}:\n{result.stderr[-3000:]}"
    return result.stdout


def page_text(dom: str) -> str:
    dom = re.sub(r"<(script|style)\b[^>]*>.*?</\1>", " ", dom, flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", dom)))


def pixel_stats(png: Path) -> tuple[int, float]:
    """(distinct colours, fraction of pixels that differ from the dominant colour)."""
    from PIL import Image

    with Image.open(png) as image:
        rgb = image.convert("RGB")
        colours = rgb.getcolors(maxcolors=rgb.width * rgb.height)
        dominant = max(count for count, _ in colours)
        return len(colours), 1 - dominant / (rgb.width * rgb.height)


def crop_to_graph(png: Path, out: Path, left: int = 560, top: int = 120, right: int = 50, pad: int = 24) -> None:
    """The graph canvas of a lineage screenshot (right of the navigation and the group sidebar, below
    the toolbar, left of the zoom controls), cut to what is drawn on it: the dotted background is
    near-white."""
    import numpy as np
    from PIL import Image

    with Image.open(png) as image:
        rgb = np.asarray(image.convert("RGB"))
    width = rgb.shape[1] - right
    ys, xs = np.nonzero(rgb[top:, left:width].min(axis=2) < 225)
    box = (max(left + xs.min() - pad, left), max(top + ys.min() - pad, top),
           min(left + xs.max() + pad, width), min(top + ys.max() + pad, rgb.shape[0]))
    Image.fromarray(rgb).crop(box).save(out, optimize=True)


# -- the tests -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("dagster_home")
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    artifacts = tmp_path_factory.mktemp("artifacts")
    with dev_server(home, env={"RHYTHM_ARTIFACTS": str(artifacts)}) as running:
        yield running


def require_chromium() -> str:
    path = find_chromium()
    if not path:
        pytest.fail("chromium is not installed: `apt-get install -y chromium` (CI does), point RHYTHM_CHROMIUM "
                    "at a Chromium binary, or set RHYTHM_SKIP_UI=1 to skip the UI test")
    return path


def test_the_ui_serves_the_seven_assets_and_their_edges(server):
    nodes = server.graphql("{ assetNodes { assetKey { path } dependencyKeys { path } } }")["assetNodes"]
    keys = {"/".join(node["assetKey"]["path"]) for node in nodes}
    edges = {("/".join(dep["path"]), "/".join(node["assetKey"]["path"]))
             for node in nodes for dep in node["dependencyKeys"]}
    assert keys == set(ASSETS)
    assert edges == EDGES


LAUNCH = """
mutation Launch($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on RunConfigValidationInvalid { errors { message } }
    ... on Error { message }
  }
}"""
STATUS = "query Status($id: ID!) { runOrError(runId: $id) { __typename ... on Run { status } } }"
MESSAGES = """
query Logs($id: ID!) {
  logsForRun(runId: $id) { ... on EventConnection { events { ... on MessageEvent { message } } } }
}"""


@pytest.fixture(scope="module")
def data_half_run(server) -> dict:
    """The data half launched through GraphQL as the Launchpad does, polled until it ends."""
    repos = server.graphql("""{ repositoriesOrError { ... on RepositoryConnection {
                                 nodes { name location { name } jobs { name } } } } }""")
    repo = next(r for r in repos["repositoriesOrError"]["nodes"] if "data_half" in {j["name"] for j in r["jobs"]})
    params = {"selector": {"repositoryLocationName": repo["location"]["name"], "repositoryName": repo["name"],
                           "jobName": "data_half"},
              "runConfigData": {"ops": {"teacher_trajectories": {"config": {"seeds": "1000-1007"}}}}}
    launched = server.graphql(LAUNCH, {"params": params})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["run"]["runId"]

    deadline, status = time.monotonic() + RUN_TIMEOUT_S, None
    while time.monotonic() < deadline:
        status = server.graphql(STATUS, {"id": run_id})["runOrError"]["status"]
        if status in ("SUCCESS", "FAILURE", "CANCELED"):
            break
        time.sleep(2)
    report = f"run {run_id} ended {status}"
    if status != "SUCCESS":
        events = server.graphql(MESSAGES, {"id": run_id})["logsForRun"].get("events", [])
        messages = "\n".join(e["message"] for e in events if e.get("message"))[-4000:]
        report += f":\n{messages}\n--- dagster dev ---\n{server.log_tail()}"
    return {"run_id": run_id, "status": status, "report": report}


def test_the_data_half_launched_from_the_ui_succeeds(data_half_run):
    assert data_half_run["status"] == "SUCCESS", data_half_run["report"]


def test_the_asset_graph_renders(server, data_half_run, tmp_path):
    chromium = require_chromium()
    assert data_half_run["status"] == "SUCCESS", "the data half run did not succeed (see its own test)"
    # After the run: the data half shows as materialized, the rest as not yet.
    url = server.base + LINEAGE_PATH
    png = tmp_path / "asset_graph.png"
    chromium_run(chromium, url, f"--screenshot={png}")
    assert png.exists() and png.stat().st_size > 10_000, "no screenshot written"
    colours, ink = pixel_stats(png)
    assert colours >= 50, f"only {colours} colours: a blank page?"
    assert ink >= 0.05, f"only {ink:.1%} of the pixels differ from the background: a blank page?"

    text = page_text(chromium_run(chromium, url, "--dump-dom"))
    assert "Global asset lineage" in text
    missing = [name for name in ASSETS + GROUPS if not re.search(rf"\b{name}\b", text)]
    assert not missing, f"not on the page: {missing}\n{text[:2000]}"
    assert len(re.findall(r"\bMaterialized\b", text)) == 3, text[:4000]
    assert len(re.findall(r"\bNever materialized\b", text)) == 4, text[:4000]


# -- the README screenshot -------------------------------------------------------------------------


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="Screenshot the asset graph of an instance for the README.")
    parser.add_argument("--home", type=Path, default=REPO / "dagster_home", help="DAGSTER_HOME to show (copied)")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "asset_graph.png")
    parser.add_argument("--window", default="2800,1100")
    args = parser.parse_args()
    chromium = find_chromium()
    if not chromium:
        sys.exit("chromium is not installed")
    with tempfile.TemporaryDirectory(prefix="rhythm-ui-") as tmp:
        home = Path(tmp) / "home"
        # The UI needs the run and event storage, not the artifacts.
        shutil.copytree(args.home, home, ignore=shutil.ignore_patterns("rhythm", ".nux", "*.log"))
        with dev_server(home, env={"RHYTHM_ARTIFACTS": str(Path(tmp) / "artifacts")}) as running:
            raw = Path(tmp) / "raw.png"
            chromium_run(chromium, running.base + LINEAGE_PATH, f"--screenshot={raw}", window=args.window)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        crop_to_graph(raw, args.out)
    print(args.out, f"{args.out.stat().st_size // 1024} KiB")


if __name__ == "__main__":
    main()
