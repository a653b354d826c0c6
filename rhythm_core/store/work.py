"""A stage's growing work file (the teacher's episodes as they are played), kept on the store as it
grows, so a step retried on another machine resumes where the last one stopped.

On an object store the file is uploaded in segments of whole lines, each under the byte offset it
starts at (`<file>.parts/<offset>`): appending never rewrites an object, and a reader joins the
segments that follow each other from 0. The pointer a finished stage leaves (`<file>.published`)
is uploaded too, and the segments are removed then.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from .files import atomic_write_bytes

# Seconds between uploads of a growing work file (RHYTHM_WORK_SYNC_S): at most this much of a
# killed step's work is played again elsewhere.
SYNC_VAR = "RHYTHM_WORK_SYNC_S"


class WorkSync:
    """A local root's work file is already where every step finds it: nothing to do."""

    def __init__(self, path):
        self.path = Path(path)

    def restore(self) -> int:
        """Bring the work file (and its pointer) from the store where it has more; returns the bytes brought."""
        return 0

    def save(self, force: bool = False) -> None:
        """Share what was appended since the last save (at most every interval unless `force`)."""

    def finished(self, pointer) -> None:
        """The stage published its work: share the pointer, drop the work file's copy."""


class StoreWorkSync(WorkSync):
    def __init__(self, store, path, interval_s: float = 30.0):
        super().__init__(path)
        self.store = store
        self.interval_s = float(os.environ.get(SYNC_VAR, interval_s))
        self.parts = store._key(store.url_of(self.path)) + ".parts"
        self.saved = 0  # bytes of the local file that the store holds
        self._last = 0.0

    def _segments(self) -> list[tuple[int, str, int]]:
        """(offset, key, size) of the segments that follow each other from 0."""
        with self.store._io(f"listing {self.store.url_of(self.path)}'s work"):
            try:
                listing = self.store.fs.find(self.parts, detail=True)
            except FileNotFoundError:
                return []
        chain, offset = [], 0
        for key, info in sorted(listing.items()):
            start = key.rsplit("/", 1)[-1]
            if start.isdigit() and int(start) == offset and info.get("size"):
                chain.append((offset, key, int(info["size"])))
                offset += int(info["size"])
        return chain

    def restore(self) -> int:
        pointer = self.path.with_suffix(".published")
        pointer_key = self.store._key(self.store.url_of(pointer))
        with self.store._io(f"reading {self.store.url_of(pointer)}"):
            if not pointer.exists() and self.store.fs.exists(pointer_key):
                atomic_write_bytes(pointer, self.store.fs.cat_file(pointer_key))
        chain = self._segments()
        total = sum(size for _, _, size in chain)
        local = self.path.stat().st_size if self.path.exists() else 0
        if total > local:
            with self.store._io(f"downloading {self.store.url_of(self.path)}"):
                data = b"".join(self.store.fs.cat_file(key) for _, key, _ in chain)
            atomic_write_bytes(self.path, data)
            self.saved = total
            return total
        self.saved = total
        if local and local != total:  # this machine holds more than the store (or another history): its file wins
            with self.store._io(f"replacing {self.store.url_of(self.path)}'s work"), \
                    contextlib.suppress(FileNotFoundError):  # the store holds none of it yet
                self.store.fs.rm(self.parts, recursive=True)
            self.saved = 0
            self.save(force=True)
        return 0

    def save(self, force: bool = False) -> None:
        now = time.monotonic()
        if not self.path.exists() or (not force and now - self._last < self.interval_s):
            return
        self._last = now
        with open(self.path, "rb") as fh:
            fh.seek(self.saved)
            data = fh.read()
        data = data[: data.rfind(b"\n") + 1]  # whole lines only: a line being written waits for the next save
        if data:
            with self.store._io(f"uploading {self.store.url_of(self.path)}'s work"):
                self.store.fs.pipe_file(f"{self.parts}/{self.saved:015d}", data)
            self.saved += len(data)

    def finished(self, pointer) -> None:
        pointer = Path(pointer)
        with self.store._io(f"uploading {self.store.url_of(pointer)}"):
            self.store.fs.pipe_file(self.store._key(self.store.url_of(pointer)), pointer.read_bytes())
            if self.store.fs.exists(self.parts):
                self.store.fs.rm(self.parts, recursive=True)
