"""Tiny SFT and GRPO end to end on CPU: the loss falls, the checkpoint reloads with transformers and
answers in the protocol format more often than the untrained model, and GRPO rewards vary within
groups. Short-history prompts (the first 8 steps of each week) keep this under a minute."""

import json

import numpy as np
import pytest

from rhythm_core.training.models import play_info, prompt_variant
from rhythm_core.training.sft import SFTRunConfig
from rhythm_env.protocol import parse_answer
from rhythm_env.sim import VectorRhythmEnv
from rhythm_env.sim.spec import ACTIONS, STEPS_PER_EPISODE


def test_sft_loss_falls_and_streams_logs(sft_result):
    result, logs = sft_result
    assert result["final_train_loss"] < 0.5 * result["first_train_loss"]
    assert result["eval_loss"] is not None and result["eval_loss"] < result["first_train_loss"]
    assert [entry["step"] for entry in logs if "loss" in entry][:3] == [10, 20, 30]
    assert result["trainable_parameters"] == result["total_parameters"] > 100_000  # tiny: full training


def test_sft_checkpoint_reloads_and_answers_in_protocol_format(sft_result, short_dataset):
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rhythm_core.training.generation import SamplingConfig, generate_answers
    from rhythm_core.training.sft import with_system_prompt
    from rhythm_core.training.tiny import build_tiny_model

    result, _ = sft_result
    model = AutoModelForCausalLM.from_pretrained(result["model_dir"])
    tokenizer = AutoTokenizer.from_pretrained(result["model_dir"])
    tokenizer.padding_side = "left"
    validation = with_system_prompt(datasets.load_from_disk(str(short_dataset / "sft"), keep_in_memory=True)["validation"], "compact")
    conversations = [row["messages"][:-1] for row in validation]
    sampling = SamplingConfig(max_new_tokens=120)
    trained = [parse_answer(a).valid for a in generate_answers(model, tokenizer, conversations, sampling)]
    untrained = [parse_answer(a).valid for a in
                 generate_answers(build_tiny_model(tokenizer), tokenizer, conversations, sampling)]
    assert np.mean(trained) > np.mean(untrained)
    assert np.mean(trained) >= 0.5
    card = (result["model_dir"] + "/README.md")
    assert "Base model: `tiny`" in open(card).read()
    info = json.loads(open(result["model_dir"] + "/rhythm_checkpoint.json").read())
    assert info["prompt_variant"] == "compact" and info["stage"] == "sft"
    assert prompt_variant(play_info(result["model_dir"])) == prompt_variant(info) == "compact"


def test_a_record_without_a_prompt_variant_plays_the_full_prompt():
    # every reader of a checkpoint (the player, GRPO, the belief probe) resolves the variant the same way
    assert prompt_variant({}) == prompt_variant({"prompt_variant": None}) == "full"
    assert prompt_variant({"prompt_variant": "compact", "stage": "grpo"}) == "compact"


def test_sft_tokenizes_weeks_once_exactly_as_trl_prepares_them(sft_result, short_dataset, tmp_path):
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from rhythm_core.training.sft import tokenized_weeks, with_system_prompt

    tokenizer = AutoTokenizer.from_pretrained(sft_result[0]["model_dir"])
    rows = datasets.load_from_disk(str(short_dataset / "sft"), keep_in_memory=True)["train"].select(range(6)).select_columns(["messages"])
    rows = with_system_prompt(rows, "compact")
    trl = SFTTrainer(model=AutoModelForCausalLM.from_pretrained(sft_result[0]["model_dir"]), train_dataset=rows,
                     args=SFTConfig(output_dir=str(tmp_path), assistant_only_loss=True, max_length=4096, report_to=[],
                                    use_cpu=True, activation_checkpointing=False),
                     processing_class=tokenizer).train_dataset
    ours = tokenized_weeks(rows, tokenizer)
    assert ours["input_ids"] == trl["input_ids"] and ours["labels"] == trl["labels"]
    assert all(0 < sum(label != -100 for label in labels) < len(labels) for labels in ours["labels"])


