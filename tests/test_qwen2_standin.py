"""The offline stand-in for Qwen2.5-3B-Instruct is what the Hub download of the real one gives:
the tokenizer `AutoTokenizer` loads from the saved folder is Qwen2's class and gives the ids of the
BPE it was trained as (STACK_NOTES: a Qwen2 model can silently get another pre-tokenizer), with
ChatML turns and Qwen's generation settings."""

import json

from rhythm_core.training.qwen2_standin import IM_END, build_qwen2_standin, train_qwen2_tokenizer

TEXT = ["Now day 1 morning, vita 0.73 cogn 0.70 prog 0.10 sere 0.56 conn 0.57",
        '{"action": "DEEP_WORK", "belief": [0.42, 0.5, 0.61], "reasoning": "rested, so work"}'] * 20


def test_the_saved_stand_in_loads_as_qwen2_with_the_trained_ids(tmp_path):
    from transformers import AutoConfig, AutoTokenizer

    folder = build_qwen2_standin(tmp_path / "standin", TEXT)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    _, trained = train_qwen2_tokenizer(TEXT)
    assert type(tokenizer).__name__ == "Qwen2Tokenizer" and AutoConfig.from_pretrained(folder).model_type == "qwen2"
    text = "Now day 6 evening, vita 0.05 cogn 0.99 Ünïcode\r\n  12.5 -0.31 never seen"
    assert tokenizer(text, add_special_tokens=False)["input_ids"] == trained.encode(text).ids
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
    chat = tokenizer.apply_chat_template([{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}],
                                         tokenize=False, add_generation_prompt=True)
    assert chat == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.eos_token == IM_END and tokenizer.pad_token == "<|endoftext|>"
    generation = json.loads((folder / "generation_config.json").read_text())
    assert generation["repetition_penalty"] == 1.05 and generation["top_k"] == 20 and generation["do_sample"]
