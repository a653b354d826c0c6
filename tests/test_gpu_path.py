"""The GPU path's fixes, checked on the CPU: no fork after CUDA, GRPO's frozen start sharing the
policy's base weights, micro-batched GRPO, the dtypes of training on CUDA, and the defaults that
follow the device (prompt cache, attention kernels)."""

import os
from types import SimpleNamespace

import pytest

# The process that "initialized CUDA" in the simulation below; a forked child of it is another pid.
SIMULATED_CUDA = {}


def _touches_cuda(tag: str) -> str:
    """What playing a student on the GPU meets in a child forked after CUDA was initialized."""
    if os.getpid() != SIMULATED_CUDA["pid"]:
        raise RuntimeError("Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, "
                           "you must use the 'spawn' start method")
    return tag


def test_students_are_never_played_in_processes_forked_after_cuda_was_initialized(monkeypatch):
    """The gate after GRPO on a GPU: CUDA is initialized and two threads are there to share. The two
    students play in this process, one after the other (forked workers died on the first CUDA run)."""
    import torch

    from rhythm_core.training.side_by_side import run_side_by_side

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setitem(SIMULATED_CUDA, "pid", os.getpid())
    assert run_side_by_side(_touches_cuda, [("student_grpo",), ("student_sft",)], threads=2) == [
        "student_grpo", "student_sft"]


def test_full_parameter_training_keeps_fp32_master_weights_on_cuda_and_lora_a_bf16_base():
    import torch

    from rhythm_core.training.models import weights_dtype

    assert weights_dtype(cuda=True, bf16=True, full_parameters=True) is torch.float32  # bf16 under autocast
    assert weights_dtype(cuda=True, bf16=True, full_parameters=False) is torch.bfloat16  # LoRA base, inference
    assert weights_dtype(cuda=True, bf16=False, full_parameters=False) is torch.float32
    assert weights_dtype(cuda=False, bf16=False, full_parameters=False) is torch.float32


def test_sft_asks_for_master_weights_only_when_it_trains_every_parameter(short_dataset, tmp_path, monkeypatch):
    from rhythm_core.training import sft

    asked = []

    def refuse(path, **kwargs):  # record what SFT asks for, then stop before any training
        asked.append(kwargs)
        raise RuntimeError("stop here")

    monkeypatch.setattr(sft, "load_model_and_tokenizer", refuse)
    for lora in (False, True):
        with pytest.raises(RuntimeError, match="stop here"):
            sft.run_sft(sft.SFTRunConfig(max_steps=1, short_context_steps=0, use_lora=lora, report_to="none"),
                        short_dataset / "sft", tmp_path / f"lora-{lora}")
    assert asked == [{"for_training": True, "full_parameters": True}, {"for_training": True, "full_parameters": False}]


def test_the_prompt_cache_is_unbounded_on_the_cpu_and_holds_a_quarter_of_a_cuda_gpus_free_memory(monkeypatch):
    """A 3B student's prompt states for 100 weeks (14-18 GiB) would not fit a 24 GB GPU beside its
    weights: on CUDA the cache keeps what a quarter of the free memory holds."""
    import torch

    from rhythm_core.training.prompt_cache import prompt_cache_budget

    assert prompt_cache_budget(SimpleNamespace(device=torch.device("cpu"))) is None
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (16 * 2**30, 24 * 2**30))
    assert prompt_cache_budget(SimpleNamespace(device=torch.device("cuda"))) == 4 * 2**30


def test_generation_on_cuda_runs_without_cudnn_attention_unless_asked(monkeypatch):
    import contextlib

    from rhythm_core.training.generation import CUDNN_ATTENTION_ENV, attention_backend, generation_attention

    assert isinstance(generation_attention("cpu"), contextlib.nullcontext)
    assert attention_backend("cpu") == "sdpa: torch's choice"
    monkeypatch.delenv(CUDNN_ATTENTION_ENV, raising=False)
    assert attention_backend("cuda") == "sdpa: flash, memory-efficient or math; cuDNN off"
    assert not isinstance(generation_attention("cuda"), contextlib.nullcontext)
    monkeypatch.setenv(CUDNN_ATTENTION_ENV, "1")
    assert isinstance(generation_attention("cuda"), contextlib.nullcontext)
    assert "cuDNN included" in attention_backend("cuda")


@pytest.fixture(scope="module")
def lora_sft(short_dataset, tmp_path_factory):
    from rhythm_core.training.sft import SFTRunConfig, run_sft

    out = tmp_path_factory.mktemp("lora_sft")
    return run_sft(SFTRunConfig(max_steps=20, short_context_steps=0, use_lora=True, learning_rate=3e-3,
                                eval_examples=8, report_to="none"), short_dataset / "sft", out)


