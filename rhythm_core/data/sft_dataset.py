"""The SFT dataset: teacher trajectories -> a Hugging Face `DatasetDict` of chat examples.

One example per teacher decision (step) in the conversational format TRL's SFTTrainer reads:

    messages = [system: SYSTEM_PROMPT, user: the step's rendered prompt, assistant: the teacher's answer]

The assistant turn is the *canonical* answer (`protocol.format_answer` of the parsed action, belief
and reasoning), not the raw text: code fences, chatter around the JSON and number formatting vary
between teachers, and the student should learn one clean format. Steps whose answer could not be
parsed (the env took the safe fallback action) are dropped: the fallback is the env's choice, not
the teacher's, so training on it would teach the student to imitate a recovery rule rather than the
teacher's reasoning (and there is no valid teacher answer to put in the assistant turn anyway). The
episode's later steps are kept: their prompts show the fallback action in the history, which is the
state the teacher really decided from.

Extra columns, for later stages: `condition`, `seed`, `step`, `teacher` (id), `true_belief` (the
hidden profile's belief, from `profiles.sample_factors` and `spec.true_belief`: GRPO rewards score
beliefs against it) and `env_state` (JSON of a one-episode `EnvState` at the prompt, restorable with
`VectorRhythmEnv(condition).restore(EnvState.from_dict(json.loads(row["env_state"])))`: GRPO can
roll a sampled action forward from exactly the prompt's state).

Three prompt formats (`prompt_format`, recorded in the dataset's build info and card, and from
there in the checkpoint, so evaluation and GRPO prompt the student the way it was trained):

- "chat_labeled" (the default): one example per episode: the whole week as one conversation, a user
  turn per step with only the newest observation row and the state now, every number after its
  meter's name (`protocol.render_chat_turn`), the teacher's answer after each. With the loss on the
  assistant turns, one sequence supervises all 28 answers. Columns `steps` and `env_states` hold,
  per assistant turn, its step and the env state at its prompt. Episodes with a fallback step are
  left out (the conversation would have to show an answer the teacher did not give).
- "chat": the same without the meter names.
- "table": one example per decision, as above: the user turn re-renders the whole week so far.

`reasoning` chooses what the answer carries: "evidence" (the default): the increment a linear
read-out of this teacher's inference gives this step's anomaly, "social +0.01 morning +0.00 work
+0.05", and the belief is the running sum of those increments (teacher/evidence.py, fitted on the
training split's weeks against the belief each teacher stated last; its fit is in the build info and
the card). Each number is then an exact function of what the conversation shows, where the
teacher's own change depends on its whole history. The actions stay the teacher's. "none": an empty
reasoning string (belief and action only); "full": the teacher's own reasoning. Beliefs are written
with 2 decimals.

Train/validation is split by episode, never across one episode's steps, from a hash of (split seed,
condition, seed): an episode's split does not depend on which other episodes are in the file, so a
dataset built from a grown trajectory file keeps every old validation episode in validation.

Nothing here talks to the network except `push_to_hub`, through the `api` object it is given.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import datasets
import numpy as np
import yaml

from ..artifacts import atomic_write_text, publish_dir, staging
from ..env.conditions import EVAL_SEEDS, check_training_seeds
from ..env.profiles import sample_factors
from ..env.spec import BELIEF_DIMS, ENV_VERSION, STEPS_PER_EPISODE, true_belief
from ..protocol import (
    CHAT_FORMATS,
    DEFAULT_PROMPT_FORMAT,
    DEFAULT_REASONING,
    PROMPT_FORMATS,
    REASONING,
    SYSTEM_PROMPT,
    DatasetFormat,
    format_answer,
    render_conversation,
)
from ..teacher.evidence import EvidenceReadout, ReadoutFitError, fit_evidence_readout
from ..teacher.trajectories import replay, validate_record

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

_SECRET_KEY = re.compile(r"token|api_?key|secret|password|credential", re.IGNORECASE)
_HF_TOKEN = re.compile(r"^hf_[A-Za-z0-9]{20,}$")


# ---------------------------------------------------------------------------------------------
# building
def _split_key(split_seed: int, condition: str, seed: int) -> float:
    """A uniform number in [0, 1) that is a pure function of (split seed, condition, seed)."""
    digest = hashlib.sha256(f"rhythm-sft-split:{split_seed}:{condition}:{seed}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def assign_splits(episodes: Iterable[tuple[str, int]], validation_fraction: float, seed: int = 0) -> dict:
    """Map each (condition, seed) episode to "train" or "validation".

    An episode goes to validation when its hash key is below `validation_fraction`, so its split is
    independent of the other episodes. With >= 2 episodes at least one is in validation and at least
    one in train (the lowest / highest key moves when the hash rule leaves a split empty).
    """
    if not 0.0 < validation_fraction < 1.0:
        raise ValueError(f"validation_fraction must be in (0, 1), got {validation_fraction!r}")
    keys = {ep: _split_key(seed, *ep) for ep in sorted(set(episodes))}
    split = {ep: "validation" if k < validation_fraction else "train" for ep, k in keys.items()}
    if len(keys) >= 2:
        if "validation" not in split.values():
            split[min(keys, key=keys.get)] = "validation"
        if "train" not in split.values():
            split[max(keys, key=keys.get)] = "train"
    return split


def _replay_states(condition: str, records: list[dict], keep: list[list[bool]]) -> tuple[list, list]:
    """Replay all episodes of one condition in one vector env; return each kept step's env_state JSON
    and the observation at it (what the chat format renders), per episode and step.

    The recorded meters must match the replay (else the file is corrupt or from another env), so a
    restored state is exactly the state the teacher saw.
    """
    states: list[list[str | None]] = [[None] * STEPS_PER_EPISODE for _ in records]
    observations: list[list] = [[None] * STEPS_PER_EPISODE for _ in records]  # what the agent saw there

    def keep_states(t, env):
        rows = [i for i in range(len(records)) if keep[i][t]]
        if rows:
            snap = env.snapshot()
            for i in rows:
                states[i][t] = snap.episode(i).to_json()
                observations[i][t] = snap.observation(i)

    bad = replay(condition, records, keep_states)
    if bad:
        (i, t) = bad[0]
        raise ValueError(f"{condition} seed {records[i]['seed']}: recorded meters at step {t} do not match a replay "
                         f"of its actions in {ENV_VERSION}; {len(bad)} episode(s) differ")
    return states, observations


def _episode_answers(record: dict, reasoning: str, readout: EvidenceReadout | None, observations: list) -> list[str | None]:
    """Each step's canonical answer (None for a fallback step). Under "evidence" the reasoning is the
    read-out's increment for this step's anomaly and the belief its running sum; the action stays
    the teacher's."""
    if reasoning != "evidence":
        return [_answer(record, step, t, reasoning) for t, step in enumerate(record["steps"])]
    increments, beliefs = readout.chain(observations)
    answers = []
    for t, step in enumerate(record["steps"]):
        text = " ".join(f"{d} {v:+.2f}" for d, v in zip(BELIEF_DIMS, increments[t]))
        parsed = {**(step.get("parsed") or {}), "belief": dict(zip(BELIEF_DIMS, beliefs[t].tolist()))}
        answers.append(_answer(record, {**step, "parsed": parsed}, t, reasoning, text))
    return answers


