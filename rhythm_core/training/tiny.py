"""The embedded default base model: a byte-level BPE tokenizer trained offline on the dataset's own
text and a small random-init Llama, so the whole lineage runs on a laptop CPU without any download.

The tokenizer splits text into whitespace-led numbers ("␣+0.03", "0.69") and the text between them
before BPE, so every number the model reads or writes is one token of its own, never fused with the
JSON around it, while the fixed text between numbers ('","belief":{"social":', "␣cogn") merges into
few tokens, and each role header ("assistant\n") is one token: a week is fewer tokens than with the
headers spelled out byte by byte or words and punctuation kept apart (benchmarks/README.md, D10, D11).
The chat template is ChatML with `{% generation %}` around the assistant turn, which TRL's
assistant-only loss needs. LlamaConfig, not Qwen2Config: AutoTokenizer on a Qwen2 directory silently
swaps in Qwen2Tokenizer, whose pre-tokenizer no longer matches the trained one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from rhythm_env.protocol.numbers import DECIMAL_TOKEN, NUMBER_CHUNK, NUMBER_START
from rhythm_env.sim.spec import ACTIONS

BOS, EOS, PAD, IM_START = "<|endoftext|>", "<|im_end|>", "<|pad|>", "<|im_start|>"
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\\n' }}{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\\n' }}"
    "{% else %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Chunks: optional leading whitespace + a number, or a run of text in which no number starts. An
# earlier chunking (whitespace-led runs of non-space characters) let BPE fuse a compact JSON answer into
# tokens such as '0.69,"morning":0.' or even one token for a whole frequent answer, so a belief value
# had no token of its own and the student could not compose a new one: numbers are always whole tokens.
# Splitting words from punctuation as well (the chunking before this one) cost more tokens a week for
# nothing the student used; attention over a whole week is most of a training step's cost, so the
# shorter week trains faster per step (benchmarks/README.md, D10).
# A role header ("assistant\n" after <|im_start|>) is a chunk of its own: the tokenizer learns it as
# one token (spelled out byte by byte, the headers were a sizeable share of a week's tokens; D11), and no
# merge can cross from the generation prompt into the answer, so a prompt ending in the header
# tokenizes as in training.
_ROLE = r"(?:system|user|assistant)\n"
_CHUNK = _ROLE + "|" + NUMBER_CHUNK + "|(?:(?!" + NUMBER_START + "|" + _ROLE + r")[\s\S])+"


@dataclass(frozen=True)
class TinyModelConfig:
    vocab_size: int = 2048
    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 2
    # 8 heads of 16 dimensions: the student reads several numbers of a row at once (the anomaly's five
    # meters, its previous belief); with 4 heads most runs did not learn to read them, with 8 every
    # run did (benchmarks/README.md, D5).
    num_attention_heads: int = 8
    num_key_value_heads: int = 8
    max_position_embeddings: int = 4096
    # Decimal-number tokens start with value features in the first 33 dimensions (see below), so
    # nearby values start close; 0 turns this off.
    numeric_embedding_dims: int = 33
    seed: int = 0


def train_tokenizer(texts: Iterable[str], vocab_size: int = 2048):
    """Train the byte-level BPE tokenizer on `texts`; returns a PreTrainedTokenizerFast."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_CHUNK), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    # Action names are always tokens of their own, with and without a leading space or quote (each a
    # chunk here), whatever text they also merge into.
    seeds = [variant for a in ACTIONS for variant in (a, f" {a}", f'"{a}"')] * 20
    tokenizer.train_from_iterator([*seeds, *texts], trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token=BOS, eos_token=EOS, pad_token=PAD,
        additional_special_tokens=[IM_START], clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.padding_side = "left"  # batched generation pads on the left
    return fast


def build_tiny_model(tokenizer, config: TinyModelConfig = TinyModelConfig()):
    """A random-init causal LM sized by `config`, seeded for reproducibility."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(config.seed)
    llama = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=config.hidden_size, intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers, num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads, max_position_embeddings=config.max_position_embeddings,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(llama)
    if config.numeric_embedding_dims:
        init_numeric_embeddings(model, tokenizer, config.numeric_embedding_dims)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def numeric_features(values, dims: int):
    """(N, dims) value features of numbers in [-1, 1]: the value itself, then Gaussian bumps on an
    even grid over [-1, 1] (width one grid step), so nearby values have nearby features."""
    import numpy as np

    x = np.clip(np.asarray(values, dtype=np.float64), -1.0, 1.0)[:, None]
    centers = np.linspace(-1.0, 1.0, dims - 1)[None, :]
    width = centers[0, 1] - centers[0, 0] if dims > 2 else 1.0
    return np.concatenate([x, np.exp(-0.5 * ((x - centers) / width) ** 2)], axis=1)


def init_numeric_embeddings(model, tokenizer, dims: int) -> int:
    """Give every decimal-number token ("0.69", "+0.03") an embedding whose first `dims` entries are
    its value features, and every other token zeros there; returns how many number tokens got them.

    Why: a model trained from scratch sees ~250 number tokens as unrelated symbols and must learn
    each one's magnitude from a noisy signal (an anomaly of +0.09 and +0.10 mean nearly the same),
    which a few hundred steps never do. With value features, "near in value" starts as "near in
    embedding" on the input and, through the tied output embedding, on the answer's belief numbers.
    The rest of each embedding stays random, so tokens keep their identity. Init only: the model is
    a plain Llama afterwards and every parameter trains.
    """
    import torch

    if dims < 2:
        raise ValueError(f"numeric_embedding_dims must be 0 or >= 2, got {dims}")
    embedding = model.get_input_embeddings().weight
    if dims > embedding.shape[1]:
        raise ValueError(f"numeric_embedding_dims {dims} exceeds hidden_size {embedding.shape[1]}")
    ids, values = [], []
    for token, index in tokenizer.get_vocab().items():
        text = tokenizer.convert_tokens_to_string([token])
        if DECIMAL_TOKEN.match(text):
            ids.append(index)
            values.append(float(text))
    # Scaled to the random part's size per dimension, so neither drowns the other after RMSNorm.
    scale = float(embedding.detach().std()) * 6.0
    with torch.no_grad():
        embedding[:, :dims] = 0.0
        if ids:
            feats = torch.tensor(numeric_features(values, dims), dtype=embedding.dtype)
            embedding[torch.tensor(ids), :dims] = scale * feats
    return len(ids)


def corpus_from_dataset(dataset, limit: int = 2000) -> list[str]:
    """Training text for the tokenizer: the messages of up to `limit` examples, spread over the
    dataset, with repeats kept so merge frequencies follow what the model will actually read."""
    step = max(1, len(dataset) // limit)
    rows = dataset.select(range(0, len(dataset), step))
    # Each message as the chat template renders it between special tokens: its role header, then its text.
    return [f"{message['role']}\n{message['content']}" for row in rows for message in row["messages"]]


def build_tiny_base(dataset, out_dir, config: TinyModelConfig = TinyModelConfig(), provenance: dict | None = None) -> dict:
    """Train the tokenizer on `dataset` (the SFT train split), build the model, save both to `out_dir`
    with a provenance file; returns a summary."""
    tokenizer = train_tokenizer(corpus_from_dataset(dataset), config.vocab_size)
    model = build_tiny_model(tokenizer, config)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out)
    model.save_pretrained(out)
    info = {"kind": "tiny", "config": asdict(config), "vocab_size": len(tokenizer),
            "parameters": sum(p.numel() for p in model.parameters()), **(provenance or {})}
    (out / "rhythm_base.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    return {"path": str(out), **info}
