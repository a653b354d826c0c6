"""Where artifacts are written, published and read.

- `outputs`: where a command or a stage may write, decided before any work.
- `files`: atomic writes, JSONL, staging a stage's folder and publishing it under its version.
- `records`: the record of a published folder's files, checked by every reader.
- `base`, `local`, `objects`: the artifact store, a local folder or an object store behind one
  interface (`ArtifactStore`), opened by `open_store`.
- `cache`, `work`: an object store's local copies and a stage's growing work file.

What the store guarantees: a version is whole or absent, whoever writes it; its files are checked
against its record (and the record against itself) at every read, the local copy a step reads
included; a version published again with other files is adopted, never overwritten.
"""

from .base import (
    ARTIFACTS_VAR,
    CACHE_VAR,
    ArtifactStore,
    Publication,
    StoreUnavailable,
    StoreUnreachable,
    artifact_ref,
    open_store,
    split_url,
)
from .files import (
    LOG_PREFIX,
    STAGING_PREFIX,
    StageIncomplete,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    exchange_dirs,
    is_version_folder,
    jsonl_line,
    path_under,
    publish_dir,
    rebase_paths,
    remove_stale_staging,
    sha256_dir,
    staging,
    staging_dir,
    write_jsonl,
    write_result,
)
from .local import LocalStore
from .objects import ObjectStore
from .outputs import (
    FETCHED_STAMP,
    FILES_MANIFEST,
    MARKERS,
    OutputRefused,
    artifact_root,
    check_input_file,
    check_output_dir,
    check_output_file,
    check_output_root,
    is_artifact,
    replaceable,
)
from .records import (
    ArtifactChanged,
    check_record,
    files_digest,
    read_record,
    record_digest,
    sha256_file,
    verify_artifact,
    write_files_manifest,
)

__all__ = [
    "ARTIFACTS_VAR", "CACHE_VAR", "FETCHED_STAMP", "FILES_MANIFEST", "LOG_PREFIX", "MARKERS", "STAGING_PREFIX",
    "ArtifactChanged", "ArtifactStore", "LocalStore", "ObjectStore", "OutputRefused", "Publication", "StageIncomplete",
    "StoreUnavailable", "StoreUnreachable", "artifact_ref", "artifact_root", "atomic_write_bytes", "atomic_write_json", "atomic_write_text",
    "check_input_file", "check_output_dir", "check_output_file", "check_output_root", "check_record",
    "exchange_dirs", "files_digest", "path_under", "is_artifact", "is_version_folder", "jsonl_line", "open_store", "publish_dir",
    "read_record", "rebase_paths", "record_digest", "remove_stale_staging", "replaceable", "sha256_dir",
    "sha256_file", "split_url", "staging", "staging_dir", "verify_artifact", "write_files_manifest", "write_jsonl",
    "write_result",
]
