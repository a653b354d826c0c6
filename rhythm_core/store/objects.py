"""An object store (`s3://bucket/prefix`, through fsspec) shared by steps on any machine, committed as
tables on object storage are: data under keys no other writer uses, then one small record written
last and only if none is there, and readers that go through the record.

On the store a version `<stage>/<version>/` holds its record (`FILES_MANIFEST`) and, under
`.rhythm-data/<upload id>/`, the files that record names (`"data"` in the record; a record without
it names files right beside it, as versions published before this layout do). Two writers of one
version upload into two upload ids; the record's conditional create picks one, the other removes its
uploads and adopts the published version. A version without its record does not exist for readers;
a killed writer's uploads are removed by the next publish in the stage once they are
`ORPHAN_GRACE_S` old.

Credentials and endpoint come from the standard AWS variables (`AWS_ACCESS_KEY_ID`,
`AWS_SECRET_ACCESS_KEY`, `AWS_ENDPOINT_URL`, `AWS_DEFAULT_REGION`), or from `storage_options`; they
never reach a log, metadata or an artifact.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

from .base import ARTIFACTS_VAR, ArtifactStore, Publication, StoreUnavailable, StoreUnreachable
from .cache import VersionCache, trace
from .files import is_version_folder
from .outputs import FILES_MANIFEST
from .records import ArtifactChanged, check_record, parse_record, read_record, sha256_file

DATA = ".rhythm-data"
# An upload no record names is removed once its newest object is this old; younger ones may be a
# writer still uploading.
ORPHAN_GRACE_S = 6 * 3600


class ObjectStore(ArtifactStore):
    """An object store through fsspec, with a local cache the stages publish into and read from."""

    def __init__(self, url: str, cache: Path, *, storage_options: dict | None = None, variable: str = ARTIFACTS_VAR):
        self.url = url.rstrip("/")
        self.protocol, self.path = self.url.split("://", 1)
        self.cache = Path(cache)
        self.variable = variable
        self._options = dict(storage_options or {})
        self._fs = None
        self._copies = VersionCache(self.cache)

    def __repr__(self) -> str:
        return f"ObjectStore({self.url}, cache={self.cache})"

    @property
    def fs(self):
        if self._fs is None:
            import fsspec

            options = {**self._options}
            if self.protocol.startswith("s3"):
                # Listings are never cached: another process's upload must be seen at once.
                options.setdefault("use_listings_cache", False)
                options.setdefault("config_kwargs", {"retries": {"max_attempts": 3, "mode": "standard"},
                                                     "connect_timeout": 10})
            self._fs = fsspec.filesystem(self.protocol, skip_instance_cache=True, **options)
        return self._fs

    def storage_options_for_upath(self) -> dict:
        """The options this store's filesystem was opened with (for universal_pathlib's UPath)."""
        options = dict(self._options)
        if self.protocol.startswith("s3"):
            options.setdefault("use_listings_cache", False)
        return options

    # -- names ---------------------------------------------------------------------------------
    def _key(self, url: str) -> str:
        if not url.startswith(self.url + "/") and url != self.url:
            raise ValueError(f"{url} is not under the artifact store {self.url}")
        return self.path + url[len(self.url):]

    def url_of(self, local) -> str:
        rel = Path(local).absolute().relative_to(self.cache.absolute())
        return f"{self.url}/{rel.as_posix()}" if str(rel) != "." else self.url

    def local_of(self, url: str) -> Path:
        """The cache path of a store URL."""
        rel = self._key(url)[len(self.path):].lstrip("/")
        return self.cache / rel if rel else self.cache

    def is_store_url(self, value) -> bool:
        return isinstance(value, str) and (value == self.url or value.startswith(self.url + "/"))

    # -- errors ---------------------------------------------------------------------------------
    def _endpoint(self) -> str | None:
        return os.environ.get("AWS_ENDPOINT_URL") or self._options.get("endpoint_url") or (
            self._options.get("client_kwargs") or {}).get("endpoint_url")

    @contextmanager
    def _io(self, doing: str):
        """Store calls, their failures in one line naming what was being done and the variable to
        look at; a missing object stays FileNotFoundError for the caller to name."""
        where = f"{self.variable}={self.url}"
        try:
            yield
        except (FileNotFoundError, FileExistsError, ArtifactChanged, StoreUnavailable):
            raise
        except PermissionError as exc:
            raise StoreUnavailable(f"{where}: the credentials were refused while {doing} (AWS_ACCESS_KEY_ID / "
                                   f"AWS_SECRET_ACCESS_KEY): {_first_line(exc)}") from None
        except Exception as exc:  # botocore's connection errors are not OSErrors
            endpoint = self._endpoint()
            raise StoreUnreachable(f"{where}: the store did not answer"
                                   + (f" at {endpoint} (AWS_ENDPOINT_URL)" if endpoint else "")
                                   + f" while {doing}: {_first_line(exc)}") from None

    # -- access ---------------------------------------------------------------------------------
    def check(self) -> None:
        """Raise StoreUnavailable (one line naming the variable) unless the bucket exists and the
        credentials are accepted; creates nothing on the store."""
        bucket = self.path.split("/", 1)[0]
        try:
            with self._io("listing the bucket"):
                self.fs.ls(bucket, detail=False)  # the bucket's existence and the keys, in one request
        except FileNotFoundError:
            raise StoreUnavailable(f"{self.variable}={self.url}: bucket {bucket} does not exist (create it first; "
                                   "nothing is created for you)") from None
        self.cache.mkdir(parents=True, exist_ok=True)

    def exists(self, url: str) -> bool:
        with self._io(f"looking for {url}"):
            return self.fs.exists(self._key(url))

    def _record(self, url: str) -> dict | None:
        """The record committed at the version `url`, checked against itself; None where none is."""
        try:
            with self._io(f"reading the record of {url}"):
                text = self.fs.cat_file(f"{self._key(url)}/{FILES_MANIFEST}")
        except FileNotFoundError:
            return None
        return parse_record(text, url)

    def _data_key(self, url: str, record: dict) -> str:
        return f"{self._key(url)}/{DATA}/{record['data']}" if record.get("data") else self._key(url)

    def _objects(self, url: str, record: dict) -> dict[str, dict]:
        """The objects of the version `url` as the store lists them now (one listing): name -> size
        and ETag; every file the record names must be there."""
        data = self._data_key(url, record)
        with self._io(f"listing {url}"):
            try:
                listing = self.fs.find(data, detail=True)
            except FileNotFoundError:
                listing = {}
        objects = {}
        for path, info in listing.items():
            name = path[len(data) + 1:]
            if name and name != FILES_MANIFEST and not name.startswith(DATA + "/"):
                objects[name] = {"size": info.get("size"), "etag": info.get("ETag") or info.get("etag")}
        for name, sha in sorted(record["files"].items()):
            if name not in objects:
                raise ArtifactChanged(f"{url}/{name}: missing from the store (the version's record names it, "
                                      f"sha256 {sha})")
        return objects

    # -- publish --------------------------------------------------------------------------------
    def publish(self, local_dir) -> Publication:
        """Upload a version published in the cache (a folder holding its record) to the same place
        on the store: its files under a fresh upload id, then the record, created only where none is.
        A version already published with the same files is left as it is; one published with other
        files (another machine's run, another writer first) is adopted: its copy replaces this
        run's in the cache and the Publication says so."""
        local_dir = Path(local_dir)
        record = read_record(local_dir)
        url = self.url_of(local_dir)
        there = self._record(url)
        if there is None:
            upload = f"{time.strftime('%Y%m%dT%H%M%S')}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            committed = {**record, "data": upload}
            data = f"{self._key(url)}/{DATA}/{upload}"
            with self._io(f"uploading {url}"):
                for name in sorted(record["files"]):
                    self.fs.put_file(str(local_dir / name), f"{data}/{name}")
            trace({"event": "upload", "url": url, "files": len(record["files"])})
            there = self._commit(url, committed)
            if there.get("data") != upload:  # another writer committed first: ours go
                with self._io(f"removing the uploads that lost the race for {url}"):
                    self.fs.rm(data, recursive=True)
        self._remove_orphans(url, there)
        if there["digest"] == record["digest"]:
            self._copies.adopt_copy(local_dir, there, self._objects(url, there))
            return Publication(url, there["digest"])
        self._copies.fetch(url, local_dir, there, self._objects(url, there), self._download_to)
        message = (f"{url} was already published with files digest {there['digest']} (this run's files give "
                   f"{record['digest']}): the published version was kept and this run's copy replaced by it")
        return Publication(url, there["digest"], adopted=message)

    def _commit(self, url: str, record: dict) -> dict:
        """Create the record of `url` unless one is there; returns the record the store then holds
        (read back, so a store that ignores the condition is still read right)."""
        key = f"{self._key(url)}/{FILES_MANIFEST}"
        body = (json.dumps(record, indent=2, sort_keys=True) + "\n").encode()
        try:
            with self._io(f"committing the record of {url}"):
                self.fs.pipe_file(key, body, mode="create")
        except FileExistsError:
            pass
        except StoreUnavailable:
            if self._record(url) is None:  # not a lost race: the store is failing
                raise
        there = self._record(url)
        if there is None:
            raise StoreUnavailable(f"{self.variable}={self.url}: the record of {url} was written but cannot be read back")
        return there

    def _remove_orphans(self, url: str, record: dict) -> None:
        """Remove the uploads under the version `url` that its record does not name, once their
        newest object is ORPHAN_GRACE_S old (a killed writer's; younger ones may be in flight)."""
        base = f"{self._key(url)}/{DATA}"
        with self._io(f"listing the uploads of {url}"):
            try:
                listing = self.fs.find(base, detail=True)
            except FileNotFoundError:
                return
            newest: dict[str, float] = {}
            for path, info in listing.items():
                upload = path[len(base) + 1:].split("/", 1)[0]
                newest[upload] = max(newest.get(upload, 0.0), _mtime(info))
            now = time.time()
            for upload, mtime in newest.items():
                if upload != record.get("data") and now - mtime >= ORPHAN_GRACE_S:
                    self.fs.rm(f"{base}/{upload}", recursive=True)

    # -- fetch ----------------------------------------------------------------------------------
    def _artifact(self, url: str) -> tuple[str, dict] | None:
        """The published artifact `url` is or lies in (the nearest folder with a record) and its record."""
        probe = url.rstrip("/")
        while self.is_store_url(probe) and probe != self.url:
            record = self._record(probe)
            if record is not None:
                return probe, record
            probe = probe.rsplit("/", 1)[0]
        return None

    def _root_and_record(self, url: str, expected_digest: str | None) -> tuple[str, dict] | None:
        found = self._artifact(url)
        if found is None:
            if expected_digest:
                raise ArtifactChanged(f"{url}: no published artifact holds it (no {FILES_MANIFEST} on the store); "
                                      f"its materialization recorded files digest {expected_digest}")
            return None
        root_url, record = found
        if expected_digest and record["digest"] != expected_digest:
            raise ArtifactChanged(f"{root_url}/{FILES_MANIFEST}: files digest {record['digest']}, but its "
                                  f"materialization recorded {expected_digest}: the artifact was replaced")
        return root_url, record

    def fetch(self, ref, expected_digest: str | None = None) -> Path:
        """The cache path of `ref` (an artifact or a file in one). The cached copy is used only if
        its files are the record's and the store's objects are the ones it was fetched from (one
        listing); otherwise the version is downloaded again, every file checked against the record.
        A mismatch raises ArtifactChanged naming the file and both hashes."""
        url = str(ref)
        if not self.is_store_url(url):  # a local path (an input given by hand)
            from .records import verify_artifact

            verify_artifact(url, expected_digest)
            return Path(url)
        found = self._root_and_record(url, expected_digest)
        if found is None:
            raise ArtifactChanged(f"{url}: no published artifact holds it (no {FILES_MANIFEST} on the store)")
        root_url, record = found
        self._copies.fetch(root_url, self.local_of(root_url), record, self._objects(root_url, record),
                           self._download_to)
        return self.local_of(url)

    def _download_to(self, root_url: str, record: dict, folder: Path) -> None:
        data = self._data_key(root_url, record)
        for name, recorded in sorted(record["files"].items()):
            target = folder / name
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                with self._io(f"downloading {root_url}/{name}"):
                    self.fs.get_file(f"{data}/{name}", str(target))
            except FileNotFoundError:
                raise ArtifactChanged(f"{root_url}/{name}: missing from the store (the version's record names it, "
                                      f"sha256 {recorded})") from None
            found = sha256_file(target)
            if found != recorded:
                raise ArtifactChanged(f"{root_url}/{name}: changed after it was published: sha256 {found}, "
                                      f"recorded {recorded} (artifact {root_url})")

    def verify(self, ref, expected_digest: str | None = None) -> str | None:
        """Check every object of the artifact `ref` lies in, on the store, and the cache's copy
        where this process has one, against the record (and the record against `expected_digest`):
        what the `files_unchanged` check runs."""
        url = str(ref)
        if not self.is_store_url(url):
            from .records import verify_artifact

            return verify_artifact(url, expected_digest)
        found = self._root_and_record(url, expected_digest)
        if found is None:
            return None
        root_url, record = found
        data = self._data_key(root_url, record)
        hashes = {}
        for name in self._objects(root_url, record):
            digest = hashlib.sha256()
            with self._io(f"reading {root_url}/{name}"), self.fs.open(f"{data}/{name}", "rb") as fh:
                while block := fh.read(1 << 20):
                    digest.update(block)
            hashes[name] = digest.hexdigest()
        check_record(record, hashes, root_url, expected_digest)
        self._copies.verify_copy(self.local_of(root_url), record)
        return record["digest"]

    def list_versions(self, prefix: str) -> list[str]:
        """The published versions right under `prefix` whose every recorded object is on the store."""
        base = self._key(f"{self.url}/{prefix}")
        with self._io(f"listing {self.url}/{prefix}"):
            records = self.fs.glob(f"{base}/*/{FILES_MANIFEST}")
        versions = []
        for path in sorted(records):
            folder = path.rsplit("/", 1)[0]
            if not is_version_folder(folder.rsplit("/", 1)[-1]):
                continue
            url = f"{self.protocol}://{folder}"
            try:
                self._objects(url, self._record(url))
            except ArtifactChanged:
                continue  # a version missing an object (or with a changed record) is no version to read
            versions.append(url)
        return versions

    # -- values between steps -------------------------------------------------------------------
    def to_store(self, value):
        cache = str(self.cache.absolute())
        if isinstance(value, dict):
            return {k: self.to_store(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.to_store(v) for v in value]
        if isinstance(value, str) and (value == cache or value.startswith(cache + "/")):
            return self.url_of(value)
        return value

    def to_local(self, value):
        if isinstance(value, dict):
            return {k: self.to_local(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.to_local(v) for v in value]
        if self.is_store_url(value):
            return str(self.local_of(value))
        return value

    # -- a run's shared staging -----------------------------------------------------------------
    def put_files(self, local_dir, names) -> None:
        base = self._key(self.url_of(local_dir))
        with self._io(f"sharing the files of {self.url_of(local_dir)}"):
            for name in names:
                self.fs.put_file(str(Path(local_dir) / name), f"{base}/{name}")

    def get_files(self, local_dir, files: dict) -> None:
        base = self._key(self.url_of(local_dir))
        Path(local_dir).mkdir(parents=True, exist_ok=True)
        for name, entry in files.items():
            target = Path(local_dir) / name
            try:
                with self._io(f"downloading {self.url_of(target)}"):
                    self.fs.get_file(f"{base}/{name}", str(target))
            except FileNotFoundError:
                raise ArtifactChanged(f"{self.url_of(target)}: missing from the store (a step of this run shared "
                                      "it; was the staging folder removed?)") from None
            found = sha256_file(target)
            if entry.get("sha256") and found != entry["sha256"]:
                raise ArtifactChanged(f"{self.url_of(target)}: sha256 {found}, but the step that wrote it "
                                      f"recorded {entry['sha256']}")

    def shared_folders(self, local_parent, prefix: str) -> list[str]:
        base = self._key(self.url_of(local_parent))
        with self._io(f"listing {self.url_of(local_parent)}"):
            try:
                names = {n.rstrip("/").rsplit("/", 1)[-1] for n in self.fs.ls(base, detail=False)}
            except FileNotFoundError:
                names = set()
        names |= {p.name for p in Path(local_parent).glob(f"{prefix}*")}
        return sorted(n for n in names if n.startswith(prefix))

    def remove_shared(self, local_dir) -> None:
        import shutil

        shutil.rmtree(local_dir, ignore_errors=True)
        key = self._key(self.url_of(local_dir))
        with self._io(f"removing {self.url_of(local_dir)}"):
            if self.fs.exists(key):
                self.fs.rm(key, recursive=True)

    def work_sync(self, path, interval_s: float = 30.0):
        from .work import StoreWorkSync

        return StoreWorkSync(self, path, interval_s)


def _first_line(exc: BaseException) -> str:
    text = str(exc).splitlines()[0][:200] if str(exc).strip() else ""
    return text or type(exc).__name__


def _mtime(info: dict) -> float:
    value = info.get("LastModified") or info.get("mtime") or info.get("created") or 0
    return value.timestamp() if hasattr(value, "timestamp") else float(value)

