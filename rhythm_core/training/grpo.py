"""GRPO refinement of the SFT student with TRL, rewarded by the real environment and grader.

Design: step-level prompts, not TRL's multi-turn `environment_factory`. Every prompt holds what the
student sees at that step (the conversation so far, or the week's table), and the dataset carries the
env snapshot it was rendered from, so a single answer can be scored exactly by the week it leads to:
the frozen SFT student replays its conversation to the snapshot, says the sampled answer, plays the
rest of the week itself (greedy), and the episode is graded. The answer's value is that grade minus
the grade of the week where the SFT student answers that state itself, so an answer is rewarded for
what this student makes of it: an action that reveals the person, or a better stated belief, pays
through the student's own later beliefs and actions. Continuations by other players lost
(benchmarks/README.md, D24): the heuristic's values information at nothing, and the
Bayesian teacher's values information the student cannot use; both pulled the student down as GRPO
optimized them harder. This gives a dense per-decision reward at the cost of one short simulation,
keeps each sequence to one prompt plus one answer, and lets prompts mix states visited by the
teacher with states the SFT student reaches on its own; they come in runs that share a step of the
week (`order_by_step`), so each GRPO step's answers are finished in one lockstep play (faster than
shuffled prompts; benchmarks/README.md, D27). After training, the gate
(training/validation.py) compares the GRPO student with its SFT start on held-out training weeks.

GRPO samples the action alone. Each prompt ends with the frozen SFT student's own greedy reasoning and
belief for that state (`protocol.action_prefix`), so a completion is the action and the end of the
answer, and the reward scores the whole answer (that prefix plus the completion). The inference the
student distilled — its evidence increments and belief — is kept out of GRPO's reach; what GRPO
refines is which action the student takes given what it believes. Sampling whole answers let GRPO
rewrite the belief numbers too: rewarded on continuous training weeks, it raised the student's belief
error on the more extreme OOD and discrete3 profiles and lowered their scores
(benchmarks/README.md, D28).

Rewards (TRL sums them with `reward_weights`, then normalizes within each group):
  answer_validity  1 if the whole answer parses with a legal action, else 0
  action_value     grade(the SFT student's week after this answer) - grade(its week after its own
                   answer), from the same snapshot (student_continuation_scores), x10, in [-1, 1]
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from rhythm_env.graders import DEFAULT_GRADER, get_grader
from rhythm_env.protocol import DatasetFormat, parse_answer
from rhythm_env.sim import EnvState, VectorRhythmEnv
from rhythm_env.sim.spec import BELIEF_DIMS, STEPS_PER_EPISODE

from ..store import verify_artifact
from ..tracking.callback import attach_tracking
from ..tracking.store import report_to_list
from .adapters import FROZEN_ADAPTER, AdapterView, load_frozen_adapter
from .distributed import is_main, rank, sharding_args, split_batch, world_size
from .fused_head import labelled_positions_only, speedups
from .generation import SamplingConfig
from .grpo_prompts import build_prompt_dataset
from .last_layer import last_layer_on_read_positions
from .models import TINY, checkpoint_info, device_name, load_model_and_tokenizer, prompt_variant, save_tokenizer
from .plots import plot_curves
from .policy import LLMPolicyAgent
from .sft import StreamLogs, model_card
from .validation import compare_students, validation_weeks


@dataclass
class GRPORunConfig:
    # 10 steps of 16 completions (2 prompts x 8): on the demo's SFT student more steps stayed within
    # noise of their start and cost time; the larger budget runs 50 (benchmarks/README.md, D26).
    max_steps: int = 10
    learning_rate: float = 2e-5
    # Completions per optimizer step: per_device_train_batch_size x gradient_accumulation_steps (a
    # multiple of num_generations), sampled together and scored in one play; the loss runs in
    # micro-batches of per_device_train_batch_size, so the activations of a long prompt fit a GPU.
    per_device_train_batch_size: int = 16
    gradient_accumulation_steps: int = 1
    num_generations: int = 8
    max_completion_length: int = 96
    temperature: float = 1.0
    beta: float = 0.02  # KL to the SFT reference (logged as kl)
    # answer_validity, action_value. (A belief reward lost, benchmarks/README.md, D24; and the belief is
    # now the SFT student's own, not sampled.)
    reward_weights: list[float] = field(default_factory=lambda: [0.5, 1.0])
    grader: str = DEFAULT_GRADER
    teacher_prompts: int = 256  # prompts sampled from sft_dataset (teacher-visited states)
    student_episodes: int = 4  # SFT-student episodes played to collect student-visited states
    student_seeds_start: int = 9000  # training seeds for the student's own episodes
    logging_steps: int = 1
    seed: int = 0
    # The gate (training/validation.py): after training, the GRPO student and its SFT start play up to
    # this many of the dataset's validation weeks (held-out training seeds) under `grader`; 0 skips it.
    validation_weeks: int = 64
    report_to: str = "mlflow"  # trainer integrations: mlflow (the run its owner opened), tensorboard, none, "a,b"

    @property
    def completions_per_step(self) -> int:
        return self.per_device_train_batch_size * self.gradient_accumulation_steps


# ---------------------------------------------------------------------------------------------
# rewards
def student_continuation_scores(agent: LLMPolicyAgent, states: list[EnvState], earlier_answers: list[list[str]],
                                answers: list[str | None], grader_name: str) -> np.ndarray:
    """The grade of each episode when the student `agent` (greedy, frozen) has played the week to
    `states[i]` with its conversation's `earlier_answers[i]`, says `answers[i]` at that step (None:
    answers itself) and plays the rest of the week. From any state of a week the agent played itself,
    with answers None, this is that week's own grade. States at the same step are simulated together.
    In the table format the prompt holds no earlier answers, so none are replayed: the week's earlier
    stated beliefs are not restored, and the graded belief is the last one the agent states from the
    snapshot on."""
    from rhythm_env.sim.episode import EpisodeBatch

    grader = get_grader(grader_name)
    scores = np.empty(len(states))
    by_key: dict[tuple, list[int]] = {}
    for i, state in enumerate(states):
        by_key.setdefault((state.condition, state.step), []).append(i)
    for (condition, step), index in by_key.items():
        played = np.concatenate([states[i].action_history for i in index])  # (n, step)
        env = VectorRhythmEnv(condition)
        obs, _ = env.reset(np.concatenate([states[i].seeds for i in index]))
        agent.reset(env)
        for k in range(step):  # the week as it was played: the same seeds and actions give the same state
            agent.follow(obs, [earlier_answers[i][k] if k < len(earlier_answers[i]) else "" for i in index])
            obs, *_ = env.step(played[:, k])
        for t in range(step, STEPS_PER_EPISODE):
            decision = agent.follow(obs, [answers[i] for i in index]) if t == step else agent.act(obs)
            obs, *_ = env.step(decision.actions)
        beliefs = np.full((len(index), STEPS_PER_EPISODE, len(BELIEF_DIMS)), np.nan)
        beliefs[:, -1] = agent.beliefs  # the last stated belief is the one graded
        batch = EpisodeBatch(condition, env.seeds, env.factors, env.meters_history.copy(), env.action_history.copy(),
                             beliefs)
        scores[index] = grader.grade_batch(batch)[0]
    return scores


def _completion_text(completion) -> str:
    if isinstance(completion, list):  # conversational: [{"role": "assistant", "content": ...}]
        return completion[-1]["content"] if completion else ""
    return str(completion)


def _earlier_answers(conversation) -> list[str]:
    return [m["content"] for m in conversation if m["role"] == "assistant"]


REWARD_NAMES = ("answer_validity", "action_value")


def make_reward_functions(grader_name: str, student: LLMPolicyAgent):
    """The reward functions, named as TRL logs them (rewards/<name>/mean). Each sees the whole answer:
    the prompt's `answer_prefix` (the SFT student's own reasoning and belief) plus the sampled
    completion. `student` is the frozen SFT start (greedy) that finishes each week for action_value."""
    # (env_state, earlier answers) -> the grade of the student's week from there when it answers itself
    own_week: dict[tuple, float] = {}

    def whole(completions, answer_prefix) -> list[str]:
        return [prefix + _completion_text(c) for c, prefix in zip(completions, answer_prefix)]

    def answer_validity(completions, answer_prefix, **kwargs) -> list[float]:
        return [1.0 if parse_answer(text).valid else 0.0 for text in whole(completions, answer_prefix)]

    def action_value(completions, answer_prefix, env_state, conversation, **kwargs) -> list[float]:
        earlier = [_earlier_answers(c) for c in conversation]
        keys = [(state, tuple(answers)) for state, answers in zip(env_state, earlier)]
        answers = whole(completions, answer_prefix)
        # The week after an answer depends only on the state and the answer (the student finishes it
        # greedily), and a group's sampled actions repeat, so each distinct answer is played once.
        distinct: dict[tuple, int] = {}
        for i, (key, text) in enumerate(zip(keys, answers)):
            distinct.setdefault((key, text), i)
        fresh = {}  # prompts not yet scored with the student's own answer: one extra week each
        for i, key in enumerate(keys):
            if key not in own_week:
                fresh.setdefault(key, i)
        rows = list(distinct.values()) + list(fresh.values())
        texts = [answers[i] for i in distinct.values()] + [None] * len(fresh)
        scores = student_continuation_scores(student, [EnvState.from_json(env_state[i]) for i in rows],
                                             [earlier[i] for i in rows], texts, grader_name)
        own_week.update(zip(fresh, (float(v) for v in scores[len(distinct):])))
        week = dict(zip(distinct, (float(v) for v in scores[: len(distinct)])))
        diff = np.array([week[key, text] - own_week[key] for key, text in zip(keys, answers)])
        return [float(v) for v in np.clip(10.0 * diff, -1.0, 1.0)]

    return [answer_validity, action_value]


# ---------------------------------------------------------------------------------------------
def policy_and_frozen_start(init_dir, sampling: SamplingConfig):
    """(trainable model, tokenizer, frozen SFT start as an agent) from the SFT checkpoint `init_dir`.
    The frozen start plays the student's states, writes each prompt's reasoning and belief, and
    finishes every scored answer's week for action_value. An adapter's frozen start is a second
    adapter on the policy's own base (adapters.py): one copy of the base weights in memory; a full
    model's is a copy of its own (the tiny model)."""
    is_adapter = (Path(init_dir) / "adapter_config.json").exists()
    model, tokenizer = load_model_and_tokenizer(str(init_dir), for_training=True, full_parameters=not is_adapter)
    if not is_adapter:
        return model, tokenizer, LLMPolicyAgent.from_checkpoint(init_dir, sampling=sampling)
    load_frozen_adapter(model, init_dir)
    return model, tokenizer, LLMPolicyAgent.from_checkpoint(init_dir, sampling=sampling,
                                                            loaded=(AdapterView(model, FROZEN_ADAPTER), tokenizer))


