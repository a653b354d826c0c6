"""The Dagster UI as a user sees it: `dagster dev` on the repo's workspace.yaml with a temporary
instance, the asset graph over GraphQL, the data half launched from GraphQL, and the global asset
lineage page rendered by headless Chromium (a screenshot that is not blank, a DOM with the eight
assets, three of them materialized).

Needs Debian's `chromium` (CI installs it); RHYTHM_SKIP_UI=1 skips the module.

The same helpers regenerate the README screenshot from an instance with the whole lineage
materialized (the instance is copied first, so the source stays untouched):

    .venv/bin/python -m tests.test_ui --home dagster_home --out docs/asset_graph.png
"""

from __future__ import annotations

import base64
import contextlib
import html
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from rhythm_pipeline.backfills import FINISHED, backfill_status, launch_asset_backfill
from rhythm_pipeline.dev_server import DevServer, DevServerError, default_sigint, free_port, stop
from rhythm_pipeline.dev_server import dev_server as product_dev_server

REPO = Path(__file__).resolve().parents[1]
ASSETS = ["teacher_trajectories", "reeval_report", "sft_dataset", "sft_checkpoint", "grpo_checkpoint",
          "eval_rollouts", "eval_results", "registered_student"]
EDGES = {("teacher_trajectories", "reeval_report"), ("teacher_trajectories", "sft_dataset"),
         ("sft_dataset", "sft_checkpoint"), ("sft_checkpoint", "grpo_checkpoint"),
         ("sft_dataset", "grpo_checkpoint"), ("grpo_checkpoint", "eval_rollouts"), ("sft_checkpoint", "eval_rollouts"),
         ("eval_rollouts", "eval_results"), ("eval_results", "registered_student")}
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


@contextmanager
def dev_server(dagster_home: Path, env: dict | None = None):
    """`dagster dev` from the repo root on `dagster_home` (rhythm_pipeline.dev_server, what `make demo` runs),
    with no "Join the Dagster community" dialog over the page; yields once the code location has loaded."""
    (dagster_home / ".nux").mkdir(parents=True, exist_ok=True)
    (dagster_home / ".nux" / "nux.yaml").write_text("seen: 1\n")
    try:
        with product_dev_server(dagster_home, dagster_home / "dagster_dev.log", env=env, start_s=SERVER_START_S) as server:
            server.env = {**(env or {}), "DAGSTER_HOME": str(dagster_home)}
            yield server
    except DevServerError as exc:
        pytest.fail(str(exc))


# -- the browser -----------------------------------------------------------------------------------


