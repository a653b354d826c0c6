"""The prompt dataset of `RhythmToolEnv` (rhythm_env.text.tool_env.env_prompt_dataset) published as an artifact,
which `rhythm env-dataset` writes."""

from __future__ import annotations

import json
from pathlib import Path

from ..store import MARKERS, atomic_write_text, publish_dir, staging


def save_env_dataset(dataset, out_dir, spec: dict, *, overwrite: bool = False) -> dict:
    """Write `dataset` (datasets.load_from_disk reads it) and `env_dataset.json` (`spec`: condition,
    seeds, purpose) to `out_dir` atomically; an existing `out_dir` is replaced only when it is an
    earlier env dataset, empty, or `overwrite` is set."""
    out_dir = Path(out_dir)
    record = {**spec, "rows": len(dataset)}
    with staging(out_dir.parent) as tmp:
        dataset.save_to_disk(str(tmp))
        atomic_write_text(tmp / MARKERS["env_dataset"], json.dumps(record, sort_keys=True, indent=2) + "\n")
        publish_dir(tmp, out_dir, kind="env_dataset", overwrite=overwrite)
    return {"path": str(out_dir), **record}
