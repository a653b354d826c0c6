"""The local copies of an object store's versions, shared by every step process on a machine.

A copy is used only while its files are its record's and the store's objects are the ones it was
fetched from (the stamp keeps their sizes and ETags); otherwise it is fetched again. One lock per
version serializes the processes that fetch it, so none removes a copy another is reading (a whole,
matching copy is never replaced) and a copy appears in one rename, whole. Folders left by a fetch that
was killed (`.fetch-*`) are removed by the next fetch of that version, under its lock.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from .files import exchange_dirs
from .outputs import FETCHED_STAMP, FILES_MANIFEST
from .records import check_record, file_hashes

# A file to append one JSON line per fetch (a cache hit or a download) and per upload: what
# benchmarks/artifact_store.py counts. Unset: nothing is written.
TRACE_VAR = "RHYTHM_STORE_TRACE"
FETCH_PREFIX = ".fetch-"


def trace(event: dict) -> None:
    path = os.environ.get(TRACE_VAR)
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps({**event, "pid": os.getpid(), "time": time.time()}) + "\n")


@contextmanager
def version_lock(local_root: Path):
    """Hold the lock of one version's copy (a file beside it), across processes of this machine."""
    from filelock import FileLock

    local_root.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(local_root.parent / f".{local_root.name}.lock")):
        yield


class VersionCache:
    """The copies under `root` (the store's cache folder)."""

    def __init__(self, root: Path):
        self.root = Path(root)

    @staticmethod
    def _stamp(local_root: Path) -> dict | None:
        try:
            stamp = json.loads((local_root / FETCHED_STAMP).read_text())
        except (OSError, ValueError):
            return None
        return stamp if isinstance(stamp, dict) else None  # an older stamp (a bare digest): fetched again

    @staticmethod
    def _write(local_root: Path, record: dict, objects: dict) -> None:
        (local_root / FILES_MANIFEST).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        (local_root / FETCHED_STAMP).write_text(json.dumps({"digest": record["digest"], "objects": objects},
                                                           sort_keys=True))

    def _matches(self, local_root: Path, record: dict, objects: dict) -> bool:
        stamp = self._stamp(local_root)
        if stamp is None or stamp.get("digest") != record["digest"] or stamp.get("objects") != objects:
            return False
        return file_hashes(local_root) == record["files"]

    def fetch(self, url: str, local_root: Path, record: dict, objects: dict,
              download: Callable[[str, dict, Path], None]) -> None:
        """Make `local_root` a whole copy of the version `url` (its `record`, the store's `objects`),
        reusing the copy that is there only if it matches both."""
        with version_lock(local_root):
            for leftover in local_root.parent.glob(f"{FETCH_PREFIX}{local_root.name}-*"):
                shutil.rmtree(leftover, ignore_errors=True)  # a killed fetch's: only the lock's holder fetches
            hit = self._matches(local_root, record, objects)
            if not hit:
                staged = Path(tempfile.mkdtemp(dir=local_root.parent, prefix=f"{FETCH_PREFIX}{local_root.name}-"))
                try:
                    download(url, record, staged)
                    self._write(staged, record, objects)
                    _put_in_place(staged, local_root)
                except BaseException:
                    shutil.rmtree(staged, ignore_errors=True)
                    raise
            trace({"event": "fetch", "url": url, "hit": hit, "files": len(record["files"])})

    def adopt_copy(self, local_dir: Path, record: dict, objects: dict) -> None:
        """Stamp a copy this process published (its files are the record's) as fetched from `objects`."""
        with version_lock(local_dir):
            self._write(local_dir, record, objects)

    def verify_copy(self, local_root: Path, record: dict) -> None:
        """Check this machine's copy of a version, if it has one, against the record."""
        if (local_root / FILES_MANIFEST).is_file():
            with version_lock(local_root):
                if local_root.is_dir():
                    check_record(record, file_hashes(local_root), f"{local_root} (the local copy)")


def _put_in_place(staged: Path, final: Path) -> None:
    """Move a whole copy into place; a copy already there (it did not match) goes, never half of it."""
    if not final.exists():
        os.replace(staged, final)
        return
    if exchange_dirs(staged, final):
        shutil.rmtree(staged, ignore_errors=True)  # the copy that did not match
        return
    old = final.with_name(f"{FETCH_PREFIX}{final.name}-old-{os.getpid()}")
    os.replace(final, old)
    os.replace(staged, final)
    shutil.rmtree(old, ignore_errors=True)