def test_tokenizer_keeps_numbers_and_actions_compact(sft_result):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(sft_result[0]["model_dir"])
    for action in ACTIONS:
        assert len(tokenizer(f" {action}", add_special_tokens=False)["input_ids"]) == 1, action
    assert len(tokenizer(" +0.03 -0.12 +0.00", add_special_tokens=False)["input_ids"]) <= 4
    # A role header is one token, and no token crosses from it into the answer: the generation prompt
    # ends where a trained turn's header ends, so the student starts its answer as it learned to.
    for role in ("user", "assistant"):
        assert len(tokenizer(f"{role}\n", add_special_tokens=False)["input_ids"]) == 1, role
    conversation = [{"role": "user", "content": "Now day 1 morning"},
                    {"role": "assistant", "content": '{"reasoning":"social +0.00","action":"NAP"}'}]
    trained = tokenizer(tokenizer.apply_chat_template(conversation, tokenize=False), add_special_tokens=False)
    prompt = tokenizer(tokenizer.apply_chat_template(conversation[:1], tokenize=False, add_generation_prompt=True),
                       add_special_tokens=False)
    assert trained["input_ids"][: len(prompt["input_ids"])] == prompt["input_ids"]


def test_grpo_rewards_vary_within_groups_and_checkpoint_saves(sft_result, short_dataset, monkeypatch, tmp_path):
    from rhythm_core.training import grpo, grpo_prompts
    from rhythm_core.training.grpo import GRPORunConfig, run_grpo

    plays, ordered = [], []  # the (condition, step) pairs each action_value call plays from; the prompt order
    score, order = grpo.student_continuation_scores, grpo_prompts.order_by_step

    def recorded(agent, states, *args):
        plays.append({(s.condition, s.step) for s in states})
        return score(agent, states, *args)

    monkeypatch.setattr(grpo, "student_continuation_scores", recorded)
    monkeypatch.setattr(grpo_prompts, "order_by_step", lambda *args: ordered.extend(order(*args)) or ordered)
    built, build = [], grpo.build_prompt_dataset
    monkeypatch.setattr(grpo, "build_prompt_dataset", lambda *args: built.append(build(*args)) or built[-1])
    result = run_grpo(GRPORunConfig(max_steps=3, teacher_prompts=32, student_episodes=1, temperature=0.8),
                      short_dataset / "sft", sft_result[0]["model_dir"], tmp_path / "grpo_out")
    assert result["steps"] == 3
    # TRL takes the prompts in order_by_step's order, two a step, and each step's prompts mostly share
    # their step, so one lockstep play scores them (two of 60 shuffled prompts over 28 steps rarely do)
    assert plays == [{(r["condition"], r["step"]) for r in ordered[k: k + 2]} for k in (0, 2, 4)]
    assert sum(len(keys) == 1 for keys in plays) >= 2
    assert result["mean_reward_std_within_groups"] > 0
    # TRL reads six prompts (3 steps of 2), drawn from the teacher's states and one student episode's
    assert result["prompts"] == 6 and len(ordered) == 32 + 28
    # each prompt is the conversation in the chat template, then the SFT student's own reasoning and
    # belief for that state, so GRPO samples the action alone
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(sft_result[0]["model_dir"])
    (dataset,) = built
    for row in dataset:
        template = tokenizer.apply_chat_template(row["conversation"], tokenize=False, add_generation_prompt=True)
        assert row["prompt"] == template + row["answer_prefix"]
        assert row["answer_prefix"] == "" or parse_answer(row["answer_prefix"] + '},"action":"NAP"}').valid
    assert result["action_only_prompts"] == sum(bool(p) for p in dataset["answer_prefix"]) > 0
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(result["model_dir"])
    # no evidence chain in this data, so no belief is written as a sum, before GRPO or after it
    records = [json.loads(open(d + "/rhythm_checkpoint.json").read()) for d in (sft_result[0]["model_dir"], result["model_dir"])]
    assert [r.get("readout_form") for r in records] == [None, None]
    assert list((short_dataset / "sft").rglob("cache-*")) == []  # read in memory: the artifact is untouched


