"""Whole-week GRPO (rhythm_core/training/week_rollouts.py): TRL's GRPOTrainer with our rollout_func
trains on whole weeks, the environment's tokens masked, log-probabilities from the policy's own
forward, the week's grade as the reward."""

from __future__ import annotations

import numpy as np
import pytest

from rhythm_core.env import RhythmEnv
from rhythm_core.env.episode import EpisodeBatch
from rhythm_core.env.spec import ACTION_INDEX, BELIEF_DIMS, STEPS_PER_EPISODE
from rhythm_core.graders import get_grader
from rhythm_core.protocol import fallback_action, format_answer, parse_answer, render_conversation
from rhythm_core.protocol.numbers import add_increment, signed
from rhythm_core.training.week_rollouts import WeekRollouts, week_grade, week_openings, week_token_ids

SEEDS = [1000, 1001]
FORMAT = dict(variant="compact", prompt_format="chat_labeled")


def _played_conversation(seed: int, answers: list[str]) -> list[dict]:
    env = RhythmEnv("continuous")
    obs, _ = env.reset(seed=seed)
    history = [obs]
    for answer in answers[:-1]:
        parsed = parse_answer(answer)
        obs, *_ = env.step(parsed.action if parsed.valid else fallback_action(history[-1]))
        history.append(obs)
    return render_conversation(history, answers[:-1], **FORMAT) + [{"role": "assistant", "content": answers[-1]}]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A random-init tiny student and its tokenizer, trained on weeks in the chat_labeled format."""
    from rhythm_core.training.tiny import TinyModelConfig, build_tiny_model, train_tokenizer

    rng = np.random.default_rng(0)
    texts = []
    for seed in range(1100, 1104):
        answers = [format_answer(str(rng.choice(list(ACTION_INDEX))),
                                 {d: round(float(v), 2) for d, v in zip(BELIEF_DIMS, rng.uniform(0, 1, 3))}, "")
                   for _ in range(STEPS_PER_EPISODE)]
        texts += [m["content"] for m in _played_conversation(seed, answers)]
    tokenizer = train_tokenizer(texts, 512)
    return build_tiny_model(tokenizer, TinyModelConfig(vocab_size=512)), tokenizer


def test_a_weeks_mask_covers_exactly_the_answers(tiny):
    _, tokenizer = tiny
    answers = [format_answer("SLEEP" if t % 4 == 3 else "LEARN", {"social": 0.4, "morning": 0.5 + t / 100, "work": 0.3},
                             "") for t in range(STEPS_PER_EPISODE)]
    conversation = _played_conversation(1000, answers)
    prompt_ids, completion_ids, env_mask = week_token_ids(tokenizer, conversation)
    assert tokenizer.decode(prompt_ids) == tokenizer.apply_chat_template(conversation[:2], tokenize=False,
                                                                         add_generation_prompt=True)
    # the tokens the mask keeps are the 28 answers, each with the end of its turn; the rest is the env's
    spans, run = [], []
    for token, m in zip(completion_ids, env_mask):
        if m:
            run.append(token)
        elif run:
            spans.append(run)
            run = []
    spans.append(run) if run else None
    assert [tokenizer.decode(s) for s in spans] == [a + tokenizer.eos_token for a in answers]
    env_text = tokenizer.decode([t for t, m in zip(completion_ids, env_mask) if not m])
    for message in conversation[2:]:
        if message["role"] == "user":
            assert message["content"] in env_text


def _chain_answers(rng) -> list[str]:
    """A linear-chain student's week: each belief the previous one plus the reasoning's increments."""
    belief = np.round(rng.uniform(0.2, 0.8, 3), 2)
    answers = []
    for t in range(STEPS_PER_EPISODE):
        increments = np.round(rng.uniform(-0.05, 0.05, 3), 2) if t else np.zeros(3)
        belief = add_increment(belief, increments)
        reasoning = " ".join(f"{d} {signed(v)}" for d, v in zip(BELIEF_DIMS, increments))
        answers.append(format_answer(str(rng.choice(list(ACTION_INDEX))), dict(zip(BELIEF_DIMS, belief)), reasoning))
    return answers


def test_the_belief_numbers_the_decoder_wrote_as_sums_carry_no_loss():
    from rhythm_core.training.tiny import train_tokenizer

    rng = np.random.default_rng(1)
    weeks = [_played_conversation(1100 + n, _chain_answers(rng)) for n in range(12)]
    tokenizer = train_tokenizer([m["content"] for w in weeks for m in w], 2048)
    conversation = weeks[0]
    _, completion_ids, plain = week_token_ids(tokenizer, conversation)
    _, same_ids, summed = week_token_ids(tokenizer, conversation, summed_beliefs=True)
    assert same_ids == completion_ids
    dropped = [n for n, (a, b) in enumerate(zip(plain, summed)) if a != b]
    assert all(plain[n] == 1 and summed[n] == 0 for n in dropped)
    # every belief after the week's first answer is its previous one plus the increments: 27 answers x 3
    assert len(dropped) == (STEPS_PER_EPISODE - 1) * len(BELIEF_DIMS)
    answers = [m["content"] for m in conversation if m["role"] == "assistant"]
    written = [float(tokenizer.decode([completion_ids[n]])) for n in dropped]
    stated = [parse_answer(a).belief_array() for a in answers[1:]]
    assert written == pytest.approx(np.concatenate(stated).tolist())


def test_two_whole_week_grpo_steps_train_on_the_policys_tokens_with_the_weeks_grade(tiny, tmp_path):
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    model, tokenizer = tiny
    openings = week_openings("continuous", SEEDS, **FORMAT)
    weeks = {o[1]["content"]: ("continuous", s) for o, s in zip(openings, SEEDS)}
    rollouts = WeekRollouts(tokenizer, weeks, grader="v3", max_new_tokens=8, seed=3, **FORMAT)
    returned = []

    def recording(prompts, trainer):
        out = rollouts(prompts, trainer)
        returned.append({**out, "prompts": prompts})
        return out

    config = GRPOConfig(output_dir=str(tmp_path / "grpo"), max_steps=2, per_device_train_batch_size=4,
                        num_generations=2, max_completion_length=4096, learning_rate=1e-3, logging_steps=1,
                        report_to="none", use_cpu=True, save_strategy="no", seed=0, temperature=1.0,
                        activation_checkpointing=False)  # as run_grpo trains the tiny model
    before = [p.detach().clone() for p in model.parameters()]
    def answer_length(completions, **kwargs) -> list[float]:
        # A random student's answers are never valid, so every week of a group is the fallback's and
        # grades the same; this second reward gives the group's samples different advantages, so the
        # step has a loss to follow through the masked sequence.
        return [len(c[-1]["content"] if isinstance(c, list) else c) / 1000 for c in completions]

    trainer = GRPOTrainer(model=model, reward_funcs=[week_grade, answer_length], args=config,
                          train_dataset=Dataset.from_dict({"prompt": openings * 2}), processing_class=tokenizer,
                          rollout_func=recording)
    trainer.train()
    assert trainer.state.global_step == 2 and len(returned) == 2
    out = returned[-1]
    # the log-probabilities TRL received are the policy's own, token by token (a fresh forward of each
    # week alone, unpadded, with the model as it was when it played: the first step's weights differ)
    model.eval()
    first = returned[0]
    fresh = []
    trained = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad():
        for p, b in zip(model.parameters(), before):
            p.copy_(b)
        for prompt, completion in zip(first["prompt_ids"], first["completion_ids"]):
            logits = model(input_ids=torch.tensor([prompt + completion])).logits[0].float()
            logps = torch.log_softmax(logits, dim=-1)
            fresh.append(logps[torch.arange(len(prompt) - 1, len(prompt) + len(completion) - 1),
                               torch.tensor(completion)].tolist())
        for p, t in zip(model.parameters(), trained):
            p.copy_(t)
    for mine, theirs in zip(first["logprobs"], fresh):
        assert np.allclose(mine, theirs, atol=1e-3)  # float32: a padded batch against one row alone
    assert any(not torch.equal(a, b) for a, b in zip(before, trained))  # GRPO moved the policy
    # only the policy's tokens carry the loss: TRL took env_mask as the loss mask (its completion
    # lengths count the masked-in tokens alone), which is 0 on every environment turn
    logged = [e["completions/mean_length"] for e in trainer.state.log_history if "completions/mean_length" in e]
    assert logged[-1] == pytest.approx(np.mean([sum(m) for m in out["env_mask"]]))
    # a week ends with its last answer's end of turn: TRL counts it finished, none truncated
    assert all(c[-1] == tokenizer.eos_token_id for c in out["completion_ids"])
    assert [e["completions/clipped_ratio"] for e in trainer.state.log_history if "completions/clipped_ratio" in e] == [0, 0]
    for completion, mask in zip(out["completion_ids"], out["env_mask"]):
        assert len(mask) == len(completion) and 0 < sum(mask) < len(mask)
        env_text = tokenizer.decode([t for t, m in zip(completion, mask) if not m])
        assert env_text.count("Now day") == STEPS_PER_EPISODE - 1
    # each week's reward is the grader's grade of the week its answers played
    for prompt, completion, mask, grade in zip(out["prompts"], out["completion_ids"], out["env_mask"],
                                               out["week_grade"]):
        condition, seed = weeks[prompt[1]["content"]]
        spans, run = [], []
        for token, m in zip(completion, mask):
            if m:
                run.append(token)
            elif run:
                spans.append(tokenizer.decode(run, skip_special_tokens=True))
                run = []
        spans.append(tokenizer.decode(run, skip_special_tokens=True)) if run else None
        env = RhythmEnv(condition)
        obs, _ = env.reset(seed=seed)
        beliefs = np.full((STEPS_PER_EPISODE, 3), np.nan)
        belief = np.full(3, np.nan)
        for t, answer in enumerate(spans):
            parsed = parse_answer(answer)
            if parsed.valid and parsed.belief is not None:
                belief = parsed.belief_array()
            beliefs[t] = belief
            obs, *_ = env.step(parsed.action if parsed.valid else fallback_action(obs))
        vec = env.vector
        batch = EpisodeBatch(condition, vec.seeds, vec.factors, vec.meters_history, vec.action_history, beliefs[None])
        assert len(spans) == STEPS_PER_EPISODE and grade == pytest.approx(get_grader("v3").grade(batch).final_score)
    # the same week's samples differ (a group has something to compare), and TRL logged the reward
    assert len({tuple(c) for c in out["completion_ids"]}) > 1
    assert all("rewards/week_grade/mean" in e for e in trainer.state.log_history if "reward" in e)


def test_prompts_that_are_no_weeks_opening_and_table_formats_are_refused(tiny):
    _, tokenizer = tiny
    with pytest.raises(ValueError, match="whole-week GRPO needs a chat format"):
        week_openings("continuous", SEEDS, variant="compact", prompt_format="table")
    with pytest.raises(ValueError, match="seed 9500 is a tuning seed"):  # GRPO trains on training weeks only
        week_openings("continuous", [9500], **FORMAT)
    with pytest.raises(ValueError, match="'ood' is evaluation-only"):
        week_openings("ood", [9000], **FORMAT)
    with pytest.raises(ValueError, match="a prompt that is no week's opening"):
        WeekRollouts(tokenizer, {}, **FORMAT)([[{"role": "user", "content": "hello"}]], trainer=None)


def test_the_grpo_stage_takes_the_week_design_by_name_and_refuses_what_it_cannot_play(sft_result, short_dataset):
    from rhythm_core.training.grpo import GRPORunConfig, run_grpo

    init = sft_result[0]["model_dir"]
    with pytest.raises(ValueError, match="unknown GRPO design 'month'; allowed: step, week"):
        run_grpo(GRPORunConfig(design="month"), short_dataset / "sft", init, short_dataset / "grpo_month")
    # the session's student reads its week as one table a step: no conversation to sample whole
    with pytest.raises(ValueError, match="whole-week GRPO needs a chat format"):
        run_grpo(GRPORunConfig(design="week"), short_dataset / "sft", init, short_dataset / "grpo_week")


def test_a_qwen2_tokenizers_week_masks_the_environment_and_leaves_its_digit_beliefs_to_the_model(tmp_path):
    """The published student's tokenizer (Qwen2's: every digit a token of its own) renders a week turn
    by turn; no whole-number belief tokens, so the decoder writes no sum and every answer token trains."""
    from rhythm_core.training.models import load_model_and_tokenizer
    from rhythm_core.training.qwen2_standin import build_qwen2_standin

    conversation = _played_conversation(1100, _chain_answers(np.random.default_rng(0)))
    _, tokenizer = load_model_and_tokenizer(str(build_qwen2_standin(tmp_path / "qwen2", [m["content"] for m in conversation] * 3)))
    _, completion_ids, plain = week_token_ids(tokenizer, conversation)
    _, same_ids, summed = week_token_ids(tokenizer, conversation, summed_beliefs=True)
    assert same_ids == completion_ids and summed == plain and completion_ids[-1] == tokenizer.eos_token_id
    answers = [m["content"] for m in conversation if m["role"] == "assistant"]
    kept = tokenizer.decode([t for t, m in zip(completion_ids, plain) if m])
    assert kept == "".join(a + tokenizer.eos_token for a in answers)


def test_the_stages_weeks_write_beliefs_as_the_checkpoint_plays_and_stay_on_training_seeds(tiny):
    """`week_design` plays a linear-chain checkpoint's weeks with the belief sum (as evaluation does)
    and an innovation-chain one's without; its weeks are the training weeks the config names."""
    from rhythm_core.training.grpo import GRPORunConfig, week_design

    _, tokenizer = tiny
    config = GRPORunConfig(design="week", week_seeds=3, max_steps=2)
    for form, summed in (("linear", True), ("innovation", False)):
        prompts, rollouts = week_design(config, tokenizer, "compact", "chat_labeled",
                                        {"readout_form": form, "max_answer_tokens": 40})
        assert rollouts.sum_beliefs is summed and rollouts.max_new_tokens == 60
    assert sorted(s for _, s in rollouts.weeks.values()) == [9000, 9001, 9002]
    assert len(prompts) == config.max_steps * (config.completions_per_step // config.num_generations)
    with pytest.raises(ValueError, match="tuning seed"):
        week_design(GRPORunConfig(design="week", student_seeds_start=9500), tokenizer, "compact", "chat_labeled", {})
