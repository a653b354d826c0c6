"""Writing artifacts: atomic writes (a crash leaves the previous version intact, never a half-written
file), the one JSONL serialization every trajectory file uses (`jsonl_line`, `write_jsonl`),
staging and publishing a stage's directory under its content hash, and `StageIncomplete`, raised by
a stage that stopped early with its work kept for a re-run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from .outputs import replaceable


class StageIncomplete(RuntimeError):
    """The stage stopped before finishing; what it did is kept and a re-run resumes it."""

    def __init__(self, message: str, details: dict):
        super().__init__(message)
        self.details = details


def jsonl_line(record) -> str:
    """One record as a line of a JSONL file: compact, NaN and infinity refused, newline-terminated."""
    return json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n"


def write_jsonl(path, records) -> Path:
    """Write `records` to `path`, one `jsonl_line` each. Not atomic by itself: the stages write into a
    staging folder that is published in one rename."""
    path = Path(path)
    with open(path, "w") as fh:
        for record in records:
            fh.write(jsonl_line(record))
    return path


def atomic_write_bytes(path, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode())


def atomic_write_json(path, data) -> Path:
    return atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n")


# A stage's process (training or play, locally or in a job) prints each progress entry as this
# prefix and one JSON object on a line; the caller follows them in its log.
LOG_PREFIX = "RHYTHM_LOG "


def write_result(directory, result: dict) -> Path:
    """A training stage's result.json, the record that publishing, HF Jobs and the assets read back."""
    return atomic_write_text(Path(directory) / "result.json", json.dumps(result, indent=2, default=str) + "\n")


def sha256_file(path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def sha256_dir(path) -> str:
    """Hash of a directory's files (relative names and contents), independent of listing order."""
    root = Path(path)
    digest = hashlib.sha256()
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(str(file.relative_to(root)).encode() + b"\0" + sha256_file(file).encode())
    return digest.hexdigest()


def staging_dir(final_parent) -> Path:
    """A fresh temporary directory beside where an artifact will be published (same filesystem)."""
    parent = Path(final_parent)
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(dir=parent, prefix=".staging-"))


def _missing_ancestors(path: Path) -> list[Path]:
    """`path` and its parents that do not exist yet, deepest first."""
    missing = []
    for p in (path, *path.absolute().parents):
        if p.exists():
            break
        missing.append(p)
    return missing


@contextmanager
def staging(final_parent):
    """A staging directory that is removed if the block fails (a published one has moved away),
    together with the folders it created that stayed empty: a failed run leaves no trace."""
    created = _missing_ancestors(Path(final_parent))
    path = staging_dir(final_parent)
    try:
        yield path
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        for folder in created:
            try:
                folder.rmdir()  # only if still empty
            except OSError:
                break
        raise


def publish_dir(staged, final, *, kind: str, overwrite: bool = False) -> Path:
    """Move a fully written staging directory to `final` in one rename. An existing `final` is
    replaced only now, after the new version is complete (the old one is removed last), and only
    when it is a `kind` artifact, empty, or `overwrite` is set (`outputs.replaceable`)."""
    staged, final = Path(staged), Path(final)
    replaceable(final, kind, overwrite=overwrite)
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists():
        old = final.with_name(f".old-{final.name}-{os.getpid()}")
        os.replace(final, old)
        try:
            os.replace(staged, final)
        except BaseException:
            os.replace(old, final)  # put the previous version back
            raise
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staged, final)
    return final


def rebase_paths(result: dict, old_dir, new_dir) -> dict:
    """`result` with every top-level string path at or under `old_dir` moved to the same place
    under `new_dir` (a result.json whose directory was published or downloaded elsewhere)."""
    old, new = str(old_dir).rstrip("/"), str(Path(new_dir))
    return {k: new + v[len(old):] if isinstance(v, str) and (v == old or v.startswith(old + "/")) else v
            for k, v in result.items()}