def test_grpo_prompts_come_in_runs_that_share_a_step_so_one_play_scores_them():
    from rhythm_core.training.grpo_prompts import order_by_step

    rows = [{"condition": c, "step": s, "id": i} for i, (c, s) in
            enumerate([("continuous", s) for s in range(7) for _ in range(3)] + [("ood", 2)] * 2)]
    ordered = order_by_step(rows, 2, seed=0)
    assert sorted(r["id"] for r in ordered) == list(range(len(rows)))  # every prompt, once
    pairs = [ordered[k: k + 2] for k in range(0, len(ordered) - 1, 2)]  # the 23rd prompt comes last, alone
    shared = sum(a["condition"] == b["condition"] and a["step"] == b["step"] for a, b in pairs)
    assert shared == 8  # 7 steps of 3 and one of 2: the 7 odd ones out make 3 mixed pairs and a single
    assert order_by_step(rows, 2, seed=0) == ordered and order_by_step(rows, 2, seed=1) != ordered


def test_grpo_prompt_text_tokenizes_to_exactly_the_chat_templates_tokens(sft_result):
    """TRL tokenizes a text prompt with the tokenizer's special tokens; the text must give the chat
    template's tokens, with a BOS the template writes and the tokenizer adds written once."""
    import copy

    from tokenizers.processors import TemplateProcessing
    from transformers import AutoTokenizer

    from rhythm_core.training.grpo_prompts import prompt_texts

    tiny = AutoTokenizer.from_pretrained(sft_result[0]["model_dir"])
    with_bos = copy.deepcopy(tiny)  # a Llama-style tokenizer: its template and its tokenizer both add BOS
    with_bos.chat_template = "{{ bos_token }}" + tiny.chat_template
    with_bos.backend_tokenizer.post_processor = TemplateProcessing(
        single=f"{tiny.bos_token} $A", special_tokens=[(tiny.bos_token, tiny.bos_token_id)])
    conversations = [[{"role": "system", "content": "Help the person."}, {"role": "user", "content": "Start 0.50"}],
                     [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                      {"role": "user", "content": "c"}]]
    for tokenizer in (tiny, with_bos):
        for conversation, text in zip(conversations, prompt_texts(tokenizer, conversations)):
            template = tokenizer.apply_chat_template(conversation, tokenize=True, add_generation_prompt=True,
                                                     return_dict=True)["input_ids"]
            assert tokenizer(text)["input_ids"] == template
    assert with_bos.apply_chat_template(conversations[0], tokenize=True, add_generation_prompt=True,
                                        return_dict=True)["input_ids"][:2].count(tiny.bos_token_id) == 1


def test_the_gate_names_grpo_only_when_it_is_ahead_beyond_a_standard_error():
    from rhythm_core.training.validation import paired_verdict

    rng = np.random.default_rng(0)
    noise = rng.normal(0, 0.07, 64)  # per-week differences: a standard error of about 0.009
    for shift, better, worse in ((0.0005, "sft", False), (0.03, "grpo", False), (-0.03, "sft", True)):
        verdict = paired_verdict(noise - noise.mean() + shift, "grpo", "sft")
        assert verdict["difference"] == pytest.approx(shift, abs=1e-4)
        assert (verdict["better"], verdict["worse_beyond_noise"]) == (better, worse), shift


