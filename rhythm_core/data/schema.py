"""The SFT dataset's layout: its split names, schema id and columns (`FEATURES` for the table format,
`CHAT_FEATURES` for the chat formats), and `build_info`, the build parameters a built dataset records."""

from __future__ import annotations

import json

import datasets

SPLITS = ("train", "validation")
DATASET_SCHEMA = "rhythm-sft-1"
FEATURES = datasets.Features(
    {
        "messages": [{"role": datasets.Value("string"), "content": datasets.Value("string")}],
        "condition": datasets.Value("string"),
        "seed": datasets.Value("int64"),
        "step": datasets.Value("int64"),
        "teacher": datasets.Value("string"),
        "true_belief": [datasets.Value("float64")],
        "env_state": datasets.Value("string"),
    }
)
# The chat format: one row per episode; per assistant turn its step and the env state at its prompt.
CHAT_FEATURES = datasets.Features(
    {
        "messages": FEATURES["messages"],
        "condition": datasets.Value("string"),
        "seed": datasets.Value("int64"),
        "steps": [datasets.Value("int64")],
        "teacher": datasets.Value("string"),
        "true_belief": [datasets.Value("float64")],
        "env_states": [datasets.Value("string")],
    }
)


def build_info(dataset_dict) -> dict:
    """The build parameters recorded by build_sft_dataset, or {} for a dataset built otherwise."""
    for split in dataset_dict:
        try:
            info = json.loads(dataset_dict[split].info.description or "")
        except (TypeError, ValueError):
            continue
        if isinstance(info, dict) and info.get("schema") == DATASET_SCHEMA:
            return info
    return {}
