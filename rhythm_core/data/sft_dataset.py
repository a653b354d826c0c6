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
teacher's own change depends on its whole history. `readout_form` chooses the chain's form: "linear"
(the default) or "innovation" (the increment also reads the previous belief and the step; the long
preset's). The actions stay the teacher's. "none": an empty
reasoning string (belief and action only); "full": the teacher's own reasoning. Beliefs are written
with 2 decimals.

Train/validation is split by episode, never across one episode's steps, from a hash of (split seed,
condition, seed): an episode's split does not depend on which other episodes are in the file, so a
dataset built from a grown trajectory file keeps every old validation episode in validation.

Modules: `schema` (splits, columns, build info), `examples` (replay and rows), `answers` (the
assistant answers), `summary` (content hash, counts, the evaluation-seed check), `card` (the dataset
card) and `hub` (`push_to_hub`, the only network access, through the `api` object it is given).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

import datasets

from rhythm_env.protocol import (
    CHAT_FORMATS,
    DEFAULT_PROMPT_FORMAT,
    DEFAULT_READOUT_FORM,
    DEFAULT_REASONING,
    PROMPT_FORMATS,
    READOUT_FORMS,
    REASONING,
    DatasetFormat,
)
from rhythm_env.sim.conditions import check_training_seeds
from rhythm_env.sim.profiles import sample_factors
from rhythm_env.sim.spec import STEPS_PER_EPISODE, true_belief

from ..store import atomic_write_text, publish_dir, staging
from ..teacher.evidence import (
    EvidenceReadout,
    InnovationReadout,
    ReadoutFitError,
    fit_readout,
    readout_from_dict,
)
from ..teacher.trajectories import validate_record
from .answers import episode_answers
from .card import dataset_card, json_default, render_card
from .examples import episode_rows, replay_states
from .hub import push_to_hub
from .schema import CHAT_FEATURES, DATASET_SCHEMA, FEATURES, SPLITS, build_info
from .summary import check_no_eval_seeds, content_hash, dataset_summary, episodes_by_split, seed_ranges


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


def build_sft_dataset(
    records: list[dict],
    *,
    validation_fraction: float = 0.1,
    keep_seeds: set[int] | None = None,
    seed: int = 0,
    prompt_format: str = DEFAULT_PROMPT_FORMAT,
    reasoning: str = DEFAULT_REASONING,
    readout_form: str = DEFAULT_READOUT_FORM,
    readout_target: str = "teacher",
) -> datasets.DatasetDict:
    """Teacher trajectory records -> DatasetDict {"train", "validation"}, one example per valid step.

    `keep_seeds` keeps only those episodes (seeds are unique across conditions); `seed` is the split
    seed; `readout_target` what the evidence read-out's final belief is fitted to (READOUT_TARGETS). Rows are ordered by (condition, seed, step); trainers shuffle. Both splits always exist
    (validation is empty only with a single episode).
    """
    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"unknown prompt_format {prompt_format!r}; allowed: {', '.join(PROMPT_FORMATS)}")
    if reasoning not in REASONING:
        raise ValueError(f"unknown reasoning {reasoning!r}; allowed: {', '.join(REASONING)}")
    if readout_form not in READOUT_FORMS:
        raise ValueError(f"unknown readout_form {readout_form!r}; allowed: {', '.join(READOUT_FORMS)}")
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
        try:  # evaluation and tuning seeds never become training data, whatever path built the records
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
        replayed[condition] = (group, *replay_states(condition, group, [[True] * STEPS_PER_EPISODE for _ in group]))
    readout = None
    if reasoning == "evidence":  # fitted on the training split's weeks, measured on the validation split's
        weeks = {split: [(r, obs) for group, _, observations in replayed.values() for r, obs in zip(group, observations)
                         if split_of[(r["condition"], int(r["seed"]))] == split] for split in SPLITS}
        try:
            readout = fit_readout(readout_form, weeks["train"], weeks["validation"], readout_target)
        except ReadoutFitError as err:
            raise ValueError(f"reasoning 'evidence': {err}") from None
    for condition, (group, states, observations) in replayed.items():
        answers = [episode_answers(r, reasoning, readout, history) for r, history in zip(group, observations)]
        beliefs = true_belief(sample_factors(condition, [int(r["seed"]) for r in group]))
        for r, ans, st, history, belief in zip(group, answers, states, observations, beliefs):
            rows = episode_rows(r, ans, st, history, belief, prompt_format)
            if rows is None:
                dropped_episodes += 1  # a chat episode with a fallback step (see the module docstring)
                continue
            out = columns[split_of[(condition, int(r["seed"]))]]
            for row in rows:
                for name, value in row.items():
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
    return DatasetFormat.from_info(build_info(dataset_dict))


def evidence_readout(dataset_dict) -> EvidenceReadout | InnovationReadout | None:
    """The evidence read-out a dataset's answers were written with (None unless reasoning 'evidence')."""
    data = build_info(dataset_dict).get("evidence_readout")
    return readout_from_dict(data) if data else None


def save_sft_dataset(dataset_dict, out_dir, provenance: dict, *, digest: str | None = None,
                     overwrite: bool = False, published: bool = False) -> dict:
    """Write the dataset (save_to_disk), README.md and provenance.json to `out_dir`, atomically: all
    of it goes to a staging directory beside `out_dir`, which replaces `out_dir` only when complete,
    and only if `out_dir` is an earlier dataset, empty, or `overwrite` is set (`publish_dir`).
    `digest`: the dataset's `content_hash`, if the caller already computed it; `published`: a
    content-hashed version in a stage folder (`artifacts.publish_dir`)."""
    out_dir = Path(out_dir)
    digest = digest or content_hash(dataset_dict)
    episodes = episodes_by_split(dataset_dict)
    summary = {**dataset_summary(dataset_dict, episodes), "content_hash": digest}
    card = render_card(dataset_dict, provenance, digest, episodes)  # also refuses secrets in the provenance
    record = {**provenance, "sft_dataset": {"schema": DATASET_SCHEMA, **summary}}
    provenance_json = json.dumps(record, sort_keys=True, indent=2, default=json_default, allow_nan=False) + "\n"
    with staging(out_dir.parent) as tmp:
        dataset_dict.save_to_disk(str(tmp))
        atomic_write_text(tmp / "README.md", card)
        atomic_write_text(tmp / "provenance.json", provenance_json)
        publish_dir(tmp, out_dir, kind="sft_dataset", overwrite=overwrite, published=published)
    return {"path": str(out_dir), **summary}


# The names this module defined before its split (the card, Hub push, summaries and schema now live in
# their own modules) stay importable from here: `rhythm_core.data.sft_dataset`'s entry points are unchanged.
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
    "evidence_readout",
    "push_to_hub",
    "save_sft_dataset",
    "seed_ranges",
]