def test_action_value_plays_the_students_own_week_and_is_zero_for_its_own_answer(sft_result):
    from rhythm_core.agents.rollout import play_lockstep, rollout
    from rhythm_core.training.generation import SamplingConfig
    from rhythm_core.training.grpo import make_reward_functions, student_continuation_scores
    from rhythm_core.training.policy import LLMPolicyAgent
    from rhythm_env.graders import get_grader
    from rhythm_env.protocol import action_prefix, fallback_action, format_answer, parse_answer

    student = LLMPolicyAgent.from_checkpoint(sft_result[0]["model_dir"],
                                             sampling=SamplingConfig(max_new_tokens=96, temperature=0.0))
    seeds = [1500, 1501]
    snapshots, prompts = [], []
    for step in play_lockstep(student, VectorRhythmEnv("continuous"), seeds, snapshots=True):
        snapshots.append(step.snapshot)
        prompts.append(student.last_messages)
    answers = [list(a) for a in student.answers]
    own = get_grader("v3").grade_batch(rollout(student, "continuous", seeds))[0]
    for k in (0, 13, STEPS_PER_EPISODE - 1):  # from any state of its week, the student plays that week again
        states = [snapshots[k].episode(i) for i in range(len(seeds))]
        earlier = [a[:k] for a in answers]
        np.testing.assert_allclose(student_continuation_scores(student, states, earlier, [None, None], "v3"), own)
        np.testing.assert_allclose(student_continuation_scores(student, states, earlier, [a[k] for a in answers],
                                                               "v3"), own)

    k = 13
    state = snapshots[k].episode(0)
    belief = {"social": 0.5, "morning": 0.5, "work": 0.5}
    texts = [answers[0][k]] + [format_answer(a, belief, "") for a in ACTIONS] + ["nonsense"]
    completions = [[{"role": "assistant", "content": t}] for t in texts]
    validity, action_value = make_reward_functions("v3", student)
    n = len(texts)
    context = {"env_state": [state.to_json()] * n, "conversation": [prompts[k][0]] * n}
    values = action_value(completions, answer_prefix=[""] * n, **context)
    assert values[0] == 0.0  # the SFT student's own answer is its own week
    weeks = student_continuation_scores(student, [state] * n, [answers[0][:k]] * n, texts, "v3")
    assert values == pytest.approx(list(np.clip(10 * (weeks - own[0]), -1, 1)))
    assert len(set(np.round(values[1:-1], 6))) > 2  # actions really differ in what the student's week makes of them
    own_is_valid = float(parse_answer(texts[0]).valid)  # the tiny student's own answer need not be
    assert validity(completions, answer_prefix=[""] * n) == [own_is_valid] + [1.0] * (n - 2) + [0.0]
    # An unusable answer is played as the safe fallback action it leads to (and states no belief).
    fallback = format_answer(fallback_action(state.observation()), None, "")
    garbled = action_value([completions[-1], [{"role": "assistant", "content": fallback}]], answer_prefix=[""] * 2,
                           env_state=context["env_state"][:2], conversation=context["conversation"][:2])
    assert garbled[0] == garbled[1]
    # GRPO samples the action alone: the rewards score the prompt's prefix (reasoning and belief) plus
    # the completion, so a prefix with the rest of an answer is worth what the whole answer is.
    whole = texts[1:-1]
    prefixes = [action_prefix(t) for t in whole]
    assert all(prefixes) and all(t.startswith(p) and '"action"' not in p for t, p in zip(whole, prefixes))
    rests = [[{"role": "assistant", "content": t[len(p):]}] for t, p in zip(whole, prefixes)]
    m = len(whole)
    assert action_value(rests, answer_prefix=prefixes, env_state=context["env_state"][:m],
                        conversation=context["conversation"][:m]) == pytest.approx(values[1:-1])
    assert validity(rests, answer_prefix=prefixes) == [1.0] * m
    assert validity(rests[:1], answer_prefix=[""]) == [0.0]  # the rest alone is no answer


