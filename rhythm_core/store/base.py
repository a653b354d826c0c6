"""What every artifact store does (`ArtifactStore`), and opening the one a URL or path names.

Stages write and publish into a local folder (`files.publish_dir`); a store makes those versions
shared. With a local root the folder *is* the store (`LocalStore`); with an object store it is a
cache (`ObjectStore`). Callers use the interface below and never ask which one they have.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError
from .files import path_under
from .outputs import FILES_MANIFEST, artifact_root

ARTIFACTS_VAR = "RHYTHM_ARTIFACTS"
CACHE_VAR = "RHYTHM_ARTIFACT_CACHE"
# Object stores fsspec reaches, and the package that implements each (named when it is missing).
OBJECT_STORES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs"}
ARTIFACT_KEYS = ("path", "dir")  # where a stage's result names the artifact it published


class StoreUnavailable(UserError, RuntimeError):
    """The artifact store cannot be used: a bad URL, a filesystem not installed, an endpoint that does
    not answer, refused credentials or a bucket that does not exist. One line naming the variable."""


class StoreUnreachable(StoreUnavailable):
    """The store's endpoint did not answer: a fault that may pass, so a step retries it (`transient`)."""

    transient = True


@dataclass(frozen=True)
class Publication:
    """What publishing a version did. `adopted`: the version was already published (or another writer
    committed it first) with other files, and the published one was kept in place of this run's: the
    message says so; `digest` is then the published record's."""

    url: str
    digest: str
    adopted: str | None = None


def artifact_ref(value) -> str | None:
    """The artifact a stage's result (or a step's value) names."""
    if not isinstance(value, dict):
        return None
    return next((value[k] for k in ARTIFACT_KEYS if isinstance(value.get(k), str)), None)


class ArtifactStore(ABC):
    """Where published versions live. `cache` is the local folder the stages publish into and read
    from; `url` names the store in values handed between steps."""

    url: str
    cache: Path

    @abstractmethod
    def check(self) -> None:
        """Raise StoreUnavailable (one line) unless the store can be used."""

    @abstractmethod
    def publish(self, local_dir) -> Publication:
        """Share a version published in the cache (a folder holding its record)."""

    @abstractmethod
    def fetch(self, ref, expected_digest: str | None = None) -> Path:
        """The local path of `ref` (an artifact or a file in one), every file checked against the
        artifact's record (and the record against `expected_digest`) before it is returned."""

    @abstractmethod
    def verify(self, ref, expected_digest: str | None = None) -> str | None:
        """Check every copy of the artifact `ref` lies in (the store's and the local one a step
        reads) against its record; returns the digest."""

    @abstractmethod
    def exists(self, ref) -> bool:
        """Whether anything is at `ref` (a store URL or a path under the cache)."""

    @abstractmethod
    def list_versions(self, prefix: str) -> list[str]:
        """The published, whole versions right under `prefix` (a stage folder), sorted."""

    @abstractmethod
    def url_of(self, local) -> str:
        """The store's name for a path under the cache."""

    @abstractmethod
    def put_files(self, local_dir, names) -> None:
        """Share files of a step's unpublished staging folder with later steps of the run."""

    @abstractmethod
    def get_files(self, local_dir, files: dict) -> None:
        """Bring what `put_files` shared into this step's staging folder, each file checked against
        the sha256 its entry in `files` (name -> {"sha256": ...}) records."""

    @abstractmethod
    def shared_folders(self, local_parent, prefix: str) -> list[str]:
        """The names of the shared staging folders (dot folders starting with `prefix`) under `local_parent`."""

    @abstractmethod
    def remove_shared(self, local_dir) -> None:
        """Remove a shared staging folder (its local copy and the store's)."""

    @abstractmethod
    def work_sync(self, path, interval_s: float = 30.0):
        """A `WorkSync` for a growing local work file (`work.py`): what a step retried elsewhere resumes."""

    def name_of(self, ref) -> str:
        """`ref` (a store URL or a cache path) as its path under the store's root: what records name,
        so that the same work has the same version on every store."""
        ref = str(ref)
        if ref.startswith(self.url.rstrip("/") + "/"):
            return ref[len(self.url.rstrip("/")) + 1:]
        return path_under(ref, self.cache)

    def to_store(self, value):
        """`value` with every path under the cache replaced by its store name (nested dicts and lists)."""
        return value

    def to_local(self, value):
        """`value` with every store name replaced by its cache path."""
        return value

    def fetch_value(self, value):
        """Fetch the artifact a step's value names (its `path` or `dir`, checked against its
        `files_digest`) and return the value with cache paths."""
        ref = artifact_ref(value)
        if ref:
            self.fetch(ref, value.get("files_digest"))
        return self.to_local(value)

    def publish_value(self, value):
        """Publish the artifact a stage's result names and return the result in the store's terms:
        what the step hands on. Where the version was adopted, the result says so (`kept_published`,
        `adopted`) and carries the published record's digest."""
        ref = artifact_ref(value)
        if ref:
            folder = artifact_root(ref)
            if folder is None:
                raise ValueError(f"{ref}: not inside a published artifact (no {FILES_MANIFEST})")
            published = self.publish(folder)
            if published.adopted:
                value = {**value, "files_digest": published.digest, "kept_published": True,
                         "adopted": published.adopted}
        return self.to_store(value)


def split_url(spec: str) -> tuple[str | None, str]:
    """(protocol, path): (None, the path) for a local folder (`file://` included)."""
    if "://" not in spec:
        return None, spec
    protocol, rest = spec.split("://", 1)
    if protocol == "file":
        return None, rest
    return protocol.lower(), rest.strip("/")


def open_store(spec: str | os.PathLike | None, *, default_root: Path, cache: str | os.PathLike | None = None,
               storage_options: dict | None = None, variable: str = ARTIFACTS_VAR) -> ArtifactStore:
    """The store `spec` names (a local path or an object-store URL; empty: `default_root`), its local
    cache (`cache`, else RHYTHM_ARTIFACT_CACHE, else `<default_root>-cache`). Refuses an unknown
    scheme or one whose filesystem is not installed, naming `variable`; checks nothing remote (see
    `ArtifactStore.check`)."""
    from .local import LocalStore
    from .objects import ObjectStore

    spec = str(spec or "")
    protocol, path = split_url(spec)
    if protocol is None:
        return LocalStore(Path(path) if path else default_root)
    if protocol not in OBJECT_STORES:
        raise StoreUnavailable(f"{variable}={spec}: unknown scheme {protocol}://; use a local path or an object store "
                               f"({', '.join(sorted(f'{p}://' for p in OBJECT_STORES))})")
    import fsspec

    try:
        fsspec.get_filesystem_class(protocol)
    except (ImportError, ValueError) as exc:
        raise StoreUnavailable(f"{variable}={spec}: the {protocol}:// filesystem is not installed "
                               f"(pip install {OBJECT_STORES[protocol]}): {exc}") from None
    if not path:
        raise StoreUnavailable(f"{variable}={spec}: name a bucket ({protocol}://bucket/prefix)")
    cache = cache or os.environ.get(CACHE_VAR) or f"{default_root}-cache"
    cache = str(cache).replace("{pid}", str(os.getpid()))  # a cache per process: what pods without shared disk have
    return ObjectStore(f"{protocol}://{path}", Path(cache), storage_options=storage_options, variable=variable)
