"""A stand-in for Qwen/Qwen2.5-3B-Instruct built offline, for checks, tests and the TRL example (`rhythm
gpu-check`, the HF Jobs tests, examples/grpo_rhythm_env.py --offline; it lives in the env package, so the
example needs no more than that and TRL): a random-weight Qwen2-shaped model and a Qwen2 tokenizer trained on the given
texts. The same architecture class (Qwen2ForCausalLM: grouped-query attention, tied embeddings, RoPE
theta 1e6, a vocabulary padded past the tokenizer, bf16 weights), the same tokenizer class
(Qwen2Tokenizer: NFC, Qwen2's split regex, then byte-level BPE; <|endoftext|> pads, <|im_end|> ends a
turn), Qwen2.5's chat template and its generation_config (sampling on, repetition_penalty 1.05), at
a size a CPU trains in seconds (TINY_SHAPE) or at the real one's (QWEN25_3B_SHAPE). Its answers are
noise: it tests what the code does with a Qwen2 model, not what a model learns.

Qwen2Tokenizer rebuilds its pipeline from vocab and merges (transformers 5), so the BPE here is
trained with exactly that pipeline: the tokenizer the Hub download gives is the one trained.
"""

from __future__ import annotations

import json
from pathlib import Path

REPO_ID = "Qwen/Qwen2.5-3B-Instruct"
ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"

# Qwen2.5-Instruct's template without its tool-calling branches (the JSON protocol calls no tools).
CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) or (message.role == 'assistant') %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)
# Qwen2.5-3B-Instruct's generation_config.json, with the stand-in's token ids.
GENERATION = {"do_sample": True, "repetition_penalty": 1.05, "temperature": 0.7, "top_p": 0.8, "top_k": 20}


def tool_chat_template() -> str:
    """Qwen2.5-Instruct's whole template, tool-calling branches included (as TRL ships it, so TRL
    recognizes it and parses the model's tool calls)."""
    from trl.chat_template_utils import qwen2_5_chat_template

    return qwen2_5_chat_template


def train_qwen2_tokenizer(texts: list[str], vocab_size: int = 1024, *, chat_template: str = CHAT_TEMPLATE):
    """A Qwen2Tokenizer whose BPE was trained on `texts` with Qwen2's own normalizer and pre-tokenizer."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    bpe = Tokenizer(models.BPE())
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[ENDOFTEXT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(texts, trainer=trainer)
    model = json.loads(bpe.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    tokenizer = Qwen2Tokenizer(vocab=model["vocab"], merges=merges, eos_token=IM_END, pad_token=ENDOFTEXT,
                               unk_token=None, additional_special_tokens=[IM_START, IM_END],
                               clean_up_tokenization_spaces=False, model_max_length=131072)
    tokenizer.chat_template = chat_template
    return tokenizer, bpe


# The stand-in's size: a CPU trains it in seconds.
TINY_SHAPE = dict(hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2)
# Qwen2.5-3B-Instruct's own (3.09 B parameters with its tied embeddings).
QWEN25_3B_SHAPE = dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                       num_key_value_heads=2, vocab_size=151936)


def build_qwen2_standin(out_dir, texts: list[str], *, seed: int = 0, shape: dict | None = None,
                        device: str = "cpu", tool_calling: bool = False) -> Path:
    """Save the stand-in (model, tokenizer, generation config) to `out_dir`; returns the folder.
    `shape`: the architecture's sizes (TINY_SHAPE by default; QWEN25_3B_SHAPE for the real one's,
    built in bf16 on `device`). `tool_calling`: Qwen2.5's whole template (`tool_chat_template`), for
    trainers that offer the model tools."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer, _ = train_qwen2_tokenizer(texts, chat_template=tool_chat_template() if tool_calling else CHAT_TEMPLATE)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in (ENDOFTEXT, IM_START, IM_END)}
    sizes = {"vocab_size": (len(tokenizer) + 63) // 64 * 64,  # padded past the tokenizer, as Qwen's 151,936
             **(shape or TINY_SHAPE)}
    config = Qwen2Config(
        **sizes, max_position_embeddings=32768, rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
        use_sliding_window=False, sliding_window=32768, max_window_layers=sizes["num_hidden_layers"],
        hidden_act="silu", bos_token_id=ids[ENDOFTEXT], eos_token_id=ids[IM_END], torch_dtype="bfloat16",
    )
    torch.manual_seed(seed)
    with torch.device(device):  # a real shape is initialized where it runs, in bf16 (3B in fp32: 12 GB)
        model = (Qwen2ForCausalLM(config).to(torch.bfloat16) if shape is None
                 else Qwen2ForCausalLM._from_config(config, dtype=torch.bfloat16))
    model.generation_config = GenerationConfig(bos_token_id=ids[ENDOFTEXT], pad_token_id=ids[ENDOFTEXT],
                                               eos_token_id=[ids[IM_END], ids[ENDOFTEXT]], **GENERATION)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


# ---- the tool-calling stand-in (GRPO with `environment_factory` on text.tool_env) ---------------------------
TEXT_WEEK_SEED = 1234  # the training week whose observations the tokenizer is trained on


def tool_texts() -> list[str]:
    """The tokenizer's training texts: the task, the play request, the tools as the chat template lists them,
    a week's observations, a tool call."""
    from transformers.utils import get_json_schema

    from ..protocol import TOOL_SYSTEM_PROMPT
    from ..sim.spec import ACTIONS
    from .tool_env import PLAY_REQUEST, RhythmToolEnv

    env = RhythmToolEnv()
    # The tools' schemas open every prompt GRPO's trainer renders: learnt as text, they take a fraction of
    # the tokens they take spelt out in bytes, and each rollout's forward pass is that much shorter.
    schemas = [json.dumps(get_json_schema(getattr(env, action.lower())), ensure_ascii=False) for action in ACTIONS]
    texts = [TOOL_SYSTEM_PROMPT, PLAY_REQUEST, *schemas, env.reset(seed=TEXT_WEEK_SEED)]
    for _ in range(6):
        texts.append(env.sleep(0.5, 0.5, 0.5))
        texts.append('<tool_call>\n{"name": "deep_work", "arguments": {"social": 0.41, "morning": 0.6, "work": 0.5}}'
                     "\n</tool_call>")
    return texts * 4


def build_tool_standin(out_dir, *, seed: int = 0) -> Path:
    """Save the tool-calling stand-in to `out_dir`; returns the folder (AutoModelForCausalLM and
    AutoTokenizer load it; `trl.chat_template_utils.add_response_schema` readies its tokenizer). Its weights
    are random: it calls no tool until taught (examples/grpo_rhythm_env.py --offline teaches it first)."""
    return build_qwen2_standin(Path(out_dir), tool_texts(), seed=seed, tool_calling=True)
