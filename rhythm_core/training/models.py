"""Loading base models and checkpoints: the offline tiny model or any causal LM (path or Hub id)."""

from __future__ import annotations

import json
from pathlib import Path

from rhythm_env.protocol import UNRECORDED_PROMPT_VARIANT

from ..errors import UserError

TINY = "tiny"


def device_name() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class CheckpointError(UserError, ValueError):
    """A checkpoint path or id that cannot be loaded; the message names it and says why."""


def _is_checkpoint(path: Path) -> bool:
    return (path / "config.json").exists() or (path / "adapter_config.json").exists()


def resolve_model_dir(path) -> Path:
    """A checkpoint directory, or a published stage folder holding model/ (CheckpointError otherwise)."""
    p = Path(path)
    for candidate in (p, p / "model"):
        if _is_checkpoint(candidate):
            return candidate
    raise CheckpointError(f"{p}: not a model checkpoint (no config.json or adapter_config.json here or in {p / 'model'})")


def weights_dtype(*, cuda: bool, bf16: bool, full_parameters: bool):
    """The dtype a model's weights are loaded in: bf16 on a CUDA GPU that has it, except for
    full-parameter training, which keeps fp32 master weights there and computes in bf16 under the
    trainer's autocast (pure bf16 updates lose the small steps of a model trained from scratch);
    fp32 on the CPU. LoRA keeps its base in bf16; PEFT holds the adapters in fp32."""
    import torch

    return torch.bfloat16 if cuda and bf16 and not full_parameters else torch.float32


# What `from_pretrained` writes into a tokenizer's saved config about how it was loaded (HF_HUB_OFFLINE turns
# on local_files_only; whether the source was a folder; where the cache was; a token), never how it plays.
LOAD_TIME_KEYS = frozenset({"local_files_only", "is_local", "cache_dir", "token", "use_auth_token", "revision",
                            "trust_remote_code", "force_download", "proxies", "subfolder", "_commit_hash",
                            "name_or_path", "_from_auto"})


def save_tokenizer(tokenizer, directory) -> None:
    """`tokenizer.save_pretrained(directory)` with `LOAD_TIME_KEYS` left out of tokenizer_config.json, so the
    saved files are the same whatever the environment the tokenizer was loaded in (offline mode, cache, token)."""
    tokenizer.save_pretrained(str(directory))
    path = Path(directory) / "tokenizer_config.json"
    if not path.is_file():
        return
    saved = json.loads(path.read_text(encoding="utf-8"))
    kept = {key: value for key, value in saved.items() if key not in LOAD_TIME_KEYS}
    if kept != saved:  # transformers' own layout
        path.write_text(json.dumps(kept, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def load_model_and_tokenizer(path_or_id: str, *, for_training: bool = False, full_parameters: bool = False):
    """A causal LM and its tokenizer (left padding, pad token set), on CUDA when available, in the
    dtype of `weights_dtype` (`full_parameters`: every weight will be trained). Raises
    CheckpointError naming the path when it is missing or corrupt."""
    try:
        return _load(path_or_id, for_training, full_parameters)
    except CheckpointError:
        raise
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise CheckpointError(f"{path_or_id}: cannot load the model checkpoint: {type(exc).__name__}: {exc}") from exc


# Set (to 1) where no process that imported Dagster may load a model: the lineage test through the
# dagster CLI sets it, so a step that loads a student in the Dagster process fails instead of passing.
NO_MODEL_IN_DAGSTER = "RHYTHM_NO_MODEL_IN_DAGSTER"


def _load(path_or_id: str, for_training: bool, full_parameters: bool):
    import os
    import sys

    if os.environ.get(NO_MODEL_IN_DAGSTER) == "1" and "dagster" in sys.modules:
        raise RuntimeError(f"{path_or_id}: a model is being loaded in a process that imported Dagster "
                           f"({NO_MODEL_IN_DAGSTER}=1): models run on the compute resource")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path_or_id)
    if path.exists() and not _is_checkpoint(path):
        raise CheckpointError(f"{path}: not a model checkpoint (no config.json or adapter_config.json)")
    cuda = torch.cuda.is_available()
    dtype = weights_dtype(cuda=cuda, bf16=cuda and torch.cuda.is_bf16_supported(),
                          full_parameters=for_training and full_parameters)
    if path.exists() and (path / "adapter_config.json").exists():
        from peft import AutoPeftModelForCausalLM

        model = AutoPeftModelForCausalLM.from_pretrained(str(path), dtype=dtype, is_trainable=for_training)
        if not for_training:
            model = model.merge_and_unload()
    else:
        model = AutoModelForCausalLM.from_pretrained(str(path_or_id), dtype=dtype)
    tokenizer = AutoTokenizer.from_pretrained(str(path_or_id))
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if cuda:
        model = model.to("cuda")
    return model, tokenizer


# The fields of a checkpoint's record that decide how it plays: all a player reads (`play_info`), and
# what its version names beside its files (publish.checkpoint_version).
PLAY_FIELDS = ("max_answer_tokens", "prompt_format", "prompt_variant", "readout_form", "reasoning")


def checkpoint_info(path) -> dict:
    info = Path(path) / "rhythm_checkpoint.json"
    return json.loads(info.read_text()) if info.exists() else {}


def play_info(path) -> dict:
    """The `PLAY_FIELDS` of a checkpoint's record (None where it has none)."""
    info = checkpoint_info(path)
    return {k: info.get(k) for k in PLAY_FIELDS}


def answer_token_budget(info: dict) -> int | None:
    """The new tokens an answer of a checkpoint gets: 1.5x the longest teacher answer it was trained
    on (room for a longer answer, a cap on a runaway one); None for a record that names none."""
    return int(1.5 * info["max_answer_tokens"]) if info.get("max_answer_tokens") else None


def prompt_variant(info: dict) -> str:
    """The system prompt's variant a checkpoint's record (`checkpoint_info` or `play_info`) names;
    UNRECORDED_PROMPT_VARIANT ("full") for a record that names none (written before variants were recorded)."""
    return info.get("prompt_variant") or UNRECORDED_PROMPT_VARIANT