def _answer(record: dict, step: dict, t: int, reasoning: str, evidence_text: str | None = None) -> str | None:
    """The canonical teacher answer of a step, or None for a fallback (invalid) step."""
    parsed = step.get("parsed") or {}
    if step.get("invalid") or not parsed.get("valid"):
        return None
    if parsed.get("action") != step.get("action") or step.get("action") != record["actions"][t]:
        raise ValueError(
            f"{record['condition']} seed {record['seed']} step {t}: parsed action {parsed.get('action')!r} is not "
            f"the action taken ({step.get('action')!r})"
        )
    text = {"full": parsed.get("reasoning") or "", "evidence": evidence_text or ""}.get(reasoning, "")
    return format_answer(parsed["action"], parsed.get("belief"), text)


def build_sft_dataset(
    records: list[dict],
    *,
    validation_fraction: float = 0.1,
    keep_seeds: set[int] | None = None,
    seed: int = 0,
    prompt_format: str = DEFAULT_PROMPT_FORMAT,
    reasoning: str = DEFAULT_REASONING,
) -> datasets.DatasetDict:
    """Teacher trajectory records -> DatasetDict {"train", "validation"}, one example per valid step.

    `keep_seeds` keeps only those episodes (seeds are unique across conditions); `seed` is the split
    seed. Rows are ordered by (condition, seed, step); trainers shuffle. Both splits always exist
    (validation is empty only with a single episode).
    """
    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"unknown prompt_format {prompt_format!r}; allowed: {', '.join(PROMPT_FORMATS)}")
    if reasoning not in REASONING:
        raise ValueError(f"unknown reasoning {reasoning!r}; allowed: {', '.join(REASONING)}")
    if keep_seeds is not None:
        keep_seeds = {int(s) for s in keep_seeds}
    chosen, seen = [], set()
    for n, record in enumerate(records):
        validate_record(record, "<records>", n + 1)
        key = (record["condition"], int(record["seed"]))
        if key in seen:
            raise ValueError(f"episode {key[0]} seed {key[1]} appears twice in the records")
        if record.get("purpose") == "evaluation":
            raise ValueError(f"episode {key[0]} seed {key[1]} is the teacher's play on an evaluation seed "
                             "(purpose 'evaluation'); it never enters training data")
        try:  # evaluation seeds never become training data, whatever path built the records
            check_training_seeds(key[0], [key[1]])
        except ValueError as err:
            raise ValueError(f"records[{n}] (episode {key[0]} seed {key[1]}): {err}") from None
        seen.add(key)
        if keep_seeds is None or key[1] in keep_seeds:
            chosen.append(record)
    if not chosen:
        raise ValueError("no episodes to build a dataset from" + (" after the keep_seeds filter" if records else ""))
    chosen.sort(key=lambda r: (r["condition"], int(r["seed"])))
    split_of = assign_splits([(r["condition"], int(r["seed"])) for r in chosen], validation_fraction, seed)

    features = CHAT_FEATURES if prompt_format in CHAT_FORMATS else FEATURES
    columns = {split: {name: [] for name in features} for split in SPLITS}
    dropped_episodes = 0
    replayed = {}  # condition -> (its records, env states, observations), every step
    for condition in sorted({r["condition"] for r in chosen}):
        group = [r for r in chosen if r["condition"] == condition]
        for r in group:
            for t, step in enumerate(r["steps"]):
                if step.get("step", t) != t:
                    raise ValueError(f"{condition} seed {r['seed']}: steps[{t}] has step {step.get('step')!r}")
        replayed[condition] = (group, *_replay_states(condition, group, [[True] * STEPS_PER_EPISODE for _ in group]))
    readout = None
    if reasoning == "evidence":  # fitted on the training split's weeks, measured on the validation split's
        weeks = {split: [(r, obs) for group, _, observations in replayed.values() for r, obs in zip(group, observations)
                         if split_of[(r["condition"], int(r["seed"]))] == split] for split in SPLITS}
        try:
            readout = fit_evidence_readout(weeks["train"], weeks["validation"])
        except ReadoutFitError as err:
            raise ValueError(f"reasoning 'evidence': {err}") from None
    for condition, (group, states, observations) in replayed.items():
        answers = [_episode_answers(r, reasoning, readout, history) for r, history in zip(group, observations)]
        beliefs = true_belief(sample_factors(condition, [int(r["seed"]) for r in group]))
        for r, ans, st, history, belief in zip(group, answers, states, observations, beliefs):
            out = columns[split_of[(condition, int(r["seed"]))]]
            row = {"condition": condition, "seed": int(r["seed"]), "teacher": str(r["teacher"]["id"]),
                   "true_belief": [float(b) for b in belief]}
            if prompt_format in CHAT_FORMATS:
                if any(a is None for a in ans):
                    dropped_episodes += 1  # see the module docstring
                    continue
                row.update(messages=render_conversation(history, ans[:-1], variant="full", prompt_format=prompt_format) +
                           [{"role": "assistant", "content": ans[-1]}],
                           steps=list(range(STEPS_PER_EPISODE)), env_states=st)
                for name, value in row.items():
                    out[name].append(value)
                continue
            for t, answer in enumerate(ans):
                if answer is None:
                    continue  # a fallback step: no teacher answer to learn from (see the module docstring)
                step_row = {**row, "step": t, "env_state": st[t], "messages": [
                    {"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": r["steps"][t]["prompt"]},
                    {"role": "assistant", "content": answer},
                ]}
                for name, value in step_row.items():
                    out[name].append(value)
    if not any(columns[s]["seed"] for s in SPLITS):
        raise ValueError("every step of the chosen episodes fell back (invalid answers): no SFT examples" if
                         prompt_format == "table" else "every chosen episode has a fallback step: no chat examples")
    build = {  # kept in each split's DatasetInfo.description (not part of the content hash)
        "schema": DATASET_SCHEMA,
        "split_seed": seed,
        "validation_fraction": validation_fraction,
        "episodes_in_records": len(records),
        "episodes_kept": len(chosen),
        "keep_seeds_filter": keep_seeds is not None,
        "prompt_format": prompt_format,
        "reasoning": reasoning,
        **({"evidence_readout": readout.to_dict()} if readout is not None else {}),
        "episodes_dropped_for_fallback_steps": dropped_episodes,
    }
    info = datasets.DatasetInfo(description=json.dumps(build, sort_keys=True), features=features)
    return datasets.DatasetDict(
        {split: datasets.Dataset.from_dict(columns[split], features=features, info=info.copy()) for split in SPLITS}
    )