def run_grpo(config: GRPORunConfig, dataset_dir, init_dir, out_dir, *, on_log: Callable[[dict], None] | None = None,
             provenance: dict | None = None) -> dict:
    """GRPO from the SFT checkpoint `init_dir` on teacher- and student-visited states."""
    import torch
    from trl import GRPOConfig, GRPOTrainer

    start = time.perf_counter()
    on_log = on_log or (lambda entry: None)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    verify_artifact(dataset_dir)  # both inputs as they were published
    verify_artifact(init_dir)
    info = checkpoint_info(init_dir)
    variant = prompt_variant(info)
    data_format = DatasetFormat.from_info(info)  # what SFT recorded from the dataset
    prompt_format = data_format.prompt_format
    is_adapter = (Path(init_dir) / "adapter_config.json").exists()
    tiny_base = info.get("config", {}).get("base_model", TINY) == TINY
    greedy = SamplingConfig(max_new_tokens=config.max_completion_length, temperature=0.0)
    model, tokenizer, student = policy_and_frozen_start(init_dir, greedy)
    prompts = build_prompt_dataset(dataset_dir, variant, config, student, data_format)  # refuses another format
    cuda = torch.cuda.is_available()
    # The global batch is the config's on any number of processes (distributed.py).
    per_device, accumulation = split_batch(config.per_device_train_batch_size, config.gradient_accumulation_steps,
                                           world_size())
    args = GRPOConfig(
        output_dir=str(out / "trainer"), max_steps=config.max_steps, learning_rate=config.learning_rate,
        per_device_train_batch_size=per_device, gradient_accumulation_steps=accumulation,
        num_generations=config.num_generations, max_completion_length=config.max_completion_length,
        temperature=config.temperature, beta=config.beta, reward_weights=config.reward_weights, logging_steps=config.logging_steps, save_strategy="no",
        report_to=report_to_list(config.report_to), use_cpu=not cuda, bf16=cuda and torch.cuda.is_bf16_supported(),
        seed=config.seed, shuffle_dataset=False,  # build_prompt_dataset ordered the prompts (order_by_step)
        use_vllm=False, disable_tqdm=True,
        activation_checkpointing=not tiny_base and not sharding_args(),  # gradient checkpointing's name since transformers 5
        **sharding_args(),
    )
    trainer = GRPOTrainer(model=model, reward_funcs=make_reward_functions(config.grader, student), args=args,
                          train_dataset=prompts, processing_class=tokenizer, callbacks=[StreamLogs(on_log).callback])
    attach_tracking(trainer)
    on_log({"step": 0, "total_steps": config.max_steps})  # progress has its end
    # The tiny student's last layer runs at the completion positions only (last_layer.py); real models
    # (adapters, gradient checkpointing) train as they are.
    fast_head = tiny_base and not is_adapter
    with labelled_positions_only(), (last_layer_on_read_positions(model) if fast_head else nullcontext()):
        trainer.train()
    model_dir = out / "model"
    if is_adapter:  # the trained adapter only, not the frozen copies beside it (ours, TRL's reference)
        if is_main():
            model.save_pretrained(str(model_dir), selected_adapters=["default"])
    else:
        trainer.save_model(str(model_dir))  # every rank takes part (a sharded model is gathered); rank 0 writes
    if not is_main():  # the checkpoint, its gate, card and metrics are rank 0's
        return {"rank": rank(), "steps": trainer.state.global_step}
    save_tokenizer(tokenizer, model_dir)

    history = [e for e in trainer.state.log_history if "reward" in e]
    names = list(REWARD_NAMES)
    curves = {name: [(e["step"], e[f"rewards/{name}/mean"]) for e in history if f"rewards/{name}/mean" in e]
              for name in names}
    curves["total"] = [(e["step"], e["reward"]) for e in history]
    plot_curves(curves, out / "reward_curves.png", title="GRPO rewards", ylabel="mean reward")
    kl = [(e["step"], e["kl"]) for e in history if "kl" in e]
    plot_curves({"kl": kl}, out / "kl.png", title="KL to the SFT reference", ylabel="kl")
    within_group_std = [e.get("reward_std") for e in history if e.get("reward_std") is not None]
    zero_std = [e["frac_reward_zero_std"] for e in history if e.get("frac_reward_zero_std") is not None]

    def last(name):
        return curves[name][-1][1] if curves[name] else None

    metrics = {
        "device": device_name(), "steps": trainer.state.global_step, "prompts": len(prompts),
        "speedups": speedups(model, tiny_base and not is_adapter),
        "student_prompts": int(sum(1 for s in prompts["source"] if s == "student")),
        # prompts ending in the student's own reasoning and belief (GRPO samples the action alone);
        # the rest (the student's greedy answer there stated no belief) sample the whole answer
        "action_only_prompts": int(sum(1 for p in prompts["answer_prefix"] if p)),
        "first_reward": curves["total"][0][1] if curves["total"] else None, "final_reward": last("total"),
        **{f"final_{name}": last(name) for name in names},
        "final_kl": kl[-1][1] if kl else None,
        "mean_reward_std_within_groups": float(np.mean(within_group_std)) if within_group_std else None,
        # groups whose completions all scored the same give no learning signal
        "mean_frac_groups_zero_reward_std": float(np.mean(zero_std)) if zero_std else None,
        "mean_kl": float(np.mean([v for _, v in kl])) if kl else None,
        **{f"mean_{name}": float(np.mean([v for _, v in curves[name]])) if curves[name] else None for name in names},
        "processes": world_size(), "per_device_train_batch_size": per_device,
        "init_is_adapter": is_adapter, "prompt_variant": variant, "prompt_format": prompt_format, "wall_s": round(time.perf_counter() - start, 2),
    }
    record = {"stage": "grpo", "config": asdict(config), "prompt_variant": variant, "prompt_format": prompt_format,
              "reasoning": data_format.reasoning, "metrics": metrics,
              "max_answer_tokens": info.get("max_answer_tokens"), "readout_form": info.get("readout_form"),
              "provenance": provenance or {}, "init": str(init_dir), "model_dir": str(model_dir)}
    (model_dir / "rhythm_checkpoint.json").write_text(json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")
    log_history = trainer.state.log_history
    global_step = trainer.state.global_step
    trainer.accelerator.free_memory()  # the gate loads both students anew: let the policy's memory go
    del trainer, model, student
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    if config.validation_weeks > 0:  # the gate: GRPO against its SFT start on held-out training weeks
        weeks = validation_weeks(dataset_dir, config.validation_weeks)
        started = time.perf_counter()
        metrics["validation"] = compare_students(("student_grpo", str(model_dir)), ("student_sft", str(init_dir)),
                                                 weeks, config.grader)
        metrics["validation"]["wall_s"] = round(time.perf_counter() - started, 2)
        on_log({"step": global_step, **{f"validation_{k}": v for k, v in metrics["validation"].items()
                                                       if not isinstance(v, dict)}})
        metrics["wall_s"] = round(time.perf_counter() - start, 2)
        record["metrics"] = metrics
        (model_dir / "rhythm_checkpoint.json").write_text(json.dumps(record, indent=2, sort_keys=True, default=str)
                                                          + "\n")
    (out / "metrics.json").write_text(json.dumps({**metrics, "log_history": log_history}, indent=2,
                                                 default=str) + "\n")
    (model_dir / "README.md").write_text(model_card("grpo", info.get("config", {}).get("base_model", str(init_dir)),
                                                    provenance or {}, asdict(config), metrics))
    return {"path": str(out), "model_dir": str(model_dir), "reward_plot": str(out / "reward_curves.png"),
            "kl_plot": str(out / "kl.png"), **metrics}
