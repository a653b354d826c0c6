"""A local folder as the artifact store: the stages publish into it and readers check the record
where they read; nothing is copied."""

from __future__ import annotations

import shutil
from pathlib import Path

from .base import ArtifactStore, Publication
from .files import is_version_folder
from .outputs import FILES_MANIFEST
from .records import files_digest, verify_artifact


class LocalStore(ArtifactStore):
    """A local folder: the stages publish into it, readers check the record where they read."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.url = str(self.root)
        self.cache = self.root

    def __repr__(self) -> str:
        return f"LocalStore({self.root})"

    def check(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)

    def publish(self, local_dir) -> Publication:
        """Already in place: `files.publish_dir` renamed it there (and a training stage keeps a
        version published before, `training.publish`)."""
        return Publication(str(local_dir), files_digest(local_dir))

    def fetch(self, ref, expected_digest: str | None = None) -> Path:
        verify_artifact(ref, expected_digest)
        return Path(ref)

    def verify(self, ref, expected_digest: str | None = None) -> str | None:
        return verify_artifact(ref, expected_digest)

    def url_of(self, local) -> str:
        return str(local)

    def exists(self, ref) -> bool:
        return Path(ref).exists()

    def put_files(self, local_dir, names) -> None:
        """Here the later steps read them where they are."""

    def get_files(self, local_dir, files: dict) -> None:
        """Here they already are."""

    def shared_folders(self, local_parent, prefix: str) -> list[str]:
        return sorted(p.name for p in Path(local_parent).glob(f"{prefix}*") if p.is_dir())

    def remove_shared(self, local_dir) -> None:
        shutil.rmtree(local_dir, ignore_errors=True)

    def list_versions(self, prefix: str) -> list[str]:
        return sorted(str(p.parent) for p in (self.root / prefix).glob(f"*/{FILES_MANIFEST}")
                      if is_version_folder(p.parent.name))

    def work_sync(self, path, interval_s: float = 30.0):
        from .work import WorkSync

        return WorkSync(path)
