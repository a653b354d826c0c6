"""How many tokens a training week is for a Qwen2-tokenized student, and what a `max_length` drops.

Qwen2's pre-tokenizer gives every digit its own token, so the week's meters and beliefs cost more
than under the tiny student's tokenizer. The real Qwen2.5 tokenizer cannot be downloaded here, so
this brackets it: byte-level BPEs with Qwen2's own pipeline (tests/qwen2_standin.py), one trained on
the weeks (every word of them one token: a lower bound for Qwen's) and one on the system prompt only
(the weeks' own words in pieces). For each: tokens per whole week, and how many of the
prompt/completion pairs SFT trains a real model on (one per answer) are longer than `--max-length`,
so TRL cuts their answer and drops them.

    python benchmarks/week_tokens.py                                 # 300 Bayesian-teacher weeks
    python benchmarks/week_tokens.py --dataset /path/to/sft_dataset  # a saved sft_dataset

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dataset", help="a saved sft_dataset (default: build one from --weeks teacher weeks)")
    parser.add_argument("--weeks", type=int, default=300)
    parser.add_argument("--sample", type=int, default=40, help="training weeks measured")
    parser.add_argument("--max-length", type=int, default=4096)
    parser.add_argument("--variant", default="full", help="system prompt variant (a pretrained model's: full)")
    args = parser.parse_args()

    import datasets
    import numpy as np

    from rhythm_core.data.stages import dataset_stage
    from rhythm_core.teacher.settings import TeacherSettings
    from rhythm_core.teacher.stage import teacher_stage
    from rhythm_core.training.sft import _to_prompt_completion, conversation_lengths, with_system_prompt
    from rhythm_core.training.tiny import corpus_from_dataset
    from tests.qwen2_standin import train_qwen2_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        dataset_dir = args.dataset
        if dataset_dir is None:
            root = Path(tmp)
            trajectories = teacher_stage(TeacherSettings(backend="bayes"), "continuous", f"1000-{999 + args.weeks}", root)
            dataset_dir = dataset_stage(trajectories, root)["path"]
        train = datasets.load_from_disk(str(dataset_dir))["train"]
    weeks = with_system_prompt(train.select_columns(["messages"]), args.variant)
    corpus = corpus_from_dataset(weeks, limit=400)
    sample = weeks.select(range(0, len(weeks), max(1, len(weeks) // args.sample)))
    pairs = _to_prompt_completion(sample)
    answers = [sum(m["role"] == "assistant" for m in week["messages"]) for week in sample]
    print(f"{len(sample)} of {len(weeks)} training weeks, system prompt {args.variant!r}, max_length {args.max_length}")
    print("| Qwen2-pipeline BPE | tokens per week (median / max) | pairs over max_length | answers dropped per week |")
    print("|---|---|---|---|")
    # Trained on the weeks themselves, every word of them is one token (a lower bound for Qwen's);
    # trained on the system prompt alone, the weeks' own words (meter names, numbers' neighbours) are
    # in pieces.
    system = [m["content"] for m in weeks[0]["messages"] if m["role"] == "system"] * 8
    for text, label in ((corpus, "trained on the weeks"), (system, "trained on the system prompt only")):
        tokenizer, _ = train_qwen2_tokenizer(text, vocab_size=32768)
        lengths = conversation_lengths(sample, tokenizer)
        pair_lengths = np.array([len(tokenizer.apply_chat_template(p["prompt"] + p["completion"], tokenize=True,
                                                                   return_dict=True)["input_ids"]) for p in pairs])
        over = pair_lengths > args.max_length
        per_week, start = [], 0  # the pairs come week by week, one per answer
        for n in answers:
            per_week.append(int(over[start:start + n].sum()))
            start += n
        print(f"| {label} | {int(np.median(lengths))} / {max(lengths)} | {int(over.sum())} of {len(over)} "
              f"({over.mean():.1%}) | {min(per_week)}-{max(per_week)} |")


if __name__ == "__main__":
    main()
