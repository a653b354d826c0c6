"""Writing artifacts: atomic writes (a crash leaves the previous version intact, never a half-written
file), the one JSONL serialization every trajectory file uses (`jsonl_line`, `write_jsonl`),
staging and publishing a stage's directory under its content hash (with the record of its files,
`records.py`), and `StageIncomplete`, raised by a stage that stopped early with its work kept for a
re-run.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import socket
import tempfile
from contextlib import contextmanager
from pathlib import Path

from .outputs import replaceable
from .records import sha256_file, write_files_manifest


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


def sha256_dir(path) -> str:
    """Hash of a directory's files (relative names and contents), independent of listing order."""
    root = Path(path)
    digest = hashlib.sha256()
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(str(file.relative_to(root)).encode() + b"\0" + sha256_file(file).encode())
    return digest.hexdigest()


# A staging folder's name says who made it: `.staging-<host>-<pid>-<random>`, so a later run on the
# same host can tell a dead run's leftover (removed) from a live run's work (kept).
STAGING_PREFIX = ".staging-"


def is_version_folder(name: str) -> bool:
    """Whether a folder named `name` under a stage can be a published version: staging folders (which
    hold their record just before the rename into place) and replaced versions (`.old-…`) are dot
    folders, never versions."""
    return not name.startswith(".")


def _owner() -> str:
    return f"{socket.gethostname().replace('-', '_')}-{os.getpid()}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def remove_stale_staging(parent) -> list[Path]:
    """Remove the staging and replaced-version folders in `parent` that a process on this host left
    when it was killed (its pid is gone), and those of older releases, whose names carry no owner. A
    replaced version whose artifact is missing (a publish killed between its two renames) is put back
    instead. Returns what was removed."""
    parent, host = Path(parent), socket.gethostname().replace("-", "_")
    removed = []
    for leftover in parent.glob(".*-*"):
        if not leftover.is_dir() or not leftover.name.startswith((STAGING_PREFIX, ".old-")):
            continue
        parts = leftover.name.split("-")
        if leftover.name.startswith(STAGING_PREFIX) and len(parts) >= 4:  # .staging-<host>-<pid>-<random>
            if parts[1] != host or not parts[2].isdigit() or _pid_alive(int(parts[2])):
                continue
        elif leftover.name.startswith(".old-") and parts[-1].isdigit():
            if _pid_alive(int(parts[-1])):
                continue  # publish_dir's previous version, being swapped out right now
            final = parent / leftover.name[len(".old-"):].rsplit("-", 1)[0]
            if not final.exists():
                os.replace(leftover, final)  # the publish died before its new version arrived
                continue
        shutil.rmtree(leftover, ignore_errors=True)
        removed.append(leftover)
    return removed


_RENAME_EXCHANGE = 2  # linux/fs.h


def exchange_dirs(a, b) -> bool:
    """Swap two paths in one call (Linux renameat2 with RENAME_EXCHANGE); False where the OS or the
    filesystem has no such call, and nothing was changed."""
    if os.uname().sysname != "Linux":
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    at_fdcwd = -100
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EPERM, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def staging_dir(final_parent) -> Path:
    """A fresh temporary directory beside where an artifact will be published (same filesystem),
    after removing what killed runs left there."""
    parent = Path(final_parent)
    parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(parent)
    return Path(tempfile.mkdtemp(dir=parent, prefix=f"{STAGING_PREFIX}{_owner()}-"))


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


def publish_dir(staged, final, *, kind: str, overwrite: bool = False, published: bool = False) -> Path:
    """Move a fully written staging directory to `final` in one rename, with the record of its files
    (`FILES_MANIFEST`) that readers check. An existing `final` is replaced only now, after the new
    version is complete (the old one is removed last), and only when it is a `kind` artifact, empty,
    or `overwrite` is set (`outputs.replaceable`). `published`: `final` is a content-hashed version
    in a stage folder, which nothing may write into or replace with other content."""
    staged, final = Path(staged), Path(final)
    replaceable(final, kind, overwrite=overwrite)
    write_files_manifest(staged, kind, published=published)
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists():
        if exchange_dirs(staged, final):  # one call: there is never a moment without `final`
            shutil.rmtree(staged, ignore_errors=True)  # now the previous version
            return final
        # Two renames: a process killed between them leaves `.old-` and no `final`, which the next
        # `remove_stale_staging` in this folder (every staging_dir call) puts back.
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


def path_under(path, root) -> str:
    """`path` relative to `root` where it lies under it (POSIX separators), else as it is: how an
    artifact names its inputs, so that where the artifacts live stays out of its files."""
    try:
        return Path(path).absolute().relative_to(Path(root).absolute()).as_posix()
    except ValueError:
        return str(path)


def rebase_paths(result: dict, old_dir, new_dir) -> dict:
    """`result` with every top-level string path at or under `old_dir` moved to the same place
    under `new_dir` (a result.json whose directory was published or downloaded elsewhere)."""
    old, new = str(old_dir).rstrip("/"), str(Path(new_dir))
    return {k: new + v[len(old):] if isinstance(v, str) and (v == old or v.startswith(old + "/")) else v
            for k, v in result.items()}
