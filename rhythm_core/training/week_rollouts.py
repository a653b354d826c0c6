"""Whole-week rollouts for TRL's `GRPOTrainer(rollout_func=...)`: GRPO on the week itself.

Each prompt is a week's opening (the system prompt and the first user turn of a chat-format
conversation); `WeekRollouts` plays every prompt's week with the current policy, sampling every
answer (lockstep, the prompt cache), and hands TRL one completion per week: all 28 answers with the
environment's turns between them, `env_mask` 0 on every token the environment or the chat template
wrote, so only the policy's own tokens carry the loss. A linear-chain student writes each belief as
the previous one plus its increment, sampled as in play (`number_decoding.belief_sum_processor`); those
numbers are the decoder's, masked too, so GRPO moves the reasoning, the increments and the action. The
log-probabilities are a forward of the policy over that sequence, as TRL computes its own. The week's
grade (every component, belief included) reaches the reward functions as `week_grade`, its components
as `grade_<name>`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..env import VectorRhythmEnv
from ..env.conditions import check_purpose_seeds
from ..env.episode import EpisodeBatch
from ..env.spec import BELIEF_DIMS, STEPS_PER_EPISODE
from ..graders import DEFAULT_GRADER, get_grader
from ..protocol import CHAT_FORMATS, render_conversation
from .generation import SamplingConfig
from .policy import LLMPolicyAgent


def week_openings(condition: str, seeds, *, variant: str, prompt_format: str) -> list[list[dict]]:
    """Each seed's week as a chat-format conversation before its first answer."""
    if prompt_format not in CHAT_FORMATS:
        raise ValueError(f"whole-week GRPO needs a chat format (one conversation a week), not {prompt_format!r}")
    seeds = check_purpose_seeds(condition, seeds, "training")  # never an evaluation or tuning week
    env = VectorRhythmEnv(condition)
    obs, _ = env.reset(np.asarray(seeds, dtype=np.int64))
    return [render_conversation([obs.item(n)], [], variant=variant, prompt_format=prompt_format)
            for n in range(len(obs))]


