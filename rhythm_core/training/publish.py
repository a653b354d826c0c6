"""Publishing a trained stage: its folder renamed under `<root>/<stage>/<version>/`, the version
naming the student as it plays, and a checkpoint pushed to a Hub model repo."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

from ..store import (
    ArtifactChanged,
    artifact_root,
    files_digest,
    is_artifact,
    publish_dir,
    rebase_paths,
    sha256_file,
    staging,
    verify_artifact,
    write_result,
)
from .models import LOAD_TIME_KEYS, CheckpointError, play_info

# Beside the weights and the record's PLAY_FIELDS, what decides how a published student plays: the
# files that load it. A LoRA adapter's adapter_config.json names its base model, rank, scaling and
# target modules; last, so a checkpoint without one keeps the version it had before it was added.
PLAY_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
              "adapter_config.json")
# Fields of the saved configs that name who wrote them or how they were loaded, not how the student plays:
# the transformers release (an operator's newer image saves the same student), and the tokenizer's load-time
# keywords (HF_HUB_OFFLINE's local_files_only, the cache, a token) that a save by any other code may carry.
NOT_THE_STUDENT = {"config.json": frozenset({"transformers_version"}),
                   "generation_config.json": frozenset({"transformers_version"}),
                   "tokenizer_config.json": LOAD_TIME_KEYS}


def train_and_publish(root, stage: str, train: Callable[[Path], None]) -> dict:
    """Run `train(staged_dir)` (which leaves result.json and model/ there) and publish the directory
    with `publish_checkpoint`; a failed run leaves nothing behind."""
    with staging(Path(root) / stage) as staged:
        train(staged)
        return publish_checkpoint(staged, root, stage)


def checkpoint_version(model_dir) -> str:
    """A saved student's version: its weights, the `PLAY_FILES` it has and its record's `PLAY_FIELDS`.
    A retrained student that plays the same has the same version; one whose tokenizer or record
    changed (a new decoding field, say) has another, even with the same weights."""
    model_dir = Path(model_dir)
    weights = sorted(model_dir.glob("*.safetensors"))
    if not weights:
        raise FileNotFoundError(f"{model_dir}: the training run saved no *.safetensors weights")
    digest = hashlib.sha256()
    for w in weights:
        digest.update(sha256_file(w).encode())
    for name in PLAY_FILES:
        if (model_dir / name).is_file():
            digest.update(f"{name}:{_play_file_sha256(model_dir / name)}".encode())
    if (model_dir / "rhythm_checkpoint.json").is_file():
        digest.update(json.dumps(play_info(model_dir), sort_keys=True).encode())
    return digest.hexdigest()[:16]


def _play_file_sha256(path: Path) -> str:
    """A play file's sha256; a config in `NOT_THE_STUDENT` is read as its JSON without those fields, in
    one layout (its indentation is the writer's too)."""
    dropped = NOT_THE_STUDENT.get(path.name)
    if dropped is None:
        return sha256_file(path)
    try:
        saved = json.loads(path.read_bytes())
    except ValueError as exc:
        raise CheckpointError(f"{path}: not a JSON object ({exc})") from exc
    if not isinstance(saved, dict):
        raise CheckpointError(f"{path}: not a JSON object")
    kept = {key: value for key, value in saved.items() if key not in dropped}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()


def _intact(folder: Path) -> bool:
    if not is_artifact(folder, "checkpoint") or artifact_root(folder) != folder.absolute():
        return False
    try:
        verify_artifact(folder)
    except ArtifactChanged:
        return False
    return True


def publish_checkpoint(staged, root, stage: str) -> dict:
    """Publish a trained stage's directory under <root>/<stage>/<version>; returns result.json with
    its paths rewritten to the published location. Where that version is already published and
    intact it stays as it is (a published artifact never changes under its version) and the new
    folder is dropped: the result is this run's figures, `kept_published` True, the files the first's."""
    staged = Path(staged)
    result = json.loads((staged / "result.json").read_text())
    version = checkpoint_version(staged / "model")
    final = Path(root) / stage / version
    result = rebase_paths(result, staged, final)
    if _intact(final):
        shutil.rmtree(staged)
        return {**result, "version": version, "path": str(final), "files_digest": files_digest(final),
                "kept_published": True}
    write_result(staged, result)  # its paths as published, before the files are recorded
    publish_dir(staged, final, kind="checkpoint", published=True)  # a damaged earlier copy is replaced
    return {**result, "version": version, "path": str(final), "files_digest": files_digest(final),
            "kept_published": False}


def push_checkpoint(model_dir, repo_id: str, *, api, private: bool = True) -> dict:
    """Upload a checkpoint directory to a Hub model repo; returns repo id, revision and URL."""
    api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
    commit = api.upload_folder(folder_path=str(model_dir), repo_id=repo_id, repo_type="model",
                               commit_message=f"rhythm checkpoint from {Path(model_dir).parent.name}")
    return {"repo_id": repo_id, "revision": commit.oid, "url": f"https://huggingface.co/{repo_id}"}