def dataset_format(dataset_dict) -> DatasetFormat:
    """The format a dataset was built with, from its build info."""
    return DatasetFormat.from_info(_build_info(dataset_dict))


def evidence_readout(dataset_dict) -> EvidenceReadout | None:
    """The evidence read-out a dataset's answers were written with (None unless reasoning 'evidence')."""
    data = _build_info(dataset_dict).get("evidence_readout")
    return EvidenceReadout.from_dict(data) if data else None


def _build_info(dataset_dict) -> dict:
    """The build parameters recorded by build_sft_dataset, or {} for a dataset built otherwise."""
    for split in dataset_dict:
        try:
            info = json.loads(dataset_dict[split].info.description or "")
        except (TypeError, ValueError):
            continue
        if isinstance(info, dict) and info.get("schema") == DATASET_SCHEMA:
            return info
    return {}


# ---------------------------------------------------------------------------------------------
# checks and summaries
def _episode_keys(ds: datasets.Dataset) -> list[tuple[str, int]]:
    if len(ds) == 0:
        return []
    return sorted({(c, int(s)) for c, s in zip(ds["condition"], ds["seed"])})


def check_no_eval_seeds(dataset_dict) -> list[tuple[str, int]]:
    """(condition, seed) pairs of any split that are evaluation seeds; [] means the data is clean."""
    return _eval_hits(_episodes(dataset_dict))


