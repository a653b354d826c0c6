"""RhythmEnv for TRL (envs/rhythm_env/text/tool_env.py): the tools a model calls, what a malformed call
answers, the reward against the grader through RhythmEnv, and GRPOTrainer(environment_factory=…)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rhythm_env.graders import get_grader
from rhythm_env.protocol import TOOL_SYSTEM_PROMPT
from rhythm_env.sim import RhythmEnv
from rhythm_env.sim.episode import EpisodeBatch
from rhythm_env.sim.spec import ACTIONS, BELIEF_DIMS, STEPS_PER_EPISODE
from rhythm_env.text.tool_env import PLAY_REQUEST, RhythmToolEnv, WeekGroups, env_prompt_dataset
from rhythm_env.text.week import TextWeek

SEED = 1234


@pytest.fixture(scope="module")
def tool_tokenizer(tmp_path_factory):
    """The Qwen2 stand-in with Qwen2.5's whole (tool-calling) template, its response parser set by TRL."""
    from transformers import AutoTokenizer
    from trl.chat_template_utils import add_response_schema, supports_tool_calling

    from rhythm_core.training.tool_standin import build_tool_standin

    folder = build_tool_standin(tmp_path_factory.mktemp("qwen2_tools"))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert supports_tool_calling(tokenizer)
    return folder, add_response_schema(tokenizer)


def _call(env, name: str, arguments: dict):
    """What TRL's tool loop does with one parsed call: the env's method by name, an exception as the
    tool's error message (GRPOTrainer._tool_call_loop)."""
    tools = {a.lower(): getattr(env, a.lower()) for a in ACTIONS}
    try:
        if name not in tools:
            raise ValueError(f"Tool {name} not found.")
        return tools[name](**arguments)
    except Exception as exc:  # noqa: BLE001 - what TRL does: every tool exception goes back to the model
        return {"error": str(exc)}


def _parsed_call(tokenizer, prefix: list[int], tools, name: str, arguments) -> dict:
    """A canned completion calling `name`, parsed as GRPOTrainer parses what the model generated."""
    from trl.chat_template_utils import parse_response

    text = f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(arguments)}}}\n</tool_call><|im_end|>'
    parsed = parse_response(tokenizer, tokenizer(text)["input_ids"], prefix=prefix, tools=tools)
    return parsed["tool_calls"][0]["function"]


def test_the_tools_are_the_ten_actions_with_the_belief_as_typed_documented_arguments(tool_tokenizer):
    from transformers.utils import get_json_schema

    env = RhythmToolEnv()
    schema = get_json_schema(env.socialize)["function"]
    assert schema["name"] == "socialize" and "restores connection" in schema["description"]
    assert schema["parameters"]["required"] == list(BELIEF_DIMS)
    assert {p["type"] for p in schema["parameters"]["properties"].values()} == {"number"}
    # the prompt TRL renders offers every action as a tool, and nothing else
    _, tokenizer = tool_tokenizer
    methods = [getattr(env, a.lower()) for a in ACTIONS]
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tools=methods, tokenize=False)
    offered = [json.loads(line)["function"]["name"] for line in text.split("<tools>\n")[1].split("\n</tools>")[0]
               .splitlines()]
    assert offered == [a.lower() for a in ACTIONS]


