"""Does a checkpoint read its belief from the conversation? A teacher-forced probe.

Free-running play mixes two failures: a student that never learned to infer the profile, and one
that infers it but drifts on its own earlier answers. The probe separates them. It runs each
validation episode of a chat-format SFT dataset through the model once, with the teacher's answers
in the context (teacher forcing), and reads the number the model would write at every belief number
of every answer (greedy, each number the median of its distribution over numbers, as it plays). Per step it reports the belief MAE of those choices against the true profile, their
distance to the teacher's own numbers, and two references on the same numbers: the teacher, and
"copy the teacher's previous belief" (what a model that only repeats itself would score under
teacher forcing). A model whose probe MAE sits at the constant prior's has learned no inference,
whatever its answers look like.

With the "evidence" reasoning (the read-out's increment, written before the belief) the belief
numbers are the previous belief plus an increment already in context, so the probe also reads the
increment itself: `update_vs_teacher` against `zero_update_vs_teacher` (always "+0.00"). That is
the part that needs inference; the belief after it is copying and adding.
"""

from __future__ import annotations

import numpy as np

from ..env.spec import BELIEF_DIMS
from ..protocol import BELIEF_NUMBER, INCREMENT_NUMBER, stated_increments


def _belief_numbers(text: str, tokenizer, logits, pattern=BELIEF_NUMBER, clip: bool = True):
    """(teacher values, the values the model writes, readable), each (steps, 3), of the numbers `pattern`
    (`protocol.BELIEF_NUMBER` or `INCREMENT_NUMBER`: group 2 the number) finds in the assistant turns of
    one rendered conversation. A number that is not one token of its own (a rare value the tokenizer
    splits) is not readable: its model value is NaN and it is left out."""
    from ..training.number_decoding import number_median_processor

    median = number_median_processor(tokenizer)
    encoding = tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
    token_at = {start: i for i, (start, _end) in enumerate(encoding["offset_mapping"])}
    ends = [end for _start, end in encoding["offset_mapping"]]
    teacher, model, readable = [], [], []
    for match in pattern.finditer(text):
        # a number token may carry the space before it (" +0.1")
        index = token_at.get(match.start(2), token_at.get(match.start(2) - 1))
        teacher.append(float(match.group(2)))
        readable.append(index is not None and index > 0 and ends[index] == match.end(2))
        if not readable[-1]:
            model.append(np.nan)
            continue
        scores = logits[index - 1 : index]
        if median is not None:
            scores = median(None, scores.clone())
        choice = tokenizer.decode([int(scores.argmax())]).strip()
        try:
            value = float(choice)
        except ValueError:
            value = np.nan  # the model would not have written a number here
        model.append(value)
    if not teacher or len(teacher) % len(BELIEF_DIMS):
        return None
    shape = (-1, len(BELIEF_DIMS))
    chosen = np.array(model)
    return (np.array(teacher).reshape(shape), (np.clip(chosen, 0.0, 1.0) if clip else chosen).reshape(shape),
            np.array(readable).reshape(shape))


def belief_probe(model_dir, dataset_dir, *, episodes: int = 20, split: str = "validation") -> dict:
    """Teacher-forced belief of `model_dir` on up to `episodes` conversations of a chat-format
    `dataset_dir`. Returns per-step curves (lists over steps) and summary figures:
    `probe_belief_mae` (last step, vs the truth), `teacher_belief_mae` (last step),
    `probe_vs_teacher` and `copy_vs_teacher` (mean over steps after the first), `number_rate` (the
    share of belief slots where the model's choice is a number at all; the MAEs are over those, and
    None when there are none), `episodes`."""
    import datasets
    import torch

    from ..data.sft_dataset import dataset_format
    from ..protocol import CHAT_FORMATS
    from ..training.models import load_model_and_tokenizer, play_info, prompt_variant
    from ..training.sft import with_system_prompt

    data = datasets.load_from_disk(str(dataset_dir), keep_in_memory=True)  # its map writes no cache into the artifact
    if not dataset_format(data).chat:
        raise ValueError(f"{dataset_dir}: the belief probe reads one conversation per episode; this dataset's "
                         f"prompt_format is {dataset_format(data).prompt_format!r}, not one of {', '.join(CHAT_FORMATS)}")
    rows = data[split]
    rows = rows.select(range(min(episodes, len(rows))))
    variant = prompt_variant(play_info(model_dir))  # as the student plays (LLMPolicyAgent.from_checkpoint)
    rows = with_system_prompt(rows.select_columns(["messages", "true_belief"]), variant)
    model, tokenizer = load_model_and_tokenizer(str(model_dir))
    model.eval()
    truth_err, probe_gap, copy_gap, teacher_err, numbers_seen = [], [], [], [], []
    update_gap, zero_gap = [], []
    for row in rows:
        text = tokenizer.apply_chat_template(row["messages"], tokenize=False)
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"].to(model.device)
        with torch.no_grad():
            logits = model(ids).logits[0].float().cpu()
        numbers = _belief_numbers(text, tokenizer, logits)
        if numbers is None:
            continue
        teacher, probe, readable = numbers
        if not readable.any():
            continue
        numbers_seen.append(~np.isnan(probe[readable]))
        if any(stated_increments(m["content"]) for m in row["messages"] if m["role"] == "assistant"):
            updates = _belief_numbers(text, tokenizer, logits, INCREMENT_NUMBER, clip=False)
            if updates is not None:
                update_gap.append(np.nanmean(np.abs(updates[1] - updates[0])))
                zero_gap.append(np.mean(np.abs(updates[0])))
        truth = np.asarray(row["true_belief"])
        previous = np.vstack([teacher[:1], teacher[:-1]])
        teacher_err.append(np.abs(teacher - truth).mean(axis=1))
        truth_err.append(np.abs(probe - truth).mean(axis=1))
        probe_gap.append(np.abs(probe - teacher).mean(axis=1))
        copy_gap.append(np.abs(previous - teacher).mean(axis=1))
    if not truth_err:
        raise ValueError(f"{dataset_dir}: no episode with readable belief numbers to probe")
    steps = min(len(x) for x in truth_err)

    def figure(value) -> float | None:
        return None if value is None or not np.isfinite(value) else round(float(value), 4)

    def curve(values) -> list[float | None]:
        stacked = np.stack([v[:steps] for v in values])
        with np.errstate(all="ignore"):
            means = [np.nanmean(column) if np.isfinite(column).any() else np.nan for column in stacked.T]
        return [figure(v) for v in means]

    def mean_after_first(values) -> float | None:
        finite = [v for v in values[1:] if v is not None]
        return figure(np.mean(finite)) if finite else None

    curves = {"probe_belief_mae": curve(truth_err), "teacher_belief_mae": curve(teacher_err),
              "probe_vs_teacher": curve(probe_gap), "copy_vs_teacher": curve(copy_gap)}
    return {
        "episodes": len(truth_err), "steps": steps, "curves": curves,
        "probe_belief_mae": curves["probe_belief_mae"][-1], "teacher_belief_mae": curves["teacher_belief_mae"][-1],
        "probe_vs_teacher": mean_after_first(curves["probe_vs_teacher"]),
        "copy_vs_teacher": mean_after_first(curves["copy_vs_teacher"]),
        "number_rate": figure(np.mean(np.concatenate([s.ravel() for s in numbers_seen]))),
        "update_vs_teacher": figure(np.mean(update_gap)) if update_gap else None,
        "zero_update_vs_teacher": figure(np.mean(zero_gap)) if zero_gap else None,
    }