def _episodes(dataset_dict) -> dict[str, list[tuple[str, int]]]:
    return {split: _episode_keys(dataset_dict[split]) for split in dataset_dict}


def _eval_hits(episodes: dict[str, list[tuple[str, int]]]) -> list[tuple[str, int]]:
    return sorted({(c, s) for keys in episodes.values() for c, s in keys if s in EVAL_SEEDS.get(c, ())})


def content_hash(dataset_dict) -> str:
    """sha256 of the content: per split (sorted by name), the sorted digests of each row's canonical
    JSON (sorted keys, exact floats). Independent of row order, dict order, time and file layout."""
    total = hashlib.sha256()
    for split in sorted(dataset_dict):
        ds = dataset_dict[split]
        digests = sorted(
            hashlib.sha256(
                json.dumps(row, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
            ).digest()
            for row in ds
        )
        total.update(f"split:{split}:{len(digests)}\n".encode())
        for d in digests:
            total.update(d)
    return total.hexdigest()


def dataset_summary(dataset_dict, episodes: dict | None = None) -> dict:
    """Examples and episodes per split (`episodes`: the splits' episode keys, if already read)."""
    episodes = episodes if episodes is not None else _episodes(dataset_dict)
    return {
        "examples": {split: len(dataset_dict[split]) for split in sorted(dataset_dict)},
        "episodes": {split: len(episodes[split]) for split in sorted(dataset_dict)},
    }


def seed_ranges(seeds: Iterable[int]) -> str:
    """[1000, 1001, 1002, 1005] -> "1000-1002, 1005"."""
    seeds = sorted(set(int(s) for s in seeds))
    parts, i = [], 0
    while i < len(seeds):
        j = i
        while j + 1 < len(seeds) and seeds[j + 1] == seeds[j] + 1:
            j += 1
        parts.append(str(seeds[i]) if i == j else f"{seeds[i]}-{seeds[j]}")
        i = j + 1
    return ", ".join(parts) if parts else "none"


def _json_default(value):
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


def _describe_teacher(teacher) -> str:
    if isinstance(teacher, dict):
        return ", ".join(f"{k}={teacher[k]}" for k in sorted(teacher))
    return str(teacher)


def _card(dataset_dict, provenance: dict, digest: str, episodes: dict[str, list[tuple[str, int]]]) -> str:
    _check_no_secrets(provenance)
    provenance_json = json.dumps(provenance, sort_keys=True, indent=2, default=_json_default, allow_nan=False)
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

    build = _build_info(dataset_dict)
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
    eval_hits = _eval_hits(episodes)
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
                   "(`rhythm_core.env.EnvState.to_dict`), to restore the env and roll a sampled action forward."]
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
                   "- `env_state`: JSON of the env state at the prompt (`rhythm_core.env.EnvState.to_dict`), to restore "
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
        f"| evaluation seeds present | {'none' if not eval_hits else ', '.join(f'{c} {s}' for c, s in eval_hits)} |",
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

    return [f"| beliefs | the running sum of a linear read-out of this teacher's inference "
            f"(`rhythm_core.teacher.evidence`), fitted on the {fit.get('fit_weeks', '?')} training-split weeks' "
            "last stated beliefs; the actions are the teacher's |",
            f"| read-out fit, MAE vs the teacher's own last belief | held-out (validation weeks): "
            f"{quality(fit.get('held_out', {}))}; in sample: {quality(fit.get('in_sample', {}))} |",
            *([f"| read-out warning | {fit['warning']} |"] if fit.get("warning") else [])]


