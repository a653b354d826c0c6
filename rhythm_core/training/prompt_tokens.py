"""Each episode's prompt as token ids extended turn by turn, where the chat template allows it.

A lockstep step used to render every episode's conversation through the chat template and tokenize it
whole: work growing with the step, about a third of the tiny student's evaluation time. The embedded
default's ChatML template renders every message on its own (a conversation's text is its messages'
texts end to end, and no message's text depends on another's), and its tokenizer splits text at
special tokens before anything else, while every message starts with one. A conversation's token
ids are then its messages' token ids end to end, so each step tokenizes only the messages added since
the previous one. Other templates are rendered whole: some rewrite earlier turns (Qwen3's drops the
reasoning of earlier assistant turns) and some tokenizers mark the start of a text (SentencePiece's
prefix space), so a conversation's tokens need not extend the previous step's.
"""

from __future__ import annotations

from .tiny import CHAT_TEMPLATE

_PROBE = [
    {"role": "system", "content": "Coach. Answer in JSON."},
    {"role": "user", "content": "Now day 1 morning, vita 0.73 cogn 0.70"},
    {"role": "assistant", "content": '{"belief":{"social":0.46},"action":"SLEEP"}'},
    {"role": "user", "content": "SLEEP anomaly vita +0.09 cogn -0.03\nNow day 1 afternoon, vita 0.80"},
]


def _ids(tokenizer, texts: list[str]) -> list[list[int]]:
    return tokenizer(texts, add_special_tokens=False)["input_ids"]


def conversation_ids(tokenizer, conversations: list[list[dict]]) -> list[list[int]]:
    """Token ids of each conversation's prompt for its next assistant turn, rendered whole."""
    texts = [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in conversations]
    return _ids(tokenizer, texts)


def extends_by_message(tokenizer) -> bool:
    """Whether conversations can be tokenized message by message: the embedded template, and a
    tokenizer that gives a probe conversation the same ids whole as message by message."""
    if getattr(tokenizer, "chat_template", None) != CHAT_TEMPLATE:
        return False
    parts = [tokenizer.apply_chat_template(_PROBE[:2], tokenize=False),
             tokenizer.apply_chat_template(_PROBE[2:], tokenize=False, add_generation_prompt=True)]
    return conversation_ids(tokenizer, [_PROBE])[0] == [i for ids in _ids(tokenizer, parts) for i in ids]


class ConversationTokens:
    """The token ids of N conversations that only ever grow (one per episode of a lockstep batch).
    `prompts` takes the conversations as they now are and tokenizes only their new messages."""

    def __init__(self, tokenizer, episodes: int):
        self.tokenizer = tokenizer
        self.rows: list[list[int]] = [[] for _ in range(episodes)]
        self.messages = [0] * episodes  # messages of each conversation already in its row
        probe = [{"role": "user", "content": "x"}]
        with_prompt = tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)
        self.generation_prompt = _ids(tokenizer, [with_prompt[len(tokenizer.apply_chat_template(probe, tokenize=False)):]])[0]

    def prompts(self, conversations: list[list[dict]]) -> list[list[int]]:
        """Each conversation's prompt ids for its next assistant turn (the generation prompt added)."""
        if len(conversations) != len(self.rows):
            raise ValueError(f"{len(conversations)} conversations for {len(self.rows)} episodes")
        new = []
        for n, conversation in enumerate(conversations):
            if len(conversation) < self.messages[n]:
                raise ValueError(f"conversation {n} has {len(conversation)} messages, fewer than the "
                                 f"{self.messages[n]} already tokenized: conversations may only grow")
            new.append(self.tokenizer.apply_chat_template(conversation[self.messages[n]:], tokenize=False)
                       if len(conversation) > self.messages[n] else "")
        for n, ids in enumerate(_ids(self.tokenizer, new)):
            self.rows[n].extend(ids)
            self.messages[n] = len(conversations[n])
        return [row + self.generation_prompt for row in self.rows]
