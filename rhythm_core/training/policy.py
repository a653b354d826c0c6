"""An LLM as a RhythmEnv agent: lockstep batched generation, one `generate` call per step for all
episodes, answers parsed by the protocol, invalid answers replaced by the safe fallback and counted.

The prompt format is the checkpoint's (`prompt_format` in rhythm_checkpoint.json): "table" renders
the week so far into one user message per step; the chat formats keep one conversation per episode,
the model's own earlier answers (as generated) in it, each conversation extended turn by turn (and,
where the chat template allows, its tokens too: `prompt_tokens.py`) rather than rendered again."""

from __future__ import annotations

import numpy as np

from rhythm_env.protocol import (
    CHAT_FORMATS,
    DEFAULT_PROMPT_VARIANT,
    DatasetFormat,
    chat_turn_renderer,
    fallback_action,
    parse_answer,
    render_conversation,
)
from rhythm_env.sim import BatchObservation, VectorRhythmEnv
from rhythm_env.sim.spec import ACTION_INDEX, BELIEF_DIMS

from ..agents.base import Agent, Decision
from ..store import verify_artifact
from .generation import SamplingConfig, belief_sum_decoding, generate_answers
from .models import answer_token_budget, load_model_and_tokenizer, play_info, prompt_variant
from .prompt_cache import PromptCache, prompt_cache_budget, supports_prompt_cache
from .prompt_tokens import ConversationTokens, extends_by_message


