"""Where artifacts live: a local folder, or an object store (`s3://bucket/prefix`, through fsspec).

Every stage writes and publishes into a local folder, as it always has (`artifacts.publish_dir`).
With a local root that folder *is* the store. With an object store it is a cache: a step fetches
each artifact it reads from the store into the cache (every file checked against the artifact's
record, once, then reused while the record's digest is the same), and uploads each version it
publishes: files first, the record of its files (`FILES_MANIFEST`) last and only if none is there
yet, so a version without its record does not exist for readers, a killed upload leaves no visible
version and a re-run completes it, and a published version is never overwritten. Steps share nothing
but the store. Values that name artifacts (the stages' result dicts) carry store URLs between steps
(`to_store`) and cache paths inside one (`fetch_value`).

Credentials and endpoint come from the standard AWS variables (`AWS_ACCESS_KEY_ID`,
`AWS_SECRET_ACCESS_KEY`, `AWS_ENDPOINT_URL` for S3-compatible servers, `AWS_DEFAULT_REGION`), or
from `storage_options` (the Dagster resource passes its `dg.EnvVar` fields); they never reach a log,
metadata or an artifact.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from .artifacts import ArtifactChanged, check_record, is_version_folder, sha256_file, verify_artifact
from .errors import UserError
from .outputs import FETCHED_STAMP as _FETCHED
from .outputs import FILES_MANIFEST

ARTIFACTS_VAR = "RHYTHM_ARTIFACTS"
CACHE_VAR = "RHYTHM_ARTIFACT_CACHE"
# A file to append one JSON line per fetch (a cache hit or a download) and per upload: what
# benchmarks/artifact_store.py counts. Unset: nothing is written.
TRACE_VAR = "RHYTHM_STORE_TRACE"
# A version folder on the store whose record never arrived (a killed upload) is removed once its
# newest file is this old; younger ones may be an upload in flight.
INCOMPLETE_GRACE_S = 6 * 3600
# Object stores fsspec reaches, and the package that implements each (named when it is missing).
OBJECT_STORES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs"}


ARTIFACT_KEYS = ("path", "dir")  # where a stage's result names the artifact it published


def artifact_ref(value) -> str | None:
    """The artifact a stage's result (or a step's value) names."""
    if not isinstance(value, dict):
        return None
    return next((value[k] for k in ARTIFACT_KEYS if isinstance(value.get(k), str)), None)


class StoreUnavailable(UserError, RuntimeError):
    """The artifact store cannot be used: a bad URL, a filesystem not installed, an endpoint that does
    not answer, refused credentials or a bucket that does not exist. One line naming the variable."""


def split_url(spec: str) -> tuple[str | None, str]:
    """(protocol, path): (None, the path) for a local folder (`file://` included)."""
    if "://" not in spec:
        return None, spec
    protocol, rest = spec.split("://", 1)
    if protocol == "file":
        return None, rest
    return protocol.lower(), rest.strip("/")


def open_store(spec: str | os.PathLike | None, *, default_root: Path, cache: str | os.PathLike | None = None,
               storage_options: dict | None = None, variable: str = ARTIFACTS_VAR):
    """The store `spec` names (a local path or an object-store URL; empty: `default_root`), its local
    cache (`cache`, else RHYTHM_ARTIFACT_CACHE, else `<default_root>-cache`). Refuses an unknown
    scheme or one whose filesystem is not installed, naming `variable`; checks nothing remote (see
    `ObjectStore.check`)."""
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


# ---------------------------------------------------------------------------------------------
class LocalStore:
    """A local folder: the stages publish into it, readers check the record where they read."""

    remote = False

    def __init__(self, root: Path):
        self.root = Path(root)
        self.url = str(self.root)
        self.cache = self.root

    def __repr__(self) -> str:
        return f"LocalStore({self.root})"

    def check(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)

    def publish(self, local_dir) -> str:
        return str(local_dir)

    def fetch(self, ref, expected_digest: str | None = None) -> Path:
        verify_artifact(ref, expected_digest)
        return Path(ref)

    def verify(self, ref, expected_digest: str | None = None) -> str | None:
        return verify_artifact(ref, expected_digest)

    def to_store(self, value):
        return value

    def to_local(self, value):
        return value

    def publish_value(self, value):
        return value

    def fetch_value(self, value):
        ref = artifact_ref(value)
        if ref:
            self.fetch(ref, value.get("files_digest"))
        return value

    def exists(self, ref) -> bool:
        return Path(ref).exists()

    def put_files(self, local_dir, names) -> None:
        """Share files of a step's staging folder with the steps after it: here they already are."""

    def remove(self, local_dir) -> None:
        """Nothing to remove beyond the local staging folder itself."""

    def get_files(self, local_dir, files: dict) -> None:
        """The shared staging files a later step reads: here they already are."""

    def list_versions(self, prefix: str) -> list[str]:
        """The published versions (folders with their record) right under `prefix`, by name."""
        return sorted(str(p.parent) for p in (self.root / prefix).glob(f"*/{FILES_MANIFEST}")
                      if is_version_folder(p.parent.name))


