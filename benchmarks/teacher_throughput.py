"""Throughput of the teachers writing trajectory files. Prints figures; asserts nothing.

    python benchmarks/teacher_throughput.py

(a) Bayesian teacher: 1,000 episodes into a fresh JSONL file (target: under 60 s).
(b) OpenAI backend, real `openai` client, against the local OpenAI-compatible test server
    (tests/openai_server.py) with 200 ms latency per request: sequential (concurrency 1) vs
    concurrency 16. An episode is 28 requests, so a sequential episode takes about 5.6 s; the
    speed-up in episodes/s should be >= 12x.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from rhythm_core.env.spec import STEPS_PER_EPISODE  # noqa: E402
from rhythm_core.teacher.run import run_teacher  # noqa: E402
from rhythm_core.teacher.settings import TeacherSettings  # noqa: E402
from rhythm_core.teacher.trajectories import read_trajectories, replay_check  # noqa: E402
from tests.openai_server import serve  # noqa: E402

LATENCY_S = 0.2


def bayes(tmp: Path, n: int = 1000) -> None:
    out = tmp / "bayes.jsonl"
    start = time.perf_counter()
    result = run_teacher(TeacherSettings(backend="bayes"), "continuous", range(1000, 1000 + n), out)
    wall = time.perf_counter() - start
    size_mb = out.stat().st_size / 1e6
    records = read_trajectories(out).records
    replay_check(records, out)
    print(f"(a) bayes teacher: {result.written} episodes in {wall:.2f} s = {result.written / wall:.1f} episodes/s "
          f"({size_mb:.1f} MB JSONL, {size_mb / max(result.written, 1) * 1000:.1f} kB/episode; "
          f"read back and replay-checked: {len(records)})")


def openai_run(server, tmp: Path, label: str, concurrency: int, seeds: range) -> float:
    out = tmp / f"openai-c{concurrency}.jsonl"
    settings = TeacherSettings(backend="openai", model="fake-teacher", base_url=server.base_url, api_key="sk-bench",
                               concurrency=concurrency, request_timeout_s=30.0, max_retries=2)
    before = server.request_count
    start = time.perf_counter()
    result = run_teacher(settings, "continuous", seeds, out)
    wall = time.perf_counter() - start
    requests = server.request_count - before
    rate = result.written / wall
    ideal = len(seeds) / concurrency * STEPS_PER_EPISODE * LATENCY_S if concurrency <= len(seeds) else None
    print(f"    {label:<14} concurrency {concurrency:>2}: {result.written} episodes, {requests} requests in {wall:.2f} s "
          f"= {rate:.3f} episodes/s, {requests / wall:.1f} requests/s"
          + (f" (latency-bound ideal {ideal:.1f} s)" if ideal else "")
          + (f"; failed {result.failed_seeds}" if result.failed_seeds else ""))
    return rate


def main() -> None:
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        bayes(tmp)
        with serve(latency=LATENCY_S) as server:
            print(f"(b) openai backend vs local server ({server.base_url}), {LATENCY_S * 1000:.0f} ms per request, "
                  f"{STEPS_PER_EPISODE} requests per episode:")
            sequential = openai_run(server, tmp, "sequential", 1, range(1000, 1002))
            parallel = openai_run(server, tmp, "concurrent", 16, range(2000, 2032))
        print(f"    speed-up (episodes/s, concurrency 16 vs 1): {parallel / sequential:.1f}x")


if __name__ == "__main__":
    main()