def week_token_ids(tokenizer, conversation: list[dict], summed_beliefs: bool = False) -> tuple[list[int], list[int], list[int]]:
    """(prompt ids, completion ids, env_mask) of a played week's conversation: the prompt up to the
    first answer's generation prompt, the completion up to the last answer's end-of-turn token; the
    mask 1 on each answer's tokens and the end-of-turn token that closed it, 0 on what the environment
    and the template wrote and, with `summed_beliefs`, on the belief numbers the decoder wrote as sums."""
    from .number_decoding import summed_belief_positions
    from .prompt_tokens import conversation_ids

    full = tokenizer.apply_chat_template(conversation, tokenize=False)
    ids = tokenizer(full, add_special_tokens=False)["input_ids"]
    answers = [n for n, m in enumerate(conversation) if m["role"] == "assistant"]
    starts = conversation_ids(tokenizer, [conversation[:n] for n in answers])  # up to each generation prompt
    mask = [0] * len(ids)
    for n, prefix in zip(answers, starts):
        answer = tokenizer(conversation[n]["content"] + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
        begin, end = len(prefix), len(prefix) + len(answer)
        if ids[:begin] != prefix or ids[begin:end] != answer:
            raise ValueError("the chat template does not render a week as its turns end to end (answer "
                             f"{answers.index(n)} tokenizes differently inside the conversation); whole-week "
                             "rollouts need one that does")
        mask[begin:end] = [1] * len(answer)
    first = len(starts[0])
    for p in summed_belief_positions(tokenizer, ids, first) if summed_beliefs else ():
        mask[p] = 0
    # the week ends with its last answer's end-of-turn token, so TRL counts it finished, not truncated
    return ids[:first], ids[first:end], mask[first:end]


def completion_logprobs(model, prompt_ids: list[list[int]], completion_ids: list[list[int]],
                        temperature: float, batch_size: int = 8) -> list[list[float]]:
    """The policy's log-probability of each completion token given everything before it, from logits
    divided by `temperature` (as GRPOTrainer computes its own)."""
    import torch

    out = []
    model_device = next(model.parameters()).device
    for start in range(0, len(prompt_ids), batch_size):
        rows = [p + c for p, c in zip(prompt_ids[start:start + batch_size], completion_ids[start:start + batch_size])]
        width = max(len(r) for r in rows)
        input_ids = torch.zeros((len(rows), width), dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):  # right-padded: positions start at 0 as in TRL's forward
            input_ids[i, : len(r)] = torch.tensor(r)
            attention[i, : len(r)] = 1
        with torch.no_grad():
            logits = model(input_ids=input_ids.to(model_device), attention_mask=attention.to(model_device)).logits
        logps = torch.log_softmax(logits.float() / temperature, dim=-1)
        for i, (p, c) in enumerate(zip(prompt_ids[start:start + batch_size], completion_ids[start:start + batch_size])):
            positions = torch.arange(len(p) - 1, len(p) + len(c) - 1)
            out.append(logps[i, positions, torch.tensor(c)].tolist())
    return out


@dataclass
class WeekRollouts:
    """A `rollout_func`: plays each prompt's week with the trainer's current policy and returns
    TRL's fields plus the week's grade. `weeks` maps a prompt's first user turn to its (condition,
    seed) (`week_openings` made the prompts); the policy's own tokens are all it trains on."""

    tokenizer: object
    weeks: dict[str, tuple[str, int]]
    variant: str
    prompt_format: str
    grader: str = DEFAULT_GRADER
    max_new_tokens: int = 64
    seed: int = 0
    batch_size: int = 64
    sum_beliefs: bool = False  # a linear-chain student: beliefs written as sums, as it plays

    def __call__(self, prompts: list[list[dict]], trainer) -> dict:
        keys = [next(m["content"] for m in p if m["role"] == "user") for p in prompts]
        unknown = [k for k in keys if k not in self.weeks]
        if unknown:
            raise ValueError(f"a prompt that is no week's opening: {unknown[0][:80]!r}")
        weeks = [self.weeks[k] for k in keys]
        model = trainer.accelerator.unwrap_model(trainer.model)
        temperature = float(trainer.temperature)
        # a fresh sample every training step: the same week is played anew, not replayed
        sampling = SamplingConfig(max_new_tokens=self.max_new_tokens, temperature=temperature,
                                  seed=self.seed + 100_003 * int(trainer.state.global_step))
        result = {"prompt_ids": [None] * len(prompts), "completion_ids": [None] * len(prompts),
                  "env_mask": [None] * len(prompts), "week_grade": [0.0] * len(prompts),
                  "belief_mae": [0.0] * len(prompts), "invalid_answers": [0] * len(prompts)}
        was_training = model.training
        for condition in sorted({c for c, _ in weeks}):
            index = [i for i, (c, _) in enumerate(weeks) if c == condition]
            played = self._play(model, condition, [weeks[i][1] for i in index], sampling)
            for i, week in zip(index, played):
                for key, value in week.items():
                    result.setdefault(key, [0.0] * len(prompts))[i] = value
        model.train(was_training)
        result["logprobs"] = completion_logprobs(model, result["prompt_ids"], result["completion_ids"], temperature)
        return result

    def _play(self, model, condition: str, seeds: list[int], sampling: SamplingConfig) -> list[dict]:
        agent = LLMPolicyAgent(model, self.tokenizer, sampling=sampling, variant=self.variant,
                               prompt_format=self.prompt_format, batch_size=self.batch_size,
                               sum_beliefs=self.sum_beliefs)
        env = VectorRhythmEnv(condition)
        obs, _ = env.reset(np.asarray(seeds, dtype=np.int64))
        agent.reset(env)
        beliefs = np.full((len(seeds), STEPS_PER_EPISODE, len(BELIEF_DIMS)), np.nan)
        invalid = np.zeros((len(seeds), STEPS_PER_EPISODE), dtype=bool)
        for t in range(STEPS_PER_EPISODE):
            decision = agent.act(obs)
            beliefs[:, t], invalid[:, t] = decision.beliefs, decision.invalid
            obs, *_ = env.step(decision.actions)
        batch = EpisodeBatch(condition, env.seeds, env.factors, env.meters_history.copy(), env.action_history.copy(),
                             beliefs, invalid)
        scores, parts = get_grader(self.grader).grade_batch(batch)
        mae = batch.belief_mae()
        weeks = []
        for n in range(len(seeds)):
            conversation = agent.conversations[n] + [{"role": "assistant", "content": agent.answers[n][-1]}]
            prompt_ids, completion_ids, env_mask = week_token_ids(self.tokenizer, conversation, self.sum_beliefs)
            weeks.append({"prompt_ids": prompt_ids, "completion_ids": completion_ids, "env_mask": env_mask,
                          "week_grade": float(scores[n]), "belief_mae": float(np.nan_to_num(mae[n], nan=1.0)),
                          "invalid_answers": int(invalid[n].sum()),
                          **{f"grade_{name}": float(v[n]) for name, v in parts.items()}})
        return weeks


def week_grade(completions, week_grade, **kwargs) -> list[float]:
    """The reward: the grader's score of the whole week (WeekRollouts' `week_grade`)."""
    return [float(v) for v in week_grade]
