"""Pushing a saved dataset to a Hugging Face Hub dataset repo (parquet + README.md), through the `api`
object it is given; the only network access of `data`."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import datasets


def _token_of(api) -> str | None:
    token = getattr(api, "token", None)
    return token if isinstance(token, str) and token else None


def push_to_hub(
    out_dir,
    repo_id: str,
    *,
    api,
    private: bool = True,
    revision: str | None = None,
    commit_message: str | None = None,
) -> dict:
    """Push a dataset saved by `save_sft_dataset` to a Hub dataset repo as parquet + README.md.

    `api` is an `huggingface_hub.HfApi` (or compatible) that holds the token; the token is never a
    parameter here and never written. Layout: data/{split}-00000-of-00001.parquet (empty splits are
    skipped: the Hub cannot load an empty parquet split), README.md, provenance.json; older data/
    files in the repo are deleted in the same commit. A plain branch name as `revision` is created if
    missing. `private` applies when the repo is created; an existing repo keeps its visibility.
    Returns {"repo_id", "revision" (commit oid), "url", "commit_url", "files"}.
    """
    out_dir = Path(out_dir)
    if not (out_dir / "README.md").is_file():
        raise FileNotFoundError(f"{out_dir}: no README.md; save the dataset with save_sft_dataset first")
    dataset_dict = datasets.load_from_disk(str(out_dir))
    if not isinstance(dataset_dict, datasets.DatasetDict):
        raise ValueError(f"{out_dir}: expected a saved DatasetDict")
    if commit_message is None:
        digest = "unknown"
        if (out_dir / "provenance.json").is_file():
            saved = json.loads((out_dir / "provenance.json").read_text(encoding="utf-8"))
            digest = saved.get("sft_dataset", {}).get("content_hash", "unknown")
        commit_message = f"Upload RhythmEnv SFT dataset (content {digest[:12]})"

    token = _token_of(api)
    repo_url = api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
    if revision is not None and revision != "main" and not revision.startswith("refs/"):
        api.create_branch(repo_id, branch=revision, repo_type="dataset", exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rhythm-sft-push-") as folder:
        folder = Path(folder)
        (folder / "data").mkdir()
        for split in sorted(dataset_dict):
            if len(dataset_dict[split]):
                dataset_dict[split].to_parquet(str(folder / "data" / f"{split}-00000-of-00001.parquet"))
        shutil.copyfile(out_dir / "README.md", folder / "README.md")
        if (out_dir / "provenance.json").is_file():
            shutil.copyfile(out_dir / "provenance.json", folder / "provenance.json")
        files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
        if token is not None:  # parquet is compressed: check the rows themselves, then every file's bytes
            for split in sorted(dataset_dict):
                for batch in dataset_dict[split].iter(batch_size=1024):
                    if token in json.dumps(batch, ensure_ascii=False):
                        raise RuntimeError(f"refusing to upload split {split}: its data contains the Hub token")
            for name in files:
                if token.encode() in (folder / name).read_bytes():
                    raise RuntimeError(f"refusing to upload {name}: it contains the Hub token")
        commit = api.upload_folder(
            folder_path=str(folder),
            repo_id=repo_id,
            repo_type="dataset",
            commit_message=commit_message,
            revision=revision,
            delete_patterns=["data/*"],
        )
    url = getattr(repo_url, "url", None) or (str(repo_url) if repo_url else f"https://huggingface.co/datasets/{repo_id}")
    result = {
        "repo_id": repo_id,
        "revision": commit.oid,
        "url": str(url),
        "commit_url": str(getattr(commit, "commit_url", "") or ""),
        "files": files,
    }
    if token is not None and token in json.dumps(result):
        raise RuntimeError("the push result contains the Hub token; refusing to return it")
    return result