def test_lora_path_trains_an_adapter_and_reloads_merged(short_dataset, tmp_path, caplog):
    """The PEFT LoRA path real models take, exercised on the tiny model (no download here). Examples
    cut to a max_length below the conversations' are said in the log and the result."""
    from pathlib import Path

    from rhythm_core.training.models import load_model_and_tokenizer
    from rhythm_core.training.sft import SFTRunConfig, run_sft

    with caplog.at_level("WARNING", logger="rhythm_core"):
        result = run_sft(SFTRunConfig(max_steps=4, short_context_steps=0, use_lora=True, merge_lora=True,
                                      learning_rate=1e-3, eval_examples=8, max_length=100),
                         short_dataset / "sft", tmp_path / "lora")
    assert result["steps"] == 4
    assert result["max_length"] == 100 and result["longest_conversation_tokens"] > 100
    over = result["conversations_over_max_length"]
    assert 0 < over <= result["train_examples"]
    assert f"SFT: {over} of {result['train_examples']} training conversations are longer than max_length 100 tokens (the longest {result['longest_conversation_tokens']})" in caplog.text
    model_dir = Path(result["model_dir"])
    assert (model_dir / "adapter_config.json").exists() and not (model_dir / "model.safetensors").exists()
    assert 0 < result["trainable_parameters"] < result["total_parameters"]
    assert (Path(result["merged_dir"]) / "config.json").exists()
    model, tokenizer = load_model_and_tokenizer(str(model_dir))  # adapter merged on load
    assert not hasattr(model, "peft_config")


def test_the_recipe_trains_in_two_phases_plays_its_own_conversation_and_feeds_grpo(tmp_path, monkeypatch):
    """The default recipe end to end: an evidence dataset in the labeled chat format; SFT in two
    phases (the first tokens of each week, then whole weeks) with its format recorded in the
    checkpoint; the policy keeps one conversation per episode with its own answers in it; GRPO
    prompts are conversation prefixes ending at a user turn, with the env state of that decision."""
    import datasets

    from rhythm_core.data.sft_dataset import build_sft_dataset, dataset_format, save_sft_dataset
    from rhythm_core.teacher.run import run_teacher
    from rhythm_core.teacher.settings import TeacherSettings
    from rhythm_core.teacher.trajectories import read_trajectories
    from rhythm_core.training.generation import SamplingConfig
    from rhythm_core.training.grpo import GRPORunConfig, run_grpo
    from rhythm_core.training.grpo_prompts import _teacher_prompts, build_prompt_dataset
    from rhythm_core.training.policy import LLMPolicyAgent
    from rhythm_core.training.sft import SFTRunConfig, run_sft, with_system_prompt
    from rhythm_env.sim import EnvState

    run_teacher(TeacherSettings(), "continuous", range(1100, 1108), tmp_path / "teacher.jsonl")
    records = read_trajectories(tmp_path / "teacher.jsonl").records
    save_sft_dataset(build_sft_dataset(records, validation_fraction=0.25), tmp_path / "sft", {"note": "recipe"})
    weeks = datasets.load_from_disk(str(tmp_path / "sft"))
    logs = []
    result = run_sft(SFTRunConfig(max_steps=4, per_device_train_batch_size=2, eval_examples=2, logging_steps=1,
                                  short_context_steps=3, short_context_length=256),
                     tmp_path / "sft", tmp_path / "sft_out", on_log=logs.append)
    # three steps on each week's first 256 tokens, then four on whole weeks: one run, steps counted through
    assert (result["steps"], result["short_context_steps"]) == (7, 3)
    assert [e["step"] for e in logs if "loss" in e] == [1, 2, 3, 4, 5, 6, 7]
    phases = [e.get("phase") for e in json.loads(open(result["path"] + "/metrics.json").read())["log_history"]
              if "loss" in e]
    assert phases == ["short_context"] * 3 + [None] * 4
    info = json.loads(open(result["model_dir"] + "/rhythm_checkpoint.json").read())
    assert (info["prompt_format"], info["reasoning"]) == ("chat_labeled", "evidence")

    # GRPO's student keeps its SFT start's chain, so it too writes each belief as the sum
    # (one prompt of two short completions: the record is what is checked, not what GRPO learns)
    grpo = run_grpo(GRPORunConfig(max_steps=1, teacher_prompts=2, student_episodes=0, validation_weeks=0,
                                  temperature=0.8, per_device_train_batch_size=2, num_generations=2,
                                  max_completion_length=16), tmp_path / "sft", result["model_dir"], tmp_path / "grpo_out")
    assert json.loads(open(grpo["model_dir"] + "/rhythm_checkpoint.json").read())["readout_form"] == "linear"
    assert LLMPolicyAgent.from_checkpoint(grpo["model_dir"], sampling=SamplingConfig(max_new_tokens=4)).sum_beliefs

    agent = LLMPolicyAgent.from_checkpoint(result["model_dir"], sampling=SamplingConfig(max_new_tokens=6))
    assert agent.prompt_format == "chat_labeled"
    # a student of the linear chain writes each belief as the previous one plus its increment
    assert info["readout_form"] == "linear" and agent.sum_beliefs
    innovation = tmp_path / "innovation_record"
    innovation.mkdir()
    (innovation / "rhythm_checkpoint.json").write_text(json.dumps({**info, "readout_form": "innovation"}))
    assert not LLMPolicyAgent.from_checkpoint(innovation, loaded=(agent.model, agent.tokenizer)).sum_beliefs
    from rhythm_core.training import generation

    asked, processors = [], generation.number_processors
    monkeypatch.setattr(generation, "number_processors",
                        lambda sampling, tokenizer, sum_beliefs=False: asked.append(sum_beliefs) or
                        processors(sampling, tokenizer, sum_beliefs))
    env = VectorRhythmEnv("continuous")
    obs, _ = env.reset([9000, 9001])
    agent.reset(env)
    for t in range(5):
        decision = agent.act(obs)
        messages = agent.last_messages[0]
        assert [m["role"] for m in messages] == ["system"] + ["user", "assistant"] * t + ["user"]
        assert [m["content"] for m in messages if m["role"] == "assistant"] == agent.answers[0][:t]
        obs, *_ = env.step(decision.actions)
    assert agent.answers[1][4] == decision.reasoning[1]  # its own raw answer stays in its conversation
    assert asked == [True] * 5  # every step's generation wrote its beliefs as the sum

    save_sft_dataset(build_sft_dataset(records, validation_fraction=0.25, prompt_format="table", reasoning="none"),
                     tmp_path / "sft_table", {"note": "table"})

    # GRPO prompts the student the way it learned: a dataset of another format is refused.
    with pytest.raises(ValueError, match="GRPO needs the dataset its SFT start was trained on"):
        build_prompt_dataset(tmp_path / "sft_table", "compact", GRPORunConfig(), None, dataset_format(weeks))
    teacher = with_system_prompt(weeks["train"], "compact")
    prompts = _teacher_prompts(teacher, GRPORunConfig(teacher_prompts=20, seed=1), dataset_format(weeks))
    assert len(prompts) == 20
    for row in prompts:
        assert row["prompt"][-1]["role"] == "user" and row["prompt"][0]["role"] == "system"
        assert sum(m["role"] == "user" for m in row["prompt"]) == row["step"] + 1
        assert EnvState.from_json(row["env_state"]).step == row["step"]