def test_grpos_frozen_start_is_a_second_adapter_on_the_policys_own_base_weights(lora_sft):
    """One copy of the base in memory: the frozen SFT start and the trainable policy read the same
    base tensors (the same storage), the start answers as the SFT checkpoint does, and playing it
    leaves the policy's adapter active, trainable and in training mode."""
    import torch

    from rhythm_core.training.generation import SamplingConfig
    from rhythm_core.training.grpo import policy_and_frozen_start
    from rhythm_core.training.policy import LLMPolicyAgent

    model_dir = lora_sft["model_dir"]
    model, tokenizer, start = policy_and_frozen_start(model_dir, SamplingConfig(max_new_tokens=24))
    policy_bases = {n: p.data_ptr() for n, p in model.named_parameters() if "lora_" not in n}
    start_bases = {n: p.data_ptr() for n, p in start.model.named_parameters() if "lora_" not in n}
    assert policy_bases and policy_bases == start_bases
    assert {n.split(".lora_")[1].split(".")[1] for n, _ in model.named_parameters() if ".lora_" in n} == {"default", "sft"}
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".default." in n for n in trainable)

    # the policy moves away from its start: the start still answers as the SFT checkpoint does
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".lora_B.default." in name:
                param.add_(0.5)
    model.train()
    merged = LLMPolicyAgent.from_checkpoint(model_dir, sampling=SamplingConfig(max_new_tokens=24))
    ids = tokenizer("Monday 08:00 energy 0.62", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        frozen_logits = start.model(input_ids=ids).logits
        sft_logits = merged.model(input_ids=ids).logits
        policy_logits = model(input_ids=ids).logits
    assert torch.allclose(frozen_logits, sft_logits, atol=1e-4)
    assert not torch.allclose(policy_logits, sft_logits, atol=1e-2)
    assert model.training and model.active_adapter == "default"
    assert {n for n, p in model.named_parameters() if p.requires_grad} == trainable


def test_grpo_on_an_adapter_trains_in_micro_batches_and_saves_only_its_adapter(lora_sft, short_dataset, tmp_path):
    """Eight completions a step in micro-batches of four, from a LoRA SFT start: the checkpoint holds
    the trained adapter alone (no copy of the frozen start or of TRL's reference beside it)."""
    from pathlib import Path

    from rhythm_core.training.grpo import GRPORunConfig, run_grpo

    config = GRPORunConfig(max_steps=1, per_device_train_batch_size=4, gradient_accumulation_steps=2,
                           num_generations=4, max_completion_length=24, teacher_prompts=8, student_episodes=0,
                           validation_weeks=2, report_to="none")
    assert config.completions_per_step == 8
    result = run_grpo(config, short_dataset / "sft", lora_sft["model_dir"], tmp_path / "grpo")
    model_dir = Path(result["model_dir"])
    assert result["steps"] == 1 and result["prompts"] == 2  # two prompts of four completions
    assert (model_dir / "adapter_config.json").exists()
    assert not (model_dir / "sft").exists() and not (model_dir / "ref").exists()
    assert result["validation"]["weeks"] >= 1  # the gate played both students


def test_generate_calls_stay_within_a_token_budget_and_keep_the_prompts_order():
    from rhythm_core.training.generation import call_batches

    lengths = [100, 300, 200, 50, 900, 120, 130]
    assert call_batches(lengths, 3, None, 10) == [range(0, 3), range(3, 6), range(6, 7)]  # the CPU: rows only
    batches = call_batches(lengths, 64, 700, 10)
    assert [i for b in batches for i in b] == list(range(len(lengths)))
    for b in batches:
        widest = max(lengths[i] + 10 for i in b)
        assert len(b) == 1 or widest * len(b) <= 700  # a prompt alone over the budget is a call of its own
    assert range(4, 5) in batches


def test_on_cuda_a_3b_students_week_long_prompts_are_split_to_fit_the_free_memory(monkeypatch):
    """64 prompts of 5.2k tokens at once would need ~40 GB on the GPU; with 18 GiB free, each call
    holds what half of it allows at ~119 kB a token (keys and values of 36 layers, one layer's work)."""
    import torch

    from rhythm_core.training.generation import call_batches, token_budget

    config = SimpleNamespace(hidden_size=2048, num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=2,
                             head_dim=128, intermediate_size=11008)
    cpu_model = SimpleNamespace(device=torch.device("cpu"), config=config, dtype=torch.bfloat16)
    assert token_budget(cpu_model) is None
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (18 * 2**30, 24 * 2**30))
    gpu_model = SimpleNamespace(device=torch.device("cuda"), config=config, dtype=torch.bfloat16)
    per_token = 2 * (36 * 2 * 2 * 128 + 4 * 2048 + 3 * 11008)
    assert token_budget(gpu_model) == int(0.5 * 18 * 2**30 / per_token)
    batches = call_batches([5200] * 64, 64, token_budget(gpu_model), 96)
    assert len(batches) > 1 and all(len(b) * 5296 <= token_budget(gpu_model) for b in batches)