def test_canned_tool_calls_through_trls_parser_play_the_week_and_score_what_the_grader_gives(tool_tokenizer):
    _, tokenizer = tool_tokenizer
    env = RhythmToolEnv(grader="v3")
    first = env.reset(condition="continuous", seed=SEED, prompt=[{"role": "system", "content": TOOL_SYSTEM_PROMPT}])
    assert first.startswith("\nStart of the week") and "Now day 1 morning" in first
    tools = [getattr(env, a.lower()) for a in ACTIONS]
    messages = [{"role": "system", "content": TOOL_SYSTEM_PROMPT}, {"role": "user", "content": PLAY_REQUEST + first}]
    prefix = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True,
                                           return_dict=False)
    rng = np.random.default_rng(0)
    actions, beliefs = rng.integers(0, len(ACTIONS), STEPS_PER_EPISODE), rng.uniform(0, 1, (STEPS_PER_EPISODE, 3))
    malformed = {3: ("deep_work", {"social": 1.5, "morning": 0.5, "work": 0.5}, "belief social must be a number in [0, 1]"),
                 7: ("nap", {"social": 0.5, "morning": -0.1, "work": 0.5}, "belief morning must be a number in [0, 1]"),
                 11: ("dance", {"social": 0.5, "morning": 0.5, "work": 0.5}, "Tool dance not found"),
                 15: ("learn", {"social": 0.5, "morning": 0.5}, "missing 1 required positional argument: 'work'")}
    for t in range(STEPS_PER_EPISODE):
        if t in malformed:
            name, arguments, message = malformed[t]
            call = _parsed_call(tokenizer, prefix, tools, name, arguments)
            before = (env.week.step, env.week.beliefs.copy())
            answer = _call(env, call["name"], call["arguments"])
            assert message in answer["error"]
            assert env.week.step == before[0] and np.array_equal(env.week.beliefs, before[1], equal_nan=True)
        arguments = dict(zip(BELIEF_DIMS, (round(float(b), 2) for b in beliefs[t])))
        call = _parsed_call(tokenizer, prefix, tools, ACTIONS[actions[t]].lower(), arguments)
        answer = _call(env, call["name"], call["arguments"])
        assert env.week.step == t + 1 and answer.startswith(f"{ACTIONS[actions[t]]} anomaly")
    assert "The week is over" in answer
    assert "the week is over" in _call(env, "sleep", {"social": 0.5, "morning": 0.5, "work": 0.5})["error"]

    # The same actions and beliefs through the Gymnasium env, graded as the evaluation grades.
    gym_env = RhythmEnv("continuous")
    gym_env.reset(seed=SEED)
    for a in actions:
        gym_env.step(int(a))
    vec = gym_env.vector
    stated = np.round(beliefs, 2)[None]
    batch = EpisodeBatch("continuous", vec.seeds, vec.factors, vec.meters_history, vec.action_history, stated)
    assert env.get_reward() == get_grader("v3").grade(batch).final_score
    # any grader by name
    v2 = RhythmToolEnv(grader="v2")
    v2.reset(seed=SEED)
    for a, b in zip(actions, stated[0]):
        getattr(v2, ACTIONS[a].lower())(*b)
    assert v2.get_reward() == get_grader("v2").grade(batch).final_score != env.get_reward()
    with pytest.raises(ValueError, match="unknown grader 'v9'; allowed: v2, v3"):
        RhythmToolEnv(grader="v9")


def test_an_unfinished_week_is_played_out_with_the_fallback_and_the_last_belief():
    env = RhythmToolEnv()
    env.reset(seed=SEED)
    env.exercise(0.2, 0.8, 0.4)
    env.deep_work(0.25, 0.75, 0.45)
    reward = env.get_reward()
    week = env.week
    assert week.done and week.invalid.sum() == STEPS_PER_EPISODE - 2
    assert np.allclose(week.beliefs[-1], [0.25, 0.75, 0.45])
    assert week.actions[2:] != [] and week.actions[:2] == ["EXERCISE", "DEEP_WORK"]
    # no stated belief at all: the belief earns nothing, as for an agent that states none
    silent = TextWeek()
    silent.start(seed=SEED)
    assert np.isnan(silent.episode().final_belief).all() and 0.0 <= silent.grade() <= 1.0 and reward != silent.grade()