def dataset_card(dataset_dict, provenance: dict) -> str:
    """README.md for the Hub: YAML front matter (license, task, tags, configs, dataset_info) and the
    provenance (teacher, grader, filter, seeds, counts, env version, source file hash). Deterministic."""
    return _card(dataset_dict, provenance, content_hash(dataset_dict), _episodes(dataset_dict))


# ---------------------------------------------------------------------------------------------
# saving and publishing
def save_sft_dataset(dataset_dict, out_dir, provenance: dict, *, digest: str | None = None) -> dict:
    """Write the dataset (save_to_disk), README.md and provenance.json to `out_dir`, atomically: all
    of it goes to a staging directory beside `out_dir`, which replaces `out_dir` only when complete.
    `digest`: the dataset's `content_hash`, if the caller already computed it."""
    out_dir = Path(out_dir)
    digest = digest or content_hash(dataset_dict)
    episodes = _episodes(dataset_dict)
    summary = {**dataset_summary(dataset_dict, episodes), "content_hash": digest}
    card = _card(dataset_dict, provenance, digest, episodes)  # also refuses secrets in the provenance
    record = {**provenance, "sft_dataset": {"schema": DATASET_SCHEMA, **summary}}
    provenance_json = json.dumps(record, sort_keys=True, indent=2, default=_json_default, allow_nan=False) + "\n"
    with staging(out_dir.parent) as tmp:
        dataset_dict.save_to_disk(str(tmp))
        atomic_write_text(tmp / "README.md", card)
        atomic_write_text(tmp / "provenance.json", provenance_json)
        publish_dir(tmp, out_dir)
    return {"path": str(out_dir), **summary}


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


__all__ = [
    "dataset_format",
    "FEATURES",
    "SPLITS",
    "assign_splits",
    "build_sft_dataset",
    "check_no_eval_seeds",
    "content_hash",
    "dataset_card",
    "dataset_summary",
    "push_to_hub",
    "save_sft_dataset",
    "seed_ranges",
]
