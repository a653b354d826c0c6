"""The dataset card (README.md for the Hub): YAML front matter, provenance, splits and columns; and the
provenance's JSON encoding and its refusal of secrets."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import yaml

from rhythm_env.protocol import CHAT_FORMATS, DatasetFormat
from rhythm_env.sim.spec import ENV_VERSION, STEPS_PER_EPISODE

from .schema import SPLITS, build_info
from .summary import content_hash, dataset_summary, episodes_by_split, eval_seed_hits, seed_ranges, tuning_seed_hits

_SECRET_KEY = re.compile(r"token|api_?key|secret|password|credential", re.IGNORECASE)
_HF_TOKEN = re.compile(r"^hf_[A-Za-z0-9]{20,}$")


def json_default(value):
    """The `json.dumps` default for provenance: sets sorted, paths as text, numpy values as Python ones."""
    if isinstance(value, set | frozenset):
        return sorted(value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"provenance value of type {type(value).__name__} is not JSON-serializable")


def _check_no_secrets(value, where: str = "provenance") -> None:
    """Refuse provenance that carries a secret-looking key or an HF token value."""
    if isinstance(value, dict):
        for k, v in value.items():
            if _SECRET_KEY.search(str(k)) and v not in (None, "", False):
                raise ValueError(f"{where}.{k}: provenance must not carry secrets (tokens, API keys)")
            _check_no_secrets(v, f"{where}.{k}")
    elif isinstance(value, list | tuple | set | frozenset):
        for n, v in enumerate(value):
            _check_no_secrets(v, f"{where}[{n}]")
    elif isinstance(value, str) and _HF_TOKEN.match(value):
        raise ValueError(f"{where}: looks like a Hugging Face token; provenance must not carry secrets")


def _size_category(n: int) -> str:
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < limit:
            return name
    return "1M<n<10M"


def _cell(value) -> str:
    """A value as one markdown table cell (no line breaks, pipes escaped)."""
    return " ".join(str(value).split()).replace("|", "\\|")


def _episodes_text(hits: list[tuple[str, int]]) -> str:
    """(condition, seed) pairs as a card cell: "continuous 5, continuous 9501", or "none"."""
    return ", ".join(f"{c} {s}" for c, s in hits) or "none"


def _describe_teacher(teacher) -> str:
    if isinstance(teacher, dict):
        return ", ".join(f"{k}={teacher[k]}" for k in sorted(teacher))
    return str(teacher)


def render_card(dataset_dict, provenance: dict, digest: str, episodes: dict[str, list[tuple[str, int]]]) -> str:
    """`dataset_card` with the content hash and the splits' episodes already read."""
    _check_no_secrets(provenance)
    provenance_json = json.dumps(provenance, sort_keys=True, indent=2, default=json_default, allow_nan=False)
    splits = sorted(dataset_dict, key=lambda s: (SPLITS.index(s) if s in SPLITS else len(SPLITS), s))
    summary = dataset_summary(dataset_dict, episodes)
    nonempty = [s for s in splits if len(dataset_dict[s])]
    total = sum(summary["examples"].values())
    teachers = sorted({t for s in nonempty for t in set(dataset_dict[s]["teacher"])})
    features = next(iter(dataset_dict.values())).features

    meta = {
        "license": provenance.get("license", "unknown"),
        "language": ["en"],
        "pretty_name": "RhythmEnv teacher SFT data",
        "task_categories": ["text-generation"],
        "tags": ["rhythm-env", "sft", "distillation", "synthetic", "conversational", "reinforcement-learning"],
        "size_categories": [_size_category(total)],
        "configs": [{
            "config_name": "default",
            "data_files": [{"split": s, "path": f"data/{s}-*"} for s in nonempty],
        }],
        "dataset_info": {
            "config_name": "default",
            "features": features._to_yaml_list(),
            "splits": [{"name": s, "num_examples": summary["examples"][s]} for s in nonempty],
        },
    }
    front = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, default_flow_style=False)

    build = build_info(dataset_dict)
    teacher = _describe_teacher(provenance["teacher"]) if "teacher" in provenance else ", ".join(teachers)
    if "filter" in provenance:
        filter_text = str(provenance["filter"])
    elif build.get("keep_seeds_filter"):
        filter_text = f"keep_seeds: {build['episodes_kept']} of {build['episodes_in_records']} episodes kept"
    else:
        filter_text = "none"
    split_seed = provenance.get("split_seed", build.get("split_seed", "unknown"))
    fraction = provenance.get("validation_fraction", build.get("validation_fraction", "unknown"))
    source = provenance.get("source_file", "unknown")
    source_hash = provenance.get("source_sha256", "unknown")
    eval_hits, tuning_hits = eval_seed_hits(episodes), tuning_seed_hits(episodes)
    chat = build.get("prompt_format") in CHAT_FORMATS
    if chat:
        layout = ("One example per episode: the whole week as one conversation (system prompt; per step a user turn "
                  "with the newest observation row and the state now, then the teacher's canonical JSON answer), "
                  "every assistant turn supervised. Episodes with a step where the teacher's answer was unusable "
                  f"are left out ({build.get('episodes_dropped_for_fallback_steps', 0)} here).")
        columns = ["- `messages`: the episode's conversation (TRL conversational format).",
                   "- `condition`, `seed`: the episode; `steps`: the step (0-27) of each assistant turn.",
                   "- `teacher`: the teacher id.",
                   "- `true_belief`: the hidden profile's true belief (social, morning, work), for reward computation. "
                   "Never show it to the model.",
                   "- `env_states`: per assistant turn, JSON of the env state at its prompt "
                   "(`rhythm_env.sim.EnvState.to_dict`), to restore the env and roll a sampled action forward."]
    else:
        layout = ("One example per teacher decision: the system prompt, the rendered week so far "
                  "(user), and the teacher's canonical JSON answer (assistant: reasoning, belief about the hidden profile, "
                  "action). Steps where the teacher's answer was unusable and the env fell back to a safe action are left "
                  "out: that action was not the teacher's.")
        columns = ["- `messages`: system / user / assistant chat turns (TRL conversational format).",
                   "- `condition`, `seed`, `step`: the episode and the decision (0-27).",
                   "- `teacher`: the teacher id.",
                   "- `true_belief`: the hidden profile's true belief (social, morning, work), for reward computation. "
                   "Never show it to the model.",
                   "- `env_state`: JSON of the env state at the prompt (`rhythm_env.sim.EnvState.to_dict`), to restore "
                   "the env and roll a sampled action forward."]
    lines = [
        "---", front.rstrip("\n"), "---", "",
        "# RhythmEnv teacher SFT data", "",
        "Chat examples distilled from a teacher playing RhythmEnv (one simulated week, 28 decisions, hidden "
        "personality profile). " + layout, "",
        "## Provenance", "",
        "| field | value |", "|---|---|",
        f"| teacher | {_cell(teacher)} |",
        f"| teacher ids in data | {', '.join(teachers) or 'none'} |",
        f"| grader | {_cell(provenance.get('grader', 'unknown'))} |",
        f"| episode filter | {_cell(filter_text)} |",
        f"| prompt format | {DatasetFormat.from_info(build).prompt_format}; reasoning {DatasetFormat.from_info(build).reasoning} |",
        *_readout_rows(build.get("evidence_readout")),
        f"| env version | {_cell(provenance.get('env_version', ENV_VERSION))} |",
        f"| source trajectories | {_cell(source)} |",
        f"| source sha256 | {_cell(source_hash)} |",
        f"| split | by episode, hash of (split seed, condition, seed); split seed {_cell(split_seed)}, "
        f"validation fraction {_cell(fraction)} |",
        f"| evaluation seeds present | {_episodes_text(eval_hits)} |",
        f"| tuning seeds present | {_episodes_text(tuning_hits)} |",
        f"| content sha256 | {digest} |", "",
        "## Splits", "",
        "| split | episodes | examples | fallback steps dropped | seeds by condition |", "|---|---|---|---|---|",
    ]
    for s in splits:
        by_condition: dict[str, list[int]] = {}
        for c, seed in episodes[s]:
            by_condition.setdefault(c, []).append(seed)
        seeds_text = "; ".join(f"{c} ({len(v)}): {seed_ranges(v)}" for c, v in sorted(by_condition.items())) or "none"
        dropped = len(episodes[s]) * STEPS_PER_EPISODE - summary["examples"][s] if not chat else "–"
        lines.append(f"| {s} | {len(episodes[s])} | {summary['examples'][s]} | {dropped} | {seeds_text} |")
    conditions = Counter(c for s in splits for c, _ in episodes[s])
    lines += [
        "", "Episodes per condition: " + (", ".join(f"{c} {n}" for c, n in sorted(conditions.items())) or "none") + ".",
        "", "## Columns", "", *columns,
        "", "## Full provenance", "", "```json", provenance_json, "```", "",
    ]
    return "\n".join(lines)


