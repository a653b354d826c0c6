"""Throughput of the teachers writing trajectory files. Prints figures; asserts nothing.

    python benchmarks/teacher_throughput.py [--weeks 1000 --workers 1,2 --stages 1000-2999 --no-openai]

(a) Bayesian teacher: `--weeks` episodes into a fresh JSONL file per worker count (target: under
    60 s), alternating; the files must be identical whatever the count.
(b) OpenAI backend, real `openai` client, against the local OpenAI-compatible test server
    (tests/openai_server.py) with 200 ms latency per request: sequential (concurrency 1) vs
    concurrency 16. An episode is 28 requests, so a sequential episode takes about 5.6 s; the
    speed-up in episodes/s should be >= 12x.
(c) The lineage's data stages on the `--stages` training seeds, as the demo runs them (the default
    teacher): the teacher stage (play, publish, grade), the re-grade report and the SFT dataset,
    each stage's seconds.
Figures: benchmarks/results/teacher_throughput.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from results_file import write_result  # noqa: E402

from rhythm_core.teacher.run import run_teacher  # noqa: E402
from rhythm_core.teacher.settings import TeacherSettings  # noqa: E402
from rhythm_core.teacher.trajectories import read_trajectories, replay_check  # noqa: E402
from rhythm_env.sim.spec import STEPS_PER_EPISODE  # noqa: E402
from tests.openai_server import serve  # noqa: E402

LATENCY_S = 0.2


def bayes(tmp: Path, n: int, workers: list[int]) -> dict:
    files, figures = {}, {}
    for w in workers:
        out = tmp / f"bayes-w{w}.jsonl"
        start = time.perf_counter()
        result = run_teacher(TeacherSettings(backend="bayes"), "continuous", range(1000, 1000 + n), out, workers=w)
        wall = time.perf_counter() - start
        size_mb = out.stat().st_size / 1e6
        files[w] = out.read_bytes()
        print(f"(a) bayes teacher, {w} worker process(es): {result.written} episodes in {wall:.2f} s = "
              f"{result.written / wall:.1f} episodes/s ({size_mb:.1f} MB JSONL, "
              f"{size_mb / max(result.written, 1) * 1000:.1f} kB/episode)")
        figures[f"workers_{w}"] = {"episodes": result.written, "wall_s": round(wall, 2),
                                   "episodes_per_s": round(result.written / wall, 1),
                                   "kb_per_episode": round(size_mb / max(result.written, 1) * 1000, 1)}
    out = tmp / f"bayes-w{workers[0]}.jsonl"
    start = time.perf_counter()
    records = read_trajectories(out).records
    read_s = time.perf_counter() - start
    replay_check(records, out)
    same = all(data == files[workers[0]] for data in files.values())
    print(f"    read back in {read_s:.2f} s and replay-checked: {len(records)}; "
          f"files identical across worker counts: {same}")
    return {**figures, "read_back_s": round(read_s, 2), "identical_across_workers": same}


def stages(tmp: Path, seeds: str) -> dict:
    from rhythm_core.data.stages import dataset_stage, reeval_stage
    from rhythm_core.teacher.stage import teacher_stage

    timings = {}
    start = time.perf_counter()
    settings = TeacherSettings()
    traj = teacher_stage(settings, "continuous", seeds, tmp / "lineage")
    timings["teacher stage"] = time.perf_counter() - start
    start = time.perf_counter()
    reeval_stage(traj["path"], "v3", tmp / "lineage")
    timings["re-grade report"] = time.perf_counter() - start
    start = time.perf_counter()
    data = dataset_stage(traj, tmp / "lineage")
    timings["SFT dataset"] = time.perf_counter() - start
    print(f"(c) the data stages on seeds {seeds} ({traj['n_episodes']} weeks; the teacher's play "
          f"{traj['run']['wall_s']:.1f} s of its stage; dataset {data['version']}):")
    for name, seconds in timings.items():
        print(f"    {name:<16} {seconds:6.1f} s")
    return {"teacher": settings.backend, "seeds": seeds, "weeks": traj["n_episodes"],
            **{name: round(seconds, 1) for name, seconds in timings.items()}}


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


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--weeks", type=int, default=1000, help="(a): Bayesian-teacher episodes per worker count")
    p.add_argument("--workers", default="1,2", help="(a): worker process counts to compare")
    p.add_argument("--stages", default="1000-2999", help="(c): training seeds of the data stages ('none' skips)")
    p.add_argument("--no-openai", action="store_true", help="skip (b)")
    args = p.parse_args(argv)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    figures = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        figures["bayes_teacher"] = bayes(tmp, args.weeks, [int(w) for w in args.workers.split(",")])
        if not args.no_openai:
            with serve(latency=LATENCY_S) as server:
                print(f"(b) openai backend vs local server ({server.base_url}), {LATENCY_S * 1000:.0f} ms per request, "
                      f"{STEPS_PER_EPISODE} requests per episode:")
                sequential = openai_run(server, tmp, "sequential", 1, range(1000, 1002))
                parallel = openai_run(server, tmp, "concurrent", 16, range(2000, 2032))
            print(f"    speed-up (episodes/s, concurrency 16 vs 1): {parallel / sequential:.1f}x")
            figures["openai_backend"] = {"latency_s": LATENCY_S, "episodes_per_s_concurrency_1": round(sequential, 3),
                                         "episodes_per_s_concurrency_16": round(parallel, 3),
                                         "speed_up": round(parallel / sequential, 1)}
        if args.stages != "none":
            figures["data_stages"] = stages(tmp, args.stages)
    write_result("teacher_throughput", figures,
                 question="How fast do the teachers write trajectories, and how long do the demo's data stages take?")


if __name__ == "__main__":
    main()
