"""The code a Hugging Face job runs: wheels of the working tree, built from a copy of it with fixed zip
timestamps, so the same code gives the same bytes (and the same code version, `hf_job_script.code_version_of`).

The project depends on packages of its own folders that are on no index (`LOCAL_PACKAGES`: the environment
package, envs/rhythm_env); each is built into a wheel of its own and installed beside the project's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# Fixed zip timestamps, so the same code gives the same wheel bytes and the same code version.
_SOURCE_DATE_EPOCH = "315532800"  # 1980-01-01, the earliest date a zip entry can hold
# Folders of the project whose packages it depends on and that are on no index.
LOCAL_PACKAGES = ("envs/rhythm_env",)


def _copy_source_tree(root: Path, dest: Path) -> None:
    """Copy what a wheel is built from: the top-level files and the top-level packages (or src/).

    Building from a copy keeps the build out of the working tree (no build/ or egg-info written
    there) and keeps stale files from an earlier build/lib out of the wheel."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist", ".*")
    dest.mkdir(parents=True)
    for entry in sorted(root.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_file():
            shutil.copy2(entry, dest / entry.name)
        elif entry.is_dir() and (entry.name == "src" or (entry / "__init__.py").is_file()):
            shutil.copytree(entry, dest / entry.name, ignore=ignore)


def build_wheel(project_root, dest=None) -> Path:
    """Build the project at `project_root` into a wheel (no dependencies, no build isolation).

    Returns the .whl path (in `dest`, or a new temporary directory).
    The same source gives the same bytes (SOURCE_DATE_EPOCH pins the zip timestamps)."""
    root = Path(project_root).resolve()
    if not (root / "pyproject.toml").is_file() and not (root / "setup.py").is_file():
        raise FileNotFoundError(f"{root}: no pyproject.toml or setup.py to build a wheel from")
    out = Path(dest) if dest is not None else Path(tempfile.mkdtemp(prefix="rhythm-wheel-"))
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rhythm-wheel-src-") as tmp:
        src = Path(tmp) / root.name
        _copy_source_tree(root, src)
        wheel_dir = Path(tmp) / "dist"
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
               "--disable-pip-version-check", "--no-cache-dir", "-q", "-w", str(wheel_dir), str(src)]
        proc = subprocess.run(cmd, capture_output=True, text=True,
                              env={**os.environ, "SOURCE_DATE_EPOCH": _SOURCE_DATE_EPOCH})
        if proc.returncode != 0:
            raise RuntimeError(f"building a wheel of {root} failed (exit {proc.returncode}):\n"
                               f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
        wheels = sorted(wheel_dir.glob("*.whl"))
        if len(wheels) != 1:
            raise RuntimeError(f"expected one wheel from {root}, got {[w.name for w in wheels]}")
        final = out / wheels[0].name
        shutil.move(str(wheels[0]), final)
    return final


def build_wheels(project_root, dest=None) -> list[Path]:
    """The wheels a job installs: one per `LOCAL_PACKAGES` folder the project has, then the project's."""
    root = Path(project_root).resolve()
    out = Path(dest) if dest is not None else Path(tempfile.mkdtemp(prefix="rhythm-wheel-"))
    return [build_wheel(root / folder, out) for folder in LOCAL_PACKAGES if (root / folder).is_dir()] + [
        build_wheel(root, out)]