def test_numeric_embeddings_put_near_values_near_each_other():
    import torch

    from rhythm_core.training.tiny import TinyModelConfig, build_tiny_model, train_tokenizer

    text = " ".join(f"+0.{i:02d} -0.{i:02d} 0.{i:02d} 0.{i // 10}" for i in range(100)) + " day 3 of 28 DEEP_WORK"
    tokenizer = train_tokenizer([text] * 5, vocab_size=1500)
    plain = build_tiny_model(tokenizer, TinyModelConfig(seed=3, numeric_embedding_dims=0)).get_input_embeddings().weight
    model = build_tiny_model(tokenizer, TinyModelConfig(seed=3, numeric_embedding_dims=33))
    weight = model.get_input_embeddings().weight.detach()
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()

    def emb(token: str) -> torch.Tensor:
        ids = tokenizer(token, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1, token
        return weight[ids[0], :33]

    cos = torch.nn.functional.cosine_similarity
    assert cos(emb(" 0.60"), emb(" 0.62"), dim=0) > cos(emb(" 0.60"), emb(" 0.20"), dim=0) + 0.3
    assert cos(emb(" +0.08"), emb(" +0.09"), dim=0) > cos(emb(" +0.08"), emb(" -0.08"), dim=0) + 0.3
    assert float(emb(" -0.30")[0]) < 0 < float(emb(" +0.30")[0])  # the first feature is the value itself
    word = tokenizer(" DEEP_WORK", add_special_tokens=False)["input_ids"][0]
    assert torch.all(weight[word, :33] == 0) and torch.equal(weight[word, 33:], plain.detach()[word, 33:])
    with pytest.raises(ValueError, match="numeric_embedding_dims"):
        build_tiny_model(tokenizer, TinyModelConfig(numeric_embedding_dims=1))


def test_a_pretrained_base_model_trains_on_whole_conversations_unless_told_otherwise():
    # A Qwen2-tokenized week is 4.2k-5.2k tokens (every digit a token): 4096 drops its last 1-7 answers.
    from rhythm_core.training.sft import SFTRunConfig

    assert SFTRunConfig().length_for(5000) == 4096  # the tiny model's weeks fit in 4096 of its tokens
    assert SFTRunConfig(base_model="Qwen/Qwen2.5-3B-Instruct").length_for(5123) == 5123
    assert SFTRunConfig(base_model="Qwen/Qwen2.5-3B-Instruct", max_length=2048).length_for(5123) == 2048


def test_a_pretrained_base_model_skips_the_from_scratch_short_context_phase():
    # 600 steps at 3e-3 form the tiny model's number-reading circuits; a pretrained model already reads
    # numbers, so by default it goes straight to whole weeks, unless the user asks for the phase.
    assert SFTRunConfig().short_steps == 600
    assert SFTRunConfig(base_model="Qwen/Qwen2.5-3B-Instruct").short_steps == 0
    assert SFTRunConfig(base_model="Qwen/Qwen2.5-3B-Instruct", short_context_steps=50).short_steps == 50
    assert SFTRunConfig(short_context_steps=0).short_steps == 0


def test_the_fused_head_projects_only_answer_tokens_on_cpu_with_the_same_loss_and_gradients(monkeypatch):
    """SFT and GRPO run TRL's fused LM head; on CPU it projects every position unless
    labelled_positions_only is open. Open, it projects only the labelled ones (the answers: ~28% of a
    week) and the loss and gradients are the ones projecting everything gives."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl.trainer import utils as trl_utils

    from rhythm_core.training.fused_head import labelled_positions_only

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2))
    trl_utils.add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))
    input_ids = torch.randint(0, 64, (3, 20))
    labels = torch.full_like(input_ids, -100)
    labels[:, 12:16] = input_ids[:, 12:16]  # an "answer" of 4 tokens in each row
    projected = []
    apply = trl_utils._ChunkedLogProbFunction.apply
    monkeypatch.setattr(trl_utils._ChunkedLogProbFunction, "apply",
                        lambda hidden, *args: projected.append(hidden.shape[0]) or apply(hidden, *args))

    def loss_and_grads():
        model.zero_grad()
        out = model(input_ids=input_ids, labels=labels, fused_lm_head=True)
        out.loss.backward()
        return out.loss.detach(), [p.grad.clone() for p in model.parameters()]

    everything, grads_everything = loss_and_grads()
    with labelled_positions_only() as active:
        answers_only, grads_answers_only = loss_and_grads()
    assert active
    assert projected == [3 * 19, 3 * 4]  # shifted: 19 positions a row before, the 4 labelled ones now
    torch.testing.assert_close(answers_only, everything)
    for a, b in zip(grads_answers_only, grads_everything):
        torch.testing.assert_close(a, b)
    assert trl_utils._use_triton(torch.device("cpu")) is False  # closed again: TRL's own choice is back


def test_the_last_layer_at_read_positions_gives_the_loss_and_gradients_of_the_full_model(monkeypatch):
    """With last_layer_on_read_positions open, the tiny student's last layer runs its queries,
    attention and MLP only where the loss reads the output (before each labelled token); the loss and
    every gradient are those of the full model, padding and rows of different answer lengths included,
    and forwards without labels (generation) run the layer as it is."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl.trainer import utils as trl_utils

    from rhythm_core.training import last_layer
    from rhythm_core.training.fused_head import labelled_positions_only

    calls = []
    at_read = last_layer._at_read_positions
    monkeypatch.setattr(last_layer, "_at_read_positions", lambda *a: calls.append(a[3].sum().item()) or at_read(*a))
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2))
    trl_utils.add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))
    input_ids = torch.randint(0, 64, (3, 24))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[2, 20:] = 0  # a shorter, right-padded row
    labels = torch.full_like(input_ids, -100)
    labels[0, 5:9] = input_ids[0, 5:9]
    labels[0, 15:18] = input_ids[0, 15:18]
    labels[1, 1:3] = input_ids[1, 1:3]
    labels[2, 10:19] = input_ids[2, 10:19]

    def loss_and_grads():
        model.zero_grad()
        out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, fused_lm_head=True)
        out.loss.backward()
        return out.loss.detach(), [p.grad.clone() for p in model.parameters()]

    with labelled_positions_only():
        full, full_grads = loss_and_grads()
        with last_layer.last_layer_on_read_positions(model) as active:
            read, read_grads = loss_and_grads()
            plain = model(input_ids=input_ids[:, :10]).logits  # no labels: the layer as it is
    # the status check's small batch (5 read positions), then the one labelled forward at its 18
    assert active and calls == [5, 4 + 3 + 2 + 9]
    torch.testing.assert_close(read, full)
    for a, b in zip(read_grads, full_grads):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(plain, model(input_ids=input_ids[:, :10]).logits)
    assert "forward" not in vars(model.model.layers[-1])  # closed again: the class's forward