# ---------------------------------------------------------------------------------------------
class ObjectStore:
    """An object store through fsspec, with a local cache the stages publish into and read from."""

    remote = True

    def __init__(self, url: str, cache: Path, *, storage_options: dict | None = None, variable: str = ARTIFACTS_VAR):
        self.url = url.rstrip("/")
        self.protocol, self.path = self.url.split("://", 1)
        self.cache = Path(cache)
        self.variable = variable
        self._options = dict(storage_options or {})
        self._fs = None

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
        options = {k: v for k, v in self._options.items()}
        if self.protocol.startswith("s3"):
            options.setdefault("use_listings_cache", False)
        return options

    # -- names ---------------------------------------------------------------------------------
    def _key(self, url: str) -> str:
        if not url.startswith(self.url + "/") and url != self.url:
            raise ValueError(f"{url} is not under the artifact store {self.url}")
        return self.path + url[len(self.url):]

    def url_of(self, local) -> str:
        """The store URL of a path under the cache."""
        rel = Path(local).absolute().relative_to(self.cache.absolute())
        return f"{self.url}/{rel.as_posix()}" if str(rel) != "." else self.url

    def local_of(self, url: str) -> Path:
        """The cache path of a store URL."""
        rel = self._key(url)[len(self.path):].lstrip("/")
        return self.cache / rel if rel else self.cache

    def is_store_url(self, value) -> bool:
        return isinstance(value, str) and (value == self.url or value.startswith(self.url + "/"))

    # -- access ---------------------------------------------------------------------------------
    def check(self) -> None:
        """Raise StoreUnavailable (one line naming the variable) unless the bucket exists and the
        credentials are accepted; creates nothing on the store."""
        bucket = self.path.split("/", 1)[0]
        where = f"{self.variable}={self.url}"
        endpoint = os.environ.get("AWS_ENDPOINT_URL") or self._options.get("endpoint_url") or (
            self._options.get("client_kwargs") or {}).get("endpoint_url")
        try:
            self.fs.ls(bucket, detail=False)  # a listing: the bucket's existence and the keys, in one request
        except FileNotFoundError:
            raise StoreUnavailable(f"{where}: bucket {bucket} does not exist (create it first; nothing is "
                                   "created for you)") from None
        except PermissionError as exc:
            raise StoreUnavailable(f"{where}: the credentials were refused (AWS_ACCESS_KEY_ID / "
                                   f"AWS_SECRET_ACCESS_KEY): {str(exc).splitlines()[0][:200]}") from None
        except Exception as exc:  # botocore's connection errors are not OSErrors
            reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            raise StoreUnavailable(f"{where}: the store did not answer"
                                   + (f" at {endpoint} (AWS_ENDPOINT_URL)" if endpoint else "")
                                   + f": {reason}") from None
        self.cache.mkdir(parents=True, exist_ok=True)

    def exists(self, url: str) -> bool:
        return self.fs.exists(self._key(url))

    # -- publish --------------------------------------------------------------------------------
    def publish(self, local_dir) -> str:
        """Upload a published local artifact folder (one holding its record) to the same place on the
        store: every file first, the record last, written only where none is; returns its URL. A
        version already on the store with the same record is left as it is; with another record the
        upload is refused (published versions never change)."""
        local_dir = Path(local_dir)
        manifest = local_dir / FILES_MANIFEST
        record = json.loads(manifest.read_text())
        url = self.url_of(local_dir)
        key = self._key(url)
        there = self._record(url)
        if there is not None:
            if there.get("digest") != record["digest"]:
                raise ArtifactChanged(f"{url}: already published with files digest {there.get('digest')}; this "
                                      f"version's files give {record['digest']}: published versions never change")
            self._stamp(local_dir, record["digest"])
            return url
        for name in sorted(record["files"]):
            self.fs.put_file(str(local_dir / name), f"{key}/{name}")
        _trace({"event": "upload", "url": url, "files": len(record["files"])})
        try:
            self.fs.pipe_file(f"{key}/{FILES_MANIFEST}", manifest.read_bytes(), mode="create")
        except (FileExistsError, OSError) as exc:  # another writer committed first
            there = self._record(url)
            if there is None or there.get("digest") != record["digest"]:
                raise ArtifactChanged(f"{url}: another writer published other files under this version") from exc
        self._stamp(local_dir, record["digest"])
        return url

    def _record(self, url: str) -> dict | None:
        try:
            return json.loads(self.fs.cat_file(f"{self._key(url)}/{FILES_MANIFEST}"))
        except FileNotFoundError:
            return None

    @staticmethod
    def _stamp(local_dir: Path, digest: str) -> None:
        (local_dir / _FETCHED).write_text(digest)

    def remove_incomplete(self, prefix: str, older_than_s: float = INCOMPLETE_GRACE_S) -> list[str]:
        """Remove the version folders right under `prefix` (a stage's folder on the store) that have
        files but no record, once their newest file is `older_than_s` old. Returns their URLs."""
        base = self._key(f"{self.url}/{prefix}")
        removed = []
        try:
            entries = self.fs.ls(base, detail=True)
        except FileNotFoundError:
            return removed
        now = time.time()
        for entry in entries:
            if entry.get("type") != "directory":
                continue
            name = entry["name"].rstrip("/")
            if self.fs.exists(f"{name}/{FILES_MANIFEST}"):
                continue
            files = self.fs.find(name, detail=True)
            newest = max((_mtime(info) for info in files.values()), default=0.0)
            if files and now - newest >= older_than_s:
                self.fs.rm(name, recursive=True)
                removed.append(f"{self.protocol}://{name}")
        return removed

    # -- fetch ----------------------------------------------------------------------------------
    def artifact_url(self, url: str) -> str | None:
        """The published artifact `url` is or lies in: the nearest folder with a record."""
        probe = url.rstrip("/")
        while self.is_store_url(probe) and probe != self.url:
            if self._record(probe) is not None:
                return probe
            probe = probe.rsplit("/", 1)[0]
        return None

    def fetch(self, url, expected_digest: str | None = None) -> Path:
        """The cache path of `url` (an artifact or a file in one), downloading the artifact first
        unless the cache already holds it checked against the same record. Every downloaded file is
        checked against the record; a mismatch raises ArtifactChanged naming the file and both hashes."""
        url = str(url)
        if not self.is_store_url(url):  # a local path (an input given by hand)
            verify_artifact(url, expected_digest)
            return Path(url)
        root_url = self.artifact_url(url)
        if root_url is None:
            raise ArtifactChanged(f"{url}: no published artifact holds it (no {FILES_MANIFEST} on the store)"
                                  + (f"; its materialization recorded files digest {expected_digest}"
                                     if expected_digest else ""))
        record = self._record(root_url)
        if expected_digest and record.get("digest") != expected_digest:
            raise ArtifactChanged(f"{root_url}/{FILES_MANIFEST}: files digest {record.get('digest')}, but its "
                                  f"materialization recorded {expected_digest}: the artifact was replaced")
        local_root = self.local_of(root_url)
        stamp = local_root / _FETCHED
        hit = stamp.is_file() and stamp.read_text() == record["digest"]
        if not hit:
            self._download(root_url, record, local_root)
        _trace({"event": "fetch", "url": root_url, "hit": hit, "files": len(record["files"])})
        return self.local_of(url)

    def _download(self, root_url: str, record: dict, local_root: Path) -> None:
        key = self._key(root_url)
        local_root.parent.mkdir(parents=True, exist_ok=True)
        staged = Path(tempfile.mkdtemp(dir=local_root.parent, prefix=f".fetch-{local_root.name}-"))
        try:
            for name, recorded in sorted(record["files"].items()):
                target = staged / name
                target.parent.mkdir(parents=True, exist_ok=True)
                self.fs.get_file(f"{key}/{name}", str(target))
                found = sha256_file(target)
                if found != recorded:
                    raise ArtifactChanged(f"{root_url}/{name}: changed after it was published: sha256 {found}, "
                                          f"recorded {recorded} (artifact {root_url})")
            (staged / FILES_MANIFEST).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
            (staged / _FETCHED).write_text(record["digest"])
            if local_root.exists():
                shutil.rmtree(local_root)
            os.replace(staged, local_root)
        except BaseException:
            shutil.rmtree(staged, ignore_errors=True)
            raise

    def verify(self, url, expected_digest: str | None = None) -> str | None:
        """Check every file of the artifact `url` lies in, on the store, against its record (and the
        record against `expected_digest`): what the `files_unchanged` check runs."""
        url = str(url)
        if not self.is_store_url(url):
            return verify_artifact(url, expected_digest)
        root_url = self.artifact_url(url)
        if root_url is None:
            if expected_digest:
                raise ArtifactChanged(f"{url}: the artifact's record of its files ({FILES_MANIFEST}) is missing; "
                                      f"its materialization recorded files digest {expected_digest}")
            return None
        record = self._record(root_url)
        key = self._key(root_url)
        found = {}
        for path in self.fs.find(key):
            name = path[len(key) + 1:]
            if name not in (FILES_MANIFEST, _FETCHED):
                digest = hashlib.sha256()
                with self.fs.open(path, "rb") as fh:
                    while block := fh.read(1 << 20):
                        digest.update(block)
                found[name] = digest.hexdigest()
        check_record(record, found, root_url, expected_digest)
        return record["digest"]

    # -- values between steps -------------------------------------------------------------------
    def to_store(self, value):
        """`value` with every path under the cache replaced by its store URL (nested dicts and lists)."""
        cache = str(self.cache.absolute())
        if isinstance(value, dict):
            return {k: self.to_store(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.to_store(v) for v in value]
        if isinstance(value, str) and (value == cache or value.startswith(cache + "/")):
            return self.url_of(value)
        return value

    def to_local(self, value):
        """`value` with every store URL replaced by its cache path."""
        if isinstance(value, dict):
            return {k: self.to_local(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.to_local(v) for v in value]
        if self.is_store_url(value):
            return str(self.local_of(value))
        return value

    def fetch_value(self, value):
        """Fetch the artifact a step's value names (its `path` or `dir`, checked against its
        `files_digest`) and return the value with cache paths."""
        ref = artifact_ref(value)
        if ref:
            self.fetch(ref, value.get("files_digest"))
        return self.to_local(value)

    def publish_value(self, value):
        """Upload the artifact a stage's result names (published in the cache) and return the result
        with store URLs: what the step hands on."""
        ref = artifact_ref(value)
        if ref:
            from .outputs import artifact_root

            folder = artifact_root(ref)
            if folder is None:
                raise ValueError(f"{ref}: not inside a published artifact (no {FILES_MANIFEST})")
            self.publish(folder)
        return self.to_store(value)

    def put_files(self, local_dir, names) -> None:
        """Upload files of a step's local staging folder (under the cache) to the same place on the
        store, for a later step of the run that publishes them (an unpublished folder: no record)."""
        base = self._key(self.url_of(local_dir))
        for name in names:
            self.fs.put_file(str(Path(local_dir) / name), f"{base}/{name}")

    def get_files(self, local_dir, files: dict) -> None:
        """Download what `put_files` shared into this step's staging folder, each file checked
        against the sha256 its entry in `files` (name -> {"sha256": ...}) records."""
        base = self._key(self.url_of(local_dir))
        Path(local_dir).mkdir(parents=True, exist_ok=True)
        for name, entry in files.items():
            target = Path(local_dir) / name
            self.fs.get_file(f"{base}/{name}", str(target))
            found = sha256_file(target)
            if entry.get("sha256") and found != entry["sha256"]:
                raise ArtifactChanged(f"{self.url_of(target)}: sha256 {found}, but the step that wrote it "
                                      f"recorded {entry['sha256']}")

    def staged_folders(self, local_parent) -> list[str]:
        """The names of the run staging folders (`.staging-run-*`) shared on the store under the
        place of `local_parent`."""
        base = self._key(self.url_of(local_parent))
        try:
            names = self.fs.ls(base, detail=False)
        except FileNotFoundError:
            return []
        return sorted(n.rstrip("/").rsplit("/", 1)[-1] for n in names
                      if n.rstrip("/").rsplit("/", 1)[-1].startswith(".staging-run-"))

    def remove(self, local_dir) -> None:
        """Remove a staging folder's copy on the store (after its files were published)."""
        key = self._key(self.url_of(local_dir))
        if self.fs.exists(key):
            self.fs.rm(key, recursive=True)

    def list_versions(self, prefix: str) -> list[str]:
        """The published versions (folders with their record) right under `prefix`, as URLs."""
        base = self._key(f"{self.url}/{prefix}")
        found = [p.rsplit("/", 1)[0] for p in self.fs.glob(f"{base}/*/{FILES_MANIFEST}")]
        return sorted(f"{self.protocol}://{p}" for p in found if is_version_folder(p.rsplit("/", 1)[-1]))


def _mtime(info: dict) -> float:
    value = info.get("LastModified") or info.get("mtime") or info.get("created") or 0
    return value.timestamp() if hasattr(value, "timestamp") else float(value)


def _trace(event: dict) -> None:
    path = os.environ.get(TRACE_VAR)
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps({**event, "pid": os.getpid(), "time": time.time()}) + "\n")
