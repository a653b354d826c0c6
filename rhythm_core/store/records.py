"""The record of a published directory's files (`FILES_MANIFEST`): every file with its sha256 and a
digest of that list. Every reader checks a version's files against its record, and the record
against itself (its digest is recomputed from its file list at every read, so a record whose list
was edited is refused whatever digest it claims)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..errors import UserError
from .outputs import FETCHED_STAMP, FILES_MANIFEST, artifact_root


class ArtifactChanged(UserError, RuntimeError):
    """A published artifact whose files are not the ones it was published with."""


def sha256_file(path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def file_hashes(root: Path) -> dict[str, str]:
    """Every file under `root` (but the record and a cache's stamp) with its sha256."""
    return {str(f.relative_to(root)): sha256_file(f) for f in sorted(root.rglob("*"))
            if f.is_file() and f.name not in (FILES_MANIFEST, FETCHED_STAMP)}


def record_digest(files: dict[str, str]) -> str:
    """The digest a record of `files` (name -> sha256) carries: what a materialization records."""
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]


def write_files_manifest(directory, kind: str, *, published: bool) -> str:
    """Record every file of `directory` with its sha256 in `FILES_MANIFEST`; returns the record's
    digest (what a materialization records as `files_digest`)."""
    from .files import atomic_write_json

    files = file_hashes(Path(directory))
    record = {"kind": kind, "published": published, "files": files, "digest": record_digest(files)}
    atomic_write_json(Path(directory) / FILES_MANIFEST, record)
    return record["digest"]


def parse_record(text: str | bytes, where: str) -> dict:
    """A record read from `where` (a folder or a store URL), refused unless it is one and its digest
    is the one its file list gives."""
    try:
        record = json.loads(text)
        files, digest = record["files"], record["digest"]
        ok = isinstance(files, dict) and all(isinstance(v, str) for v in files.values())
    except (ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        raise ArtifactChanged(f"{where}/{FILES_MANIFEST}: not a record of an artifact's files (unreadable or "
                              "missing its files or digest)")
    if record_digest(files) != digest:
        raise ArtifactChanged(f"{where}/{FILES_MANIFEST}: its file list gives digest {record_digest(files)}, but it "
                              f"claims {digest}: the record was changed after it was published")
    return record


def read_record(folder) -> dict:
    folder = Path(folder)
    return parse_record((folder / FILES_MANIFEST).read_bytes(), str(folder))


def files_digest(path) -> str | None:
    """The recorded digest of the artifact `path` is or lies in; None outside any artifact."""
    root = artifact_root(path)
    return read_record(root)["digest"] if root else None


def verify_artifact(path, expected_digest: str | None = None) -> str | None:
    """Check that the artifact `path` is or lies in holds exactly the files it was published with,
    and, given `expected_digest` (what its materialization recorded), that its record is that one.
    Raises ArtifactChanged naming the file and both hashes; returns the digest (None outside any
    artifact, when nothing was expected)."""
    root = artifact_root(path)
    if root is None:
        if expected_digest:
            raise ArtifactChanged(f"{path}: the artifact's record of its files ({FILES_MANIFEST}) is missing; "
                                  f"its materialization recorded files digest {expected_digest}")
        return None
    record = read_record(root)
    check_record(record, file_hashes(root), str(root), expected_digest)
    return record["digest"]


def check_record(record: dict, found: dict[str, str], root: str, expected_digest: str | None = None) -> None:
    """Raise ArtifactChanged unless the files `found` (name -> sha256) of the artifact at `root` (a
    folder or a store URL) are exactly those its `record` names, and the record is the one
    `expected_digest` names; the message names the file and both hashes."""
    if expected_digest and record.get("digest") != expected_digest:
        raise ArtifactChanged(f"{root}/{FILES_MANIFEST}: files digest {record.get('digest')}, but its "
                              f"materialization recorded {expected_digest}: the artifact was replaced")
    recorded = record["files"]
    for name in sorted(set(recorded) | set(found)):
        if name not in found:
            raise ArtifactChanged(f"{root}/{name}: missing from the published artifact {root} "
                                  f"(recorded sha256 {recorded[name]})")
        if name not in recorded:
            raise ArtifactChanged(f"{root}/{name}: added to the published artifact {root} after it was published "
                                  f"(sha256 {found[name]}, not in its record)")
        if found[name] != recorded[name]:
            raise ArtifactChanged(f"{root}/{name}: changed after it was published: sha256 {found[name]}, "
                                  f"recorded {recorded[name]} (artifact {root})")