class LLMPolicyAgent(Agent):
    """Plays N episodes at once; step t of every episode is one batched generation."""

    emits_belief = True

    def __init__(self, model, tokenizer, *, sampling: SamplingConfig | None = None,
                 variant: str = DEFAULT_PROMPT_VARIANT,
                 prompt_format: str = "table", name: str = "student", batch_size: int = 64,
                 reuse_prompt_cache: bool = True, sum_beliefs: bool = False,
                 prompt_cache_max_bytes: int | None = None):
        self.model, self.tokenizer = model, tokenizer
        self.sum_beliefs = sum_beliefs  # see generate_answers
        self.sampling = sampling or SamplingConfig()
        self.variant, self.prompt_format, self.name, self.batch_size = variant, prompt_format, name, batch_size
        # Each step's prompt extends the last one, so its shared prefix need not be run again.
        self.reuse_prompt_cache = reuse_prompt_cache and supports_prompt_cache(model)
        # the cache's bytes: None for prompt_cache_budget's (a share of a GPU's free memory; no bound on the CPU)
        self.prompt_cache_max_bytes = prompt_cache_max_bytes
        self.prompt_cache: PromptCache | None = None
        self.tokenize_by_message = prompt_format in CHAT_FORMATS and extends_by_message(tokenizer)
        self.tokens: ConversationTokens | None = None

    @classmethod
    def from_checkpoint(cls, path, *, loaded: tuple | None = None, **kwargs) -> LLMPolicyAgent:
        """Load a checkpoint with its prompt variant and, unless the sampling sets one, its
        recommended answer length (`models.answer_token_budget`). `loaded`:
        (model, tokenizer) of this checkpoint already in memory, played instead of a fresh load."""
        if loaded is None:
            verify_artifact(path)  # the checkpoint as it was published
        model, tokenizer = loaded or load_model_and_tokenizer(str(path))
        info = play_info(path)  # only what the checkpoint's version names
        sampling = kwargs.pop("sampling", None) or SamplingConfig()
        if sampling.max_new_tokens is None and answer_token_budget(info):
            sampling = SamplingConfig(**{**sampling.__dict__, "max_new_tokens": answer_token_budget(info)})
        variant = kwargs.pop("variant", prompt_variant(info))
        prompt_format = kwargs.pop("prompt_format", DatasetFormat.from_info(info).prompt_format)
        # a linear chain's belief is the previous plus the increment; the innovation chain's students
        # lost with it (benchmarks/README.md, D22)
        sum_beliefs = kwargs.pop("sum_beliefs", info["readout_form"] == "linear")
        return cls(model, tokenizer, sampling=sampling, variant=variant, prompt_format=prompt_format,
                   sum_beliefs=sum_beliefs, **kwargs)

    @property
    def writes_belief_sums(self) -> bool:
        """Whether its decoding really writes each belief as the sum of its reasoning: `sum_beliefs`
        asks for it, and only greedy decoding with a tokenizer of whole-number belief tokens does it
        (generation.belief_sum_decoding)."""
        return belief_sum_decoding(self.sampling, self.tokenizer, self.sum_beliefs) is not None

    def reset(self, env: VectorRhythmEnv) -> None:
        super().reset(env)
        n = env.num_envs
        self.histories = [[] for _ in range(n)]
        self.answers: list[list[str]] = [[] for _ in range(n)]  # each episode's answers so far (chat format)
        self.beliefs = np.full((n, len(BELIEF_DIMS)), np.nan)
        self.last_messages: list[list[dict]] = []
        self.last_parsed: list = []
        budget = self.prompt_cache_max_bytes
        budget = prompt_cache_budget(self.model) if budget is None else budget
        self.prompt_cache = PromptCache(max_bytes=budget) if self.reuse_prompt_cache else None
        self.conversations: list[list[dict]] = [[] for _ in range(n)]  # chat formats: each episode's, so far
        self.tokens = ConversationTokens(self.tokenizer, n) if self.tokenize_by_message else None

    def _messages(self) -> list[list[dict]]:
        """Every episode's messages for this step. A chat conversation gains the last answer and the
        new user turn (the same messages `render_conversation` gives); a table prompt is rendered."""
        if self.prompt_format not in CHAT_FORMATS:
            return [render_conversation(h, a, variant=self.variant, prompt_format=self.prompt_format)
                    for h, a in zip(self.histories, self.answers)]
        render_turn = chat_turn_renderer(self.prompt_format)
        for history, answers, conversation in zip(self.histories, self.answers, self.conversations):
            if conversation:
                conversation += [{"role": "assistant", "content": answers[-1]},
                                 {"role": "user", "content": render_turn(history)}]
            else:
                conversation += render_conversation(history, answers, variant=self.variant,
                                                    prompt_format=self.prompt_format)
        return [list(conversation) for conversation in self.conversations]  # copies: callers keep them

    def act(self, obs: BatchObservation) -> Decision:
        return self.follow(obs, None)

    def follow(self, obs: BatchObservation, answers: list[str | None] | None) -> Decision:
        """This step with some answers given (`answers[n]`, e.g. one recorded earlier or another
        player's) and the rest (None) generated: the conversation goes on as if the agent had said them."""
        for n in range(len(obs)):
            self.histories[n].append(obs.item(n))
        messages = self._messages()
        prompt_ids = self.tokens.prompts(messages) if self.tokens is not None else None
        answers = list(answers) if answers is not None else [None] * len(obs)
        open_ = [n for n, a in enumerate(answers) if a is None]
        if open_:
            sampling = SamplingConfig(**{**self.sampling.__dict__, "seed": self.sampling.seed + 1000 * obs.step})
            # The prompt cache is keyed by position in the batch: only a whole batch may use it.
            generated = generate_answers(self.model, self.tokenizer, [messages[n] for n in open_], sampling,
                                         batch_size=self.batch_size,
                                         prompt_cache=self.prompt_cache if len(open_) == len(obs) else None,
                                         prompt_ids=None if prompt_ids is None else [prompt_ids[n] for n in open_],
                                         sum_beliefs=self.sum_beliefs)
            for n, answer in zip(open_, generated):
                answers[n] = answer
        actions = np.empty(len(obs), dtype=np.int64)
        invalid = np.zeros(len(obs), dtype=bool)
        self.last_parsed = [parse_answer(answer) for answer in answers]
        for n, answer in enumerate(answers):
            self.answers[n].append(answer)
        for n, parsed in enumerate(self.last_parsed):
            if parsed.valid:
                actions[n] = ACTION_INDEX[parsed.action]
                if parsed.belief is not None:
                    self.beliefs[n] = parsed.belief_array()  # an unstated belief keeps the last one
            else:
                actions[n] = ACTION_INDEX[fallback_action(self.histories[n][-1])]
                invalid[n] = True
        self.last_messages = messages  # this step's prompts and parsed answers, for trajectory records
        return Decision(actions=actions, beliefs=self.beliefs.copy(), reasoning=answers, invalid=invalid)