def test_the_seeds_rules_hold_for_rows_drawn_weeks_and_the_dataset():
    with pytest.raises(ValueError, match="seed 5 is not a training seed"):
        RhythmToolEnv().reset(seed=5)
    with pytest.raises(ValueError, match="seed 9600 is a tuning seed"):
        RhythmToolEnv().reset(seed=9600)
    with pytest.raises(ValueError, match="condition 'ood' is evaluation-only"):
        RhythmToolEnv().reset(condition="ood", seed=10_001)
    assert "Now day 1" in RhythmToolEnv(purpose="evaluation").reset(condition="ood", seed=10_001)
    with pytest.raises(ValueError, match="not an evaluation seed"):
        RhythmToolEnv(purpose="evaluation").reset(seed=1500)
    # without a dataset row: a bare instance refuses to guess; WeekGroups gives a prompt's rollouts one week,
    # the prompts of a batch distinct weeks, a new week each batch, and the task before the first observation
    with pytest.raises(ValueError, match="no seed to play"):
        RhythmToolEnv().reset(prompt=[{"role": "user", "content": ""}])
    groups = WeekGroups(num_generations=3, seed=7)
    pool = [groups() for _ in range(12)]
    for _ in range(2):
        texts = [env.reset(prompt=[{"role": "user", "content": ""}]) for env in pool]
    assert texts[0] == texts[1] == texts[2] != texts[3] and texts[0].startswith(TOOL_SYSTEM_PROMPT)
    weeks = {(instance // 3, batch): set() for instance, batch, _ in groups.played}
    for instance, batch, week in groups.played:
        weeks[instance // 3, batch].add(week)
    assert all(len(w) == 1 for w in weeks.values())
    for batch in (0, 1):  # four prompts, four people
        assert len({next(iter(weeks[group, batch])) for group in range(4)}) == 4
    assert weeks[0, 0] != weeks[0, 1]
    again = WeekGroups(num_generations=3, seed=7)
    for env in [again() for _ in range(12)] * 2:
        env.reset()
    assert sorted(again.played) == sorted(groups.played)  # the same seed, the same weeks
    assert all(1000 <= s <= 9999 and not 9500 <= s < 9700 for *_, s in groups.played)

    rows = env_prompt_dataset("continuous", "1000-1003")
    assert rows["seed"] == [1000, 1001, 1002, 1003] and rows[0]["prompt"][0]["content"] == TOOL_SYSTEM_PROMPT
    with pytest.raises(ValueError, match="is not a training seed"):
        env_prompt_dataset("continuous", "990-1003")
    assert env_prompt_dataset("ood", "10000-10001", purpose="evaluation")["seed"] == [10000, 10001]


def test_grpo_trainer_trains_two_steps_with_the_environment_factory(tool_tokenizer, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    folder, tokenizer = tool_tokenizer
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    dataset = env_prompt_dataset("continuous", "1000-1003")
    config = GRPOConfig(output_dir=str(tmp_path / "grpo"), max_steps=2, per_device_train_batch_size=2,
                        num_generations=2, max_completion_length=48, learning_rate=1e-3, logging_steps=1,
                        report_to="none", use_cpu=True, bf16=False, save_strategy="no", seed=0,
                        max_tool_calling_iterations=4, shuffle_dataset=False)  # step k plays row k, twice (a group of 2)
    trainer = GRPOTrainer(model=model, args=config, train_dataset=dataset, processing_class=tokenizer,
                          environment_factory=RhythmToolEnv)
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "rewards/RhythmToolEnv/mean" in entry]
    assert trainer.state.global_step == 2 and len(logs) == 2
    # every rollout's reward is a week graded by the env: here weeks the random model never acted in
    # (its text is no tool call), so each is the fallback's week on that seed, with no belief
    fallback = {}
    for seed in dataset["seed"]:
        week = TextWeek()
        week.start(seed=seed)
        fallback[seed] = week.grade()
    rewards = [entry["rewards/RhythmToolEnv/mean"] for entry in logs]
    seeds = dataset["seed"]
    assert rewards == pytest.approx([fallback[seeds[k]] for k in range(2)], abs=1e-4)


def test_grpo_trainer_without_a_dataset_plays_one_week_per_prompt(tool_tokenizer, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    folder, tokenizer = tool_tokenizer
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    config = GRPOConfig(output_dir=str(tmp_path / "grpo"), max_steps=2, per_device_train_batch_size=4,
                        num_generations=2, max_completion_length=16, learning_rate=1e-3, logging_steps=1,
                        report_to="none", use_cpu=True, bf16=False, save_strategy="no", seed=0,
                        max_tool_calling_iterations=2)
    groups = WeekGroups(num_generations=2, seed=3)  # a batch of 4 rollouts: two prompts of two generations
    trainer = GRPOTrainer(model=model, args=config, processing_class=tokenizer, environment_factory=groups)
    trainer.train()
    assert trainer.state.global_step == 2 and groups.instances == 4
    weeks = {}
    for instance, batch, week in groups.played:
        weeks.setdefault(batch, [None] * 4)[instance] = week
    assert sorted(weeks) == [0, 1]
    for played in weeks.values():  # one prompt's generations: one week; two prompts: two weeks
        assert played[0] == played[1] != played[2] == played[3]
    assert weeks[0] == [groups.week(i // 2, 0) for i in range(4)]
