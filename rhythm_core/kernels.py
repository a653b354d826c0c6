"""The same artifacts on x86-64 CPUs of one vendor: torch's CPU kernels pinned to AVX2 by default.

torch picks its vectorised kernels by the CPU's instruction set (AVX2, AVX-512). The two round
differently, so the same recipe trained on an AVX-512 CPU gives other weights, and other figures, than
on an AVX2 one (the demo's recovery among them). With the kernels pinned to AVX2, which
every x86-64 CPU of the last decade has, an AVX-512 AMD EPYC reproduces an AVX2 one's checkpoint byte
for byte; an Intel Xeon still trains other weights (its math libraries take their own paths), so a
figure names its CPU's vendor (benchmarks/README.md, D30). `pin_cpu_kernels` runs when
rhythm_core is imported, before torch picks its kernels; every process rhythm starts inherits it.

RHYTHM_CPU_KERNELS=native keeps the machine's own kernels (full speed, figures of that CPU);
an ATEN_CPU_CAPABILITY the user set is kept as it is.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

SWITCH = "RHYTHM_CPU_KERNELS"  # "avx2" (default) or "native"
PINNED = "avx2"


def _cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def pin_cpu_kernels(environ=os.environ) -> str:
    """Set ATEN_CPU_CAPABILITY=avx2 where it makes artifacts portable; returns what was decided."""
    choice = environ.get(SWITCH, PINNED).strip().lower()
    if choice not in (PINNED, "native"):
        raise ValueError(f"{SWITCH}={environ[SWITCH]!r}: expected {PINNED} or native")
    if "ATEN_CPU_CAPABILITY" in environ:
        return f"ATEN_CPU_CAPABILITY={environ['ATEN_CPU_CAPABILITY']} (set by the user)"
    if choice == "native":
        return "native kernels (RHYTHM_CPU_KERNELS=native)"
    if platform.machine().lower() not in ("x86_64", "amd64") or "avx2" not in _cpu_flags():
        return "native kernels (not an x86-64 CPU with AVX2)"
    environ["ATEN_CPU_CAPABILITY"] = PINNED
    return "ATEN_CPU_CAPABILITY=avx2 (RHYTHM_CPU_KERNELS=native for the machine's own)"
