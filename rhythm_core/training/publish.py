"""Publishing a trained stage: its folder renamed under `<root>/<stage>/<weights hash>/`, and
a checkpoint pushed to a Hub model repo."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from ..artifacts import files_digest, publish_dir, rebase_paths, sha256_file, staging, write_result


def train_and_publish(root, stage: str, train: Callable[[Path], None]) -> dict:
    """Run `train(staged_dir)` (which leaves result.json and model/ there) and publish the directory
    with `publish_checkpoint`; a failed run leaves nothing behind."""
    with staging(Path(root) / stage) as staged:
        train(staged)
        return publish_checkpoint(staged, root, stage)


def publish_checkpoint(staged, root, stage: str) -> dict:
    """Publish a trained stage's directory under <root>/<stage>/<weights hash>; returns result.json
    with its paths rewritten to the published location."""
    staged = Path(staged)
    result = json.loads((staged / "result.json").read_text())
    weights = sorted((staged / "model").glob("*.safetensors"))
    if not weights:
        raise FileNotFoundError(f"{staged / 'model'}: the training run saved no *.safetensors weights")
    digest = hashlib.sha256()
    for w in weights:
        digest.update(sha256_file(w).encode())
    version = digest.hexdigest()[:16]
    final = Path(root) / stage / version
    result = rebase_paths(result, staged, final)
    write_result(staged, result)  # its paths as published, before the files are recorded
    publish_dir(staged, final, kind="checkpoint", published=True)
    return {**result, "version": version, "path": str(final), "files_digest": files_digest(final)}


def push_checkpoint(model_dir, repo_id: str, *, api, private: bool = True) -> dict:
    """Upload a checkpoint directory to a Hub model repo; returns repo id, revision and URL."""
    api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
    commit = api.upload_folder(folder_path=str(model_dir), repo_id=repo_id, repo_type="model",
                               commit_message=f"rhythm checkpoint from {Path(model_dir).parent.name}")
    return {"repo_id": repo_id, "revision": commit.oid, "url": f"https://huggingface.co/{repo_id}"}
