"""Full demo lineage vs a re-grade after a grader switch (wall seconds). Prints both; asserts nothing.

    python benchmarks/regrade.py            # ~5 min on the 2-core CPU: the whole demo lineage first

Each step runs in a fresh process (the active grader is fixed when the definitions load), on a
temporary DAGSTER_HOME: `rhythm_lineage` under v3, then `regrade` under v2. Target: the re-grade
takes under 10% of the full lineage's time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_file import write_result

REPO = Path(__file__).resolve().parents[1]


def run(home: Path, artifacts: Path, grader: str, *args: str) -> tuple[dict, float]:
    env = {**os.environ, "DAGSTER_HOME": str(home), "RHYTHM_ARTIFACTS": str(artifacts), "RHYTHM_GRADER": grader}
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "rhythm_pipeline.ops", *args], cwd=REPO, env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1]), time.perf_counter() - start


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home, artifacts = Path(tmp) / "home", Path(tmp) / "artifacts"
        home.mkdir()
        shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
        full, full_s = run(home, artifacts, "v3", "run", "rhythm_lineage")
        status, _ = run(home, artifacts, "v2", "status")
        regrade, regrade_s = run(home, artifacts, "v2", "run", "regrade")
    unsynced = sorted(k for k, v in status.items() if v != "FRESH")
    print(f"full lineage (v3):   {full_s:7.1f} s wall ({full['wall_s']} s in the run), success={full['success']}")
    print(f"unsynced after switching to v2: {', '.join(unsynced)}")
    print(f"regrade (v2):        {regrade_s:7.1f} s wall ({regrade['wall_s']} s in the run), success={regrade['success']}")
    print(f"regrade / full = {regrade_s / full_s:.1%} (target < 10%)")
    write_result("regrade", {"full_lineage_s": round(full_s, 1), "full_success": full["success"],
                             "unsynced_after_switch": unsynced, "regrade_s": round(regrade_s, 1),
                             "regrade_success": regrade["success"], "ratio": round(regrade_s / full_s, 3),
                             "target_ratio": 0.1},
                 question="What does re-grading after a grader change cost against the whole lineage?")


if __name__ == "__main__":
    main()