def find_chromium() -> str | None:
    return os.environ.get("RHYTHM_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def chromium_run(chromium: str, url: str, *args: str, window: str = WINDOW, timeout: float = 180) -> str:
    """One headless Chromium visit with a fresh profile; returns stdout. Virtual time lets the React
    app fetch its GraphQL data and lay out the graph before the capture."""
    # Chromium's helpers may still be writing its profile when it is killed: a leftover is not a failure.
    with tempfile.TemporaryDirectory(prefix="rhythm-chromium-", ignore_cleanup_errors=True) as profile:
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


def test_the_ui_serves_the_eight_assets_and_their_edges(server):
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


def repository(server: DevServer) -> dict:
    repos = server.graphql("""{ repositoriesOrError { ... on RepositoryConnection {
                                 nodes { name location { name } jobs { name } } } } }""")
    return next(r for r in repos["repositoriesOrError"]["nodes"] if "data_half" in {j["name"] for j in r["jobs"]})


def launch(server: DevServer, job: str, run_config: dict | None = None, partition: str | None = None,
           **selector) -> str:
    """Launch a run as the Launchpad (or the asset graph's Materialize button) does; its run id."""
    repo = repository(server)
    params = {"selector": {"repositoryLocationName": repo["location"]["name"], "repositoryName": repo["name"],
                           "jobName": job, **selector},
              "runConfigData": run_config or {},
              **({"executionMetadata": {"tags": [{"key": "dagster/partition", "value": partition}]}} if partition else {})}
    launched = server.graphql(LAUNCH, {"params": params})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    return launched["run"]["runId"]


def wait_for_run(server: DevServer, run_id: str, timeout_s: float = RUN_TIMEOUT_S) -> dict:
    deadline, status = time.monotonic() + timeout_s, None
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


def add_shard(server: DevServer, shard: str) -> None:
    """A teacher shard added to the server's instance (what `rhythm shards add` does)."""
    import dagster as dg

    with dg.DagsterInstance.from_config(server.env["DAGSTER_HOME"]) as instance:
        if shard not in instance.get_dynamic_partitions("teacher_shards"):
            instance.add_dynamic_partitions("teacher_shards", [shard])


@pytest.fixture(scope="module")
def data_half_run(server) -> dict:
    """The data half for one teacher shard launched through GraphQL as the Launchpad does, polled until it ends."""
    add_shard(server, "1000-1007")
    return wait_for_run(server, launch(server, "data_half", partition="1000-1007"))


def test_the_data_half_launched_from_the_ui_succeeds(data_half_run):
    assert data_half_run["status"] == "SUCCESS", data_half_run["report"]


REEXECUTE = """
mutation Reexecute($params: ReexecutionParams!) {
  launchPipelineReexecution(reexecutionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on Error { message }
  }
}"""
ORIGIN = """query Origin($id: ID!) { runOrError(runId: $id) { ... on Run {
  repositoryOrigin { repositoryLocationName repositoryName } } } }"""


def wait_for_backfill(server: DevServer, backfill_id: str, timeout_s: float = RUN_TIMEOUT_S) -> str:
    deadline, status = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline and (status := backfill_status(server, backfill_id)) not in FINISHED:
        time.sleep(2)
    return status


def test_a_backfill_launched_like_make_demo_runs_in_the_location_and_reexecutes(server, data_half_run):
    """`make demo` launches the lineage as one asset backfill through GraphQL; the daemon runs it, a run per
    piece, each a run of the `rhythm` code location that the UI lists and "Re-execute" launches again."""
    import dagster as dg

    add_shard(server, "1008-1011")
    backfill_id = launch_asset_backfill(server, {"teacher_trajectories": ["1008-1011"], "reeval_report": None},
                                       title="like make demo", tags={"rhythm/demo": "true"})
    assert wait_for_backfill(server, backfill_id) in ("COMPLETED", "COMPLETED_SUCCESS"), server.log_tail()
    with dg.DagsterInstance.from_config(server.env["DAGSTER_HOME"]) as instance:
        runs = instance.get_run_records(filters=dg.RunsFilter(tags={"dagster/backfill": backfill_id}))
        run_ids = [r.dagster_run.run_id for r in sorted(runs, key=lambda r: r.create_timestamp)]
        assert len(run_ids) == 2 and all(r.dagster_run.tags.get("rhythm/demo") == "true" for r in runs)
        # the new shard's run, then the report over both published shards
        report = instance.get_latest_materialization_event(dg.AssetKey("reeval_report")).asset_materialization
        assert report.metadata["seeds"].value == "1000-1011"
    origin = server.graphql(ORIGIN, {"id": run_ids[-1]})["runOrError"]["repositoryOrigin"]
    assert origin["repositoryLocationName"] == "rhythm"
    launched = server.graphql(REEXECUTE, {"params": {"parentRunId": run_ids[-1], "strategy": "ALL_STEPS"}})
    launched = launched["launchPipelineReexecution"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    again = wait_for_run(server, launched["run"]["runId"])
    assert again["status"] == "SUCCESS", again["report"]


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
    # the data half materialized: the report and the dataset, and the teacher's shards (a partitioned asset's
    # card shows how many of its partitions are filled); the evaluation's windows none yet
    assert len(re.findall(r"\bMaterialized\b", text)) == 2 and "100% filled" in text, text[:4000]
    assert len(re.findall(r"\b0% filled\b", text)) == 2, text[:4000]  # eval_rollouts, eval_results
    assert len(re.findall(r"\bNever materialized\b", text)) == 3, text[:4000]  # the checkpoints, the registry


# -- clicking through a page (Chrome DevTools Protocol) ---------------------------------------------


class Page:
    """One headless Chromium tab driven over the DevTools protocol, for views that only a click opens
    (the asset page's metadata Plots toggle is React state, not a URL)."""

    def __init__(self, ws):
        self.ws, self.next_id = ws, 0

    def send(self, method: str, params: dict | None = None) -> dict:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params or {}}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def evaluate(self, expression: str):
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        return result.get("result", {}).get("value")

    def wait_for_text(self, text: str, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.evaluate(f"document.body && document.body.innerText.includes({json.dumps(text)})"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{text!r} did not appear on the page within {timeout_s} s")
            time.sleep(0.5)

    def click_button(self, label: str) -> None:
        found = self.evaluate(f"""(() => {{ const b = [...document.querySelectorAll('button')]
            .find(b => b.innerText.trim() === {json.dumps(label)}); if (b) b.click(); return !!b; }})()""")
        if not found:
            raise RuntimeError(f"no button labelled {label!r} on the page")

    def type_into(self, placeholder: str, text: str) -> None:
        # A React-controlled input: set the value through the native setter, then announce it.
        found = self.evaluate(f"""(() => {{ const i = document.querySelector('input[placeholder={json.dumps(placeholder)}]');
            if (!i) return false; Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, 'value').set
            .call(i, {json.dumps(text)}); i.dispatchEvent(new Event('input', {{bubbles: true}})); return true; }})()""")
        if not found:
            raise RuntimeError(f"no input with placeholder {placeholder!r} on the page")

    def scroll_to_text(self, text: str) -> None:
        """Scroll the innermost element showing exactly `text` to the top of its scroll container."""
        found = self.evaluate(f"""(() => {{ const e = [...document.querySelectorAll('body *')].reverse()
            .find(e => e.children.length === 0 && e.textContent.trim() === {json.dumps(text)});
            if (e) e.scrollIntoView({{block: 'start'}}); return !!e; }})()""")
        if not found:
            raise RuntimeError(f"{text!r} is not on the page")

    def screenshot(self, out: Path) -> None:
        out.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", {"format": "png"})["data"]))


@contextmanager
def chromium_page(chromium: str, window: str = "1600,1400"):
    from websockets.sync.client import connect

    port = free_port()
    # Chromium's helpers may still be writing its profile when it is killed: a leftover is not a failure.
    with tempfile.TemporaryDirectory(prefix="rhythm-chromium-", ignore_cleanup_errors=True) as profile:
        proc = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--remote-debugging-port={port}", f"--user-data-dir={profile}", f"--window-size={window}",
             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as response:
                        targets = [t for t in json.load(response) if t["type"] == "page"]
                    if targets:
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError("chromium's DevTools endpoint did not answer")
                time.sleep(0.3)
            with connect(targets[0]["webSocketDebuggerUrl"], max_size=None) as ws:
                yield Page(ws)
        finally:
            proc.kill()
            proc.wait(timeout=30)


# -- the README screenshot -------------------------------------------------------------------------


RUN_TIMES = "query Times($id: ID!) { runOrError(runId: $id) { ... on Run { status startTime endTime } } }"
ALL_RUNS = "{ runsOrError { ... on Runs { results { runId jobName status tags { key value } } } } }"
ASSETS_AND_CHECKS = """{ assetNodes { assetKey { path }
                          assetChecksOrError { ... on AssetChecks { checks { name } } } } }"""


def materialize_all(server: DevServer) -> str:
    """What the UI's "Materialize all" launches, as `make demo` does: one backfill of every asset, the demo's
    teacher shard and evaluation window 0."""
    from rhythm_pipeline.demo import DEMO_SHARD

    add_shard(server, DEMO_SHARD)
    nodes = server.graphql(ASSETS_AND_CHECKS)["assetNodes"]
    keys = {"teacher_trajectories": [DEMO_SHARD], "eval_rollouts": ["0"], "eval_results": ["0"]}
    return launch_asset_backfill(server, {"/".join(n["assetKey"]["path"]): keys.get("/".join(n["assetKey"]["path"]))
                                          for n in nodes}, title="materialize all")


def screenshot_eval_results(chromium: str, server: DevServer, out_dir: Path) -> list[Path]:
    """The eval_results asset page (its Overview with the metadata table) and its metadata Plots view."""
    shots = []
    with chromium_page(chromium, window="1600,1500") as page:
        page.send("Page.enable")
        page.send("Page.navigate", {"url": server.base + "/assets/eval_results"})
        page.wait_for_text("Latest materialization")
        page.wait_for_text("history_rows")  # the metadata table has loaded
        time.sleep(2)
        shots.append(out_dir / "eval_results_asset.png")
        page.screenshot(shots[-1])
        page.click_button("Plots")
        page.wait_for_text("1 student_grpo/continuous/final_score")  # the first chart (labels sort by code point)
        page.scroll_to_text("1 student_grpo/continuous/final_score")
        time.sleep(3)  # the charts draw after their data
        shots.append(out_dir / "eval_results_plots.png")
        page.screenshot(shots[-1])
    return shots


def eval_results_tour(out_dir: Path, keep: Path | None = None) -> None:
    """A fresh instance under `dagster dev` (what `make ui` runs, with its daemon): "Materialize all"
    from GraphQL, then the weekly re-evaluation job on the next seed window, then screenshots of the
    eval_results page and its Plots view, which now chart two evaluations."""
    chromium = find_chromium()
    if not chromium:
        sys.exit("chromium is not installed")
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rhythm-ui-") as tmp:
        home = keep or Path(tmp) / "home"
        if (home / "storage").exists():  # a kept instance: screenshots only
            with dev_server(home) as server:
                for shot in screenshot_eval_results(chromium, server, out_dir):
                    print(shot, f"{shot.stat().st_size // 1024} KiB")
            return
        home.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
        with dev_server(home) as server:
            backfill = materialize_all(server)
            status = wait_for_backfill(server, backfill, timeout_s=3600)
            print(f"materialize all: backfill {backfill} {status}", flush=True)
            if status not in ("COMPLETED", "COMPLETED_SUCCESS"):
                sys.exit(server.log_tail())
            run = wait_for_run(server, launch(server, "reevaluate", partition="1"), timeout_s=3600)
            if run["status"] != "SUCCESS":
                sys.exit(run["report"])
            times = server.graphql(RUN_TIMES, {"id": run["run_id"]})["runOrError"]
            print(f"reevaluate (window 1): run {run['run_id']} {times['status']} in "
                  f"{times['endTime'] - times['startTime']:.1f} s", flush=True)
            time.sleep(35)  # a daemon tick: would declarative automation launch anything after these runs?
            runs = server.graphql(ALL_RUNS)["runsOrError"]["results"]
            print(f"runs on the instance: {len(runs)}: " + ", ".join(
                f"{r['jobName']} {r['status']}" + (" (automation)" if any(t["key"] == "dagster/sensor_name"
                                                                          for t in r["tags"]) else "")
                for r in runs))
            for shot in screenshot_eval_results(chromium, server, out_dir):
                print(shot, f"{shot.stat().st_size // 1024} KiB")


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="Screenshots of the UI for the README.")
    parser.add_argument("--home", type=Path, default=REPO / "dagster_home", help="DAGSTER_HOME to show (copied)")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "asset_graph.png")
    parser.add_argument("--window", default="2800,1100")
    parser.add_argument("--eval-results", type=Path, default=None, metavar="DIR",
                        help="instead: run the lineage and a re-evaluation on a fresh instance through the UI's "
                             "server and screenshot the eval_results page and its Plots view into DIR")
    parser.add_argument("--keep", type=Path, default=None,
                        help="with --eval-results: the instance to create and keep (if it exists: screenshot it)")
    args = parser.parse_args()
    if args.eval_results is not None:
        eval_results_tour(args.eval_results, keep=args.keep)
        return
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


def descendants(pid: int) -> list[str]:
    """Every process below `pid` (children, grandchildren, ...), asking `pgrep -P` level by level."""
    found, todo = [], [str(pid)]
    while todo:
        parent = todo.pop()
        children = subprocess.run(["pgrep", "-P", parent], capture_output=True, text=True).stdout.split()
        found += children
        todo += children
    return found


def test_make_ui_stops_cleanly_on_ctrl_c_and_names_the_location_rhythm(tmp_path):
    """`make ui` as a user runs it from a terminal: Ctrl-C (SIGINT to the whole foreground process
    group) stops make, the launcher, `dg dev` and every child within seconds; the code location is
    "rhythm" and the log has no "does not match" warning whatever the checkout's folder is called, and
    no "superseded" one (`dagster dev` is)."""
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    port = free_port()
    log = tmp_path / "make_ui.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(["make", "-s", "ui", f"UI_PORT={port}"], cwd=REPO, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                env={**os.environ, "DAGSTER_HOME": str(home)}, preexec_fn=default_sigint)
    server = DevServer(f"http://127.0.0.1:{port}", proc, log)
    server.env = {"DAGSTER_HOME": str(home)}
    try:
        server.wait_until_ready(SERVER_START_S)
        names = server.graphql("{ workspaceOrError { ... on Workspace { locationEntries { name } } } }")
        assert [e["name"] for e in names["workspaceOrError"]["locationEntries"]] == ["rhythm"]
        members = descendants(proc.pid)
        assert len(members) >= 4, members  # the launcher, dg dev, its webserver and code server
        started = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in the terminal sends
        proc.wait(timeout=30)
        stopped_in = time.monotonic() - started
        alive = [pid for pid in members if Path(f"/proc/{pid}").exists()]
        time.sleep(0.5)
        alive = [pid for pid in alive if Path(f"/proc/{pid}").exists()]
        assert not alive, f"left running after Ctrl-C: {alive}"
        assert stopped_in < 30
    finally:
        leftover = descendants(proc.pid) if proc.poll() is None else []
        stop(proc)
        for pid in leftover:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
    text = log.read_text(errors="replace")
    assert "does not match" not in text, text[-3000:]
    assert "superseded" not in text and "Use 'dg dev'" not in text, text[-3000:]  # make ui runs dg dev itself
    assert str(home) in text or "rhythm ui" in text or "Serving dagster-webserver" in text, text[-3000:]


if __name__ == "__main__":
    main()