def test_training_leaves_the_published_dataset_folder_as_it_was(sft_result, short_dataset):
    """SFT (the fixture's run) reads the dataset in memory: no datasets cache file lands in the
    artifact's folder. The GRPO test checks the same after its run."""
    assert sorted(p.name for p in (short_dataset / "sft").rglob("cache-*")) == []


def test_the_cpu_speedups_apply_to_the_locked_libraries_and_say_why_when_they_stop(monkeypatch):
    """Both speed-ups lean on private pieces of TRL and transformers. With the locked releases they
    apply (this test fails when a release moves them); when a piece moves, training falls back to the
    libraries' own path and the result says why, naming the release."""
    import torch
    import transformers
    import trl
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.models.llama import modeling_llama
    from trl.trainer import utils as trl_utils

    from rhythm_core.training.fused_head import fused_head_status, labelled_positions_only, speedups
    from rhythm_core.training.last_layer import last_layer_on_read_positions, last_layer_status

    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=32, num_hidden_layers=2,
                                         num_attention_heads=8, num_key_value_heads=2))
    assert fused_head_status() is None and last_layer_status(model) is None
    assert speedups(model, True) == {"cpu_kernels": torch.backends.cpu.get_cpu_capability(),
                                     "generation_attention": "sdpa: torch's choice",
                                     "fused_head": "on: labelled positions only",
                                     "last_layer": "on: read positions only"}

    # a release whose layer rotates differently from the re-implementation
    monkeypatch.setattr(modeling_llama, "apply_rotary_pos_emb", lambda q, k, cos, sin, *args, **kwargs: (q, k))
    assert last_layer_status(model) == (f"transformers {transformers.__version__}: the Llama layer no longer "
                                        "matches its re-implementation at the read positions")
    with last_layer_on_read_positions(model) as applied:
        assert applied is False and "forward" not in vars(model.model.layers[-1])  # the layer as it is

    monkeypatch.delattr(trl_utils, "_use_triton")
    assert fused_head_status() == (f"trl {trl.__version__} has no trl.trainer.utils._use_triton: its fused LM head "
                                   "projects every position on CPU")
    with labelled_positions_only() as applied:
        assert applied is False
