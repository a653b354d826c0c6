"""Where a command or a stage may write, decided before any work.

One rule for every output: an existing output is replaced only when it is an artifact of the same
kind (it holds that kind's own marker file) or the user asked for it (`overwrite`, the CLI's
`--overwrite`); nothing is written into an artifact, and a published one (a content-hashed version in
a stage folder, such as an instance's) is never replaced; an output that is, contains or lies inside
an input is refused; a path whose folder does not exist is refused (a command creates only the output itself, and the stage folders under an
output root). `artifacts.publish_dir` applies the same rule when it renames a finished artifact into
place, so a stage that reaches a path the checks did not see still never removes a stranger's files.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ..errors import BadInput, UserError

# Every published directory's record of its files (artifacts.write_files_manifest).
FILES_MANIFEST = ".rhythm-files.json"
# In a local copy of an artifact from an object store: the digest of the record its files were checked
# against (cache.py). Like the record itself, never one of the artifact's files.
FETCHED_STAMP = ".rhythm-fetched"
# The file each kind of published directory holds, which marks it as ours to replace.
MARKERS = {
    "sft_dataset": "provenance.json",
    "reeval_report": "report.json",
    "eval_rollouts": "manifest.json",
    "eval_results": "eval_results.json",
    "checkpoint": "result.json",
    "teacher_trajectories": "trajectories.jsonl",
    "eval_history": "rows.parquet",
    "env_dataset": "env_dataset.json",
}


class OutputRefused(UserError, ValueError):
    """An output path that would lose data or cannot be written; the message names the argument."""


def artifact_root(path) -> Path | None:
    """The artifact directory `path` is or lies in: the nearest one holding `FILES_MANIFEST`."""
    path = Path(path).absolute()
    for folder in (path, *path.parents):
        if (folder / FILES_MANIFEST).is_file():
            return folder
    return None


def _check_not_in_artifact(path: Path, arg: str, *, replaced_whole: bool) -> None:
    """Refuse a path inside an artifact (its files are recorded: a write would change it under its
    version), or one that is a published artifact itself; an output replaced `whole` may be an
    earlier unpublished one (a command's own `--out`)."""
    import json

    root = artifact_root(path)
    if root is None:
        return
    record = json.loads((root / FILES_MANIFEST).read_text())
    if root == path.absolute() and replaced_whole and not record.get("published"):
        return
    where = "is" if root == path.absolute() else "lies inside"
    raise OutputRefused(f"{arg} {path} {where} the published {record.get('kind', 'artifact')} {root}: published "
                        "artifacts never change (their files are recorded under their version); write to another path")


def is_artifact(path, kind: str) -> bool:
    """Whether `path` is a directory published as `kind` (it holds the kind's marker file)."""
    if kind not in MARKERS:
        raise ValueError(f"unknown artifact kind {kind!r}; known: {', '.join(MARKERS)}")
    return (Path(path) / MARKERS[kind]).is_file()


def replaceable(path, kind: str, *, overwrite: bool = False, arg: str | None = None) -> None:
    """Raise OutputRefused unless the directory `path` may be replaced by a `kind` artifact: it does
    not exist, is empty, is already a `kind` artifact, or `overwrite` is set (a folder only)."""
    path = Path(path)
    label = f"{arg} {path}" if arg else str(path)
    if not path.exists() and not path.is_symlink():
        return
    if not path.is_dir() or path.is_symlink():
        raise OutputRefused(f"{label} is a file, not a folder; give a folder path for the {kind}")
    if overwrite or is_artifact(path, kind) or not any(path.iterdir()):
        return
    flag = " (pass --overwrite to replace it and everything in it)" if arg else ""
    raise OutputRefused(f"{label} exists and is not an earlier {kind} (no {MARKERS[kind]} in it); "
                        f"refusing to replace it{flag}")


def _overlap(out: Path, inp: Path, *, whole: bool) -> bool:
    """The output is the input or lies inside it; for an output replaced `whole`, also one that holds
    the input (replacing the folder would take the input with it)."""
    out, inp = out.resolve(), inp.resolve()
    return out == inp or inp in out.parents or (whole and out in inp.parents)


def _check_inputs(path: Path, arg: str, inputs: Iterable[tuple[str, object]], *, whole: bool = True) -> None:
    for name, value in inputs:
        if value is not None and _overlap(path, Path(value), whole=whole):
            raise OutputRefused(f"{arg} {path} would overwrite the input {name} {value}; choose another {arg}")


def _local(path, arg: str) -> Path:
    """`path` as a local Path; a URL is refused rather than read as a folder named `s3:`."""
    if "://" in str(path):
        raise OutputRefused(f"{arg} {path}: this command writes to a local path; object stores are taken by "
                            "`rhythm distill --out` and RHYTHM_ARTIFACTS")
    return Path(path)


def _check_parent(path: Path, arg: str) -> None:
    parent = path.absolute().parent
    if not parent.is_dir():
        raise OutputRefused(f"{arg} {path}: the folder {parent} does not exist (create it first)")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputRefused(f"{arg} {path}: no permission to write in {parent}")


def check_output_dir(path, kind: str, *, arg: str = "--out", inputs: Iterable[tuple[str, object]] = (),
                     overwrite: bool = False) -> Path:
    """A folder output that one artifact of `kind` will replace as a whole (`rhythm dataset --out`)."""
    path = _local(path, arg)
    _check_inputs(path, arg, inputs)
    _check_not_in_artifact(path, arg, replaced_whole=True)
    _check_parent(path, arg)
    replaceable(path, kind, overwrite=overwrite, arg=arg)
    return path


def check_output_root(path, *, arg: str = "--out", inputs: Iterable[tuple[str, object]] = ()) -> Path:
    """A folder the stages publish into (`<root>/<stage>/<version>/`): created if missing; an existing
    folder keeps everything that is not a stage folder of the same name, so it may hold the inputs."""
    path = _local(path, arg)
    _check_inputs(path, arg, inputs, whole=False)
    _check_not_in_artifact(path, arg, replaced_whole=False)
    _check_parent(path, arg)
    if path.exists() and not path.is_dir():
        raise OutputRefused(f"{arg} {path} is a file, not a folder; give a folder the results go under")
    if path.is_dir() and not os.access(path, os.W_OK | os.X_OK):
        raise OutputRefused(f"{arg} {path}: no permission to write in it")
    return path


def check_output_file(path, *, arg: str = "--out", inputs: Iterable[tuple[str, object]] = ()) -> Path:
    """A file output (`rhythm teacher --out t.jsonl`): not a folder, in a folder that exists. Whether
    an existing file may be extended is the command's own check (a teacher file's purpose)."""
    path = _local(path, arg)
    _check_inputs(path, arg, inputs)
    _check_not_in_artifact(path, arg, replaced_whole=False)
    if path.is_dir():
        raise OutputRefused(f"{arg} {path} is a folder; give a file path")
    _check_parent(path, arg)
    if path.exists() and not os.access(path, os.W_OK):
        raise OutputRefused(f"{arg} {path}: no permission to write it")
    return path


def check_input_file(path, *, arg: str) -> Path:
    """An input file that must exist and be a file."""
    path = Path(path)
    if path.is_dir():
        raise BadInput(f"{arg} {path} is a folder; give a file")
    if not path.is_file():
        raise BadInput(f"{arg} {path}: no such file")
    return path
