"""Where a benchmark's figures go: `benchmarks/results/<name>.json`, with the machine, the date, the
code's commit and the command beside them, so that docs/results.md (`make results`) can cite each
figure's source. Not a benchmark itself."""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def machine() -> dict:
    """The CPU model, cores, memory, and the library versions that move figures."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        memory_gib = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError):
        memory_gib = None
    cpu = re.sub(r"\((R|TM)\)| Processor| CPU", "", cpu).strip()  # "Intel(R) Xeon(R) Processor" -> "Intel Xeon"
    found = {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": memory_gib, "python": platform.python_version()}
    try:
        import torch

        found["torch"] = torch.__version__
        found["cpu_kernels"] = torch.backends.cpu.get_cpu_capability()
    except ImportError:
        pass
    return found


def commit() -> str:
    """HEAD's short hash, with `-dirty` when the tracked files differ from it."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short=12", "HEAD") or "unknown"
    return head + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def write_result(name: str, figures: dict, *, question: str, argv: list[str] | None = None,
                 out: Path | None = None) -> Path:
    """Write `figures` as benchmarks/results/<name>.json (or `out`) and return its path."""
    argv = sys.argv if argv is None else argv
    script = Path(argv[0])
    command = "python " + shlex.join([str(script.relative_to(REPO)) if script.is_absolute() and REPO in script.parents
                                       else str(script), *argv[1:]])
    record = {"benchmark": name, "question": question, "command": command,
              "date": datetime.now(UTC).strftime("%Y-%m-%d"), "commit": commit(), "machine": machine(),
              "figures": figures}
    path = out or RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    tmp.replace(path)
    print(f"figures written to {path}", file=sys.stderr)
    return path