def _readout_rows(readout: dict | None) -> list[str]:
    """Card rows saying what an "evidence" dataset's beliefs are and how well the read-out fits."""
    if not readout:
        return []
    fit = readout.get("fit", {})

    def quality(block: dict) -> str:
        return "; ".join(f"{c} {q['mae_vs_teacher']:.3f} (a constant {q['constant_mae_vs_teacher']:.3f}, "
                         f"{q['weeks']} weeks)" for c, q in sorted(block.items())) or "no weeks"

    if readout.get("form") == "innovation":
        what = (f"the running sum of an innovation read-out of this teacher's inference (each increment a linear "
                f"function of the shown anomaly, the previous belief and the step; `rhythm_core.teacher.evidence`), "
                f"fitted on the {fit.get('fit_steps', '?')} belief changes of the {fit.get('fit_weeks', '?')} "
                "training-split weeks")
    else:
        what = (f"the running sum of a linear read-out of this teacher's inference (`rhythm_core.teacher.evidence`), "
                f"fitted on the {fit.get('fit_weeks', '?')} training-split weeks' last stated beliefs")
    return [f"| beliefs | {what}; the actions are the teacher's |",
            f"| read-out fit, MAE vs the teacher's own last belief | held-out (validation weeks): "
            f"{quality(fit.get('held_out', {}))}; in sample: {quality(fit.get('in_sample', {}))} |",
            *([f"| read-out warning | {fit['warning']} |"] if fit.get("warning") else [])]


def dataset_card(dataset_dict, provenance: dict) -> str:
    """README.md for the Hub: YAML front matter (license, task, tags, configs, dataset_info) and the
    provenance (teacher, grader, filter, seeds, counts, env version, source file hash). Deterministic."""
    return render_card(dataset_dict, provenance, content_hash(dataset_dict), episodes_by_split(dataset_dict))
