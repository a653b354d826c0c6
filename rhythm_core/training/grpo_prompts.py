"""GRPO's prompts (`build_prompt_dataset`): decisions from the SFT dataset and states the SFT student
reaches itself, each ending in the student's own greedy reasoning and belief so that GRPO samples the
action alone, in runs that share a step of the week (`order_by_step`) so that one lockstep play
finishes a GRPO step's weeks (the design: training/grpo.py's docstring)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from rhythm_env.protocol import DatasetFormat, action_prefix
from rhythm_env.sim import VectorRhythmEnv

from ..agents.rollout import play_lockstep
from .generation import generate_answers
from .policy import LLMPolicyAgent
from .sft import with_system_prompt

if TYPE_CHECKING:
    from .grpo import GRPORunConfig


def collect_student_states(agent: LLMPolicyAgent, condition: str, seeds) -> list[dict]:
    """Play the student in lockstep and keep every step's prompt and env snapshot."""
    seeds = np.asarray(seeds, dtype=np.int64)
    rows = []
    for step in play_lockstep(agent, VectorRhythmEnv(condition), seeds, snapshots=True):
        for i, messages in enumerate(agent.last_messages):
            rows.append({"prompt": messages, "env_state": step.snapshot.episode(i).to_json(), "condition": condition,
                         "seed": int(seeds[i]), "step": step.t, "source": "student"})
    return rows


def _teacher_prompts(teacher, config: GRPORunConfig, data_format: DatasetFormat) -> list[dict]:
    """`config.teacher_prompts` decisions drawn from the SFT data: in the table format a row is a
    decision; in the chat format a row is an episode and a decision is its conversation up to the
    k-th user turn (the teacher's answers before it), with the env state at that prompt."""
    if not data_format.chat:  # a row is a decision
        teacher = teacher.shuffle(seed=config.seed).select(range(min(config.teacher_prompts, len(teacher))))
        return [{"prompt": r["messages"][:-1], "env_state": r["env_state"], "condition": r["condition"],
                 "seed": r["seed"], "step": r["step"], "source": "teacher"}
                for r in teacher]
    decisions = [(i, k) for i, steps in enumerate(teacher["steps"]) for k in range(len(steps))]
    order = np.random.default_rng(config.seed).permutation(len(decisions))[: config.teacher_prompts]
    rows, last, r, user_turns = [], None, None, []
    for i, k in sorted(decisions[j] for j in order):
        if i != last:  # decisions are sorted by episode: read each episode's row once
            last, r = i, teacher[i]
            user_turns = [n for n, m in enumerate(r["messages"]) if m["role"] == "user"]
        rows.append({"prompt": r["messages"][: user_turns[k] + 1], "env_state": r["env_states"][k],
                     "condition": r["condition"], "seed": r["seed"], "step": r["steps"][k], "source": "teacher"})
    return rows


def build_prompt_dataset(dataset_dir, variant: str, config: GRPORunConfig, agent: LLMPolicyAgent,
                         student_format: DatasetFormat | None = None):
    """GRPO's prompts, in the order TRL takes them and as many as `config.max_steps` use: decisions
    from the dataset (rows laid out in the dataset's recorded format) and states the SFT student
    `agent` reaches itself. Each prompt is text — the conversation in the student's chat template with
    the generation prompt, then the student's own greedy reasoning and belief for that state
    (`answer_prefix`) — so GRPO samples the action alone; `conversation` keeps the messages.
    `student_format`, the format the student was trained on, must be the dataset's: the student is
    prompted the way it learned."""
    import datasets

    from ..data.sft_dataset import dataset_format

    data = datasets.load_from_disk(str(dataset_dir), keep_in_memory=True)  # maps write no cache into the artifact
    data_format = dataset_format(data)
    if student_format is not None and student_format != data_format:
        raise ValueError(f"{dataset_dir}: the dataset is {data_format.as_dict()} but the SFT checkpoint was trained "
                         f"on {student_format.as_dict()}; GRPO needs the dataset its SFT start was trained on")
    teacher = with_system_prompt(data["train"], variant)
    rows = _teacher_prompts(teacher, config, data_format)
    if config.student_episodes > 0:
        seeds = range(config.student_seeds_start, config.student_seeds_start + config.student_episodes)
        rows += collect_student_states(agent, "continuous", list(seeds))
    per_step = max(1, config.completions_per_step // config.num_generations)
    rows = order_by_step(rows, per_step, config.seed)[: config.max_steps * per_step]  # TRL reads no further
    conversations = [row.pop("prompt") for row in rows]
    own = generate_answers(agent.model, agent.tokenizer, conversations, agent.sampling, sum_beliefs=agent.sum_beliefs)
    texts = prompt_texts(agent.tokenizer, conversations)
    for row, conversation, text, answer in zip(rows, conversations, texts, own):
        row["answer_prefix"] = action_prefix(answer)
        row["conversation"] = conversation
        row["prompt"] = text + row["answer_prefix"]
    return datasets.Dataset.from_list(rows)


def prompt_texts(tokenizer, conversations: list[list[dict]]) -> list[str]:
    """Each conversation as the chat template renders it for the next answer, as text that TRL's
    tokenizer call (special tokens added) turns into exactly those tokens: a BOS that the template
    writes and the tokenizer adds itself is written once."""
    adds_bos = tokenizer.bos_token is not None and tokenizer("")["input_ids"][:1] == [tokenizer.bos_token_id]
    texts = [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in conversations]
    if adds_bos:
        texts = [t.removeprefix(tokenizer.bos_token) for t in texts]
    return texts


def order_by_step(rows: list[dict], per_step: int, seed: int) -> list[dict]:
    """`rows` shuffled with `seed` so that each run of `per_step` consecutive prompts shares its
    (condition, step) where the rows allow it. TRL takes prompts in this order (shuffle_dataset off)
    and scores one step's completions in one call, so action_value finishes those weeks in one
    lockstep play instead of one per distinct step."""
    def runs(items: list[dict]) -> tuple[list[list[dict]], list[dict]]:  # whole runs, and what is left
        whole = len(items) - len(items) % per_step
        return [items[k: k + per_step] for k in range(0, whole, per_step)], items[whole:]

    rng = np.random.default_rng(seed)
    buckets: dict[tuple, list[dict]] = {}
    for i in rng.permutation(len(rows)):
        buckets.setdefault((rows[i]["condition"], rows[i]["step"]), []).append(rows[i])
    chunks, rest = [], []
    for bucket in buckets.values():
        whole, left = runs(bucket)
        chunks += whole
        rest += left
    mixed, last = runs(rest)  # the odd ones out, in runs of mixed steps
    chunks += mixed
    # a short last run stays last: anywhere else it would shift every later run off its step
    return [row for c in rng.permutation(len(chunks)) for row in chunks[c]] + last
