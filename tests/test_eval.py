"""Evaluation: lockstep batching changes nothing for a deterministic policy, results have the
published shape, and bad inputs fail clearly."""

import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from rhythm_core.cli import main
from rhythm_core.evaluation import rollouts
from rhythm_core.evaluation.results import compute_results, eval_results_stage, validate_results
from rhythm_core.evaluation.rollouts import eval_rollouts_stage, play_records
from rhythm_core.training.generation import SamplingConfig
from rhythm_core.training.models import CheckpointError
from rhythm_core.training.policy import LLMPolicyAgent
from rhythm_env.sim import VectorRhythmEnv
from rhythm_env.sim.conditions import eval_seed_list
from rhythm_env.sim.spec import STEPS_PER_EPISODE

SEEDS = {"continuous": "0-3", "ood": "10000-10001", "discrete3": "20000-20002"}


def heuristic_histories(weeks: int, steps: int) -> list[list]:
    """The observations of `weeks` continuous weeks (seeds 0..) played `steps` steps by the heuristic."""
    from rhythm_core.agents import get_agent

    env, heuristic = VectorRhythmEnv("continuous"), get_agent("heuristic")
    obs, _ = env.reset(np.arange(weeks))
    heuristic.reset(env)
    histories = [[obs.item(n)] for n in range(weeks)]
    for _ in range(steps):
        obs, *_ = env.step(heuristic.act(obs).actions)
        for n in range(weeks):
            histories[n].append(obs.item(n))
    return histories


def test_lockstep_batched_equals_sequential_for_greedy_decoding(sft_result):
    agent = LLMPolicyAgent.from_checkpoint(sft_result[0]["model_dir"], sampling=SamplingConfig(max_new_tokens=96))
    seeds = [0, 1, 2, 3, 4, 5]
    batched = play_records(agent, "continuous", seeds, {"id": "student"})
    for seed, together in zip(seeds, batched):
        alone = play_records(agent, "continuous", [seed], {"id": "student"})[0]
        assert [s["raw_answer"] for s in alone["steps"]] == [s["raw_answer"] for s in together["steps"]]
        assert alone["actions"] == together["actions"] and alone["meters"] == together["meters"]


def test_prompt_cache_reuses_shared_prefixes_without_changing_answers(sft_result):
    """Rows of different lengths, one that extends its last prompt, one that goes back in the week,
    one never seen (3): reusing cached prefixes gives the answers of a fresh batched generate."""
    from rhythm_core.training.generation import generate_answers
    from rhythm_core.training.prompt_cache import PromptCache
    from rhythm_env.protocol import render_messages

    agent = LLMPolicyAgent.from_checkpoint(sft_result[0]["model_dir"], sampling=SamplingConfig(max_new_tokens=64))
    histories = heuristic_histories(4, 10)

    def conversations(lengths):
        return [render_messages(h[:k], variant=agent.variant) for h, k in zip(histories, lengths)]

    def answers(lengths, cache=None):
        return generate_answers(agent.model, agent.tokenizer, conversations(lengths), agent.sampling,
                                prompt_cache=cache)

    cache = PromptCache()
    assert answers([3, 9, 6], cache) == answers([3, 9, 6])  # nothing cached yet: plain generation
    assert cache.reused_tokens == 0 and sorted(cache.ids) == [0, 1, 2]
    assert answers([4, 10, 2, 7], cache) == answers([4, 10, 2, 7])
    extended = sum(len(ids) for key, ids in cache.ids.items() if key in (0, 1))
    assert cache.reused_tokens > 0.75 * extended  # the two rows that moved on came mostly from the cache


def test_a_prompt_cache_past_its_byte_budget_lets_go_of_everything_and_keeps_the_answers(sft_result):
    """On a GPU the cache holds only what its budget allows: within it every conversation reuses its
    states; past it the cache holds nothing from then on (caching some rows would split each turn
    into two calls), and every answer is the one of a plain generate either way."""
    from rhythm_core.training.generation import generate_answers
    from rhythm_core.training.prompt_cache import PromptCache
    from rhythm_env.protocol import render_messages

    agent = LLMPolicyAgent.from_checkpoint(sft_result[0]["model_dir"], sampling=SamplingConfig(max_new_tokens=48))
    histories = heuristic_histories(4, 6)

    def answers(step, cache=None):
        conversations = [render_messages(h[:step], variant=agent.variant) for h in histories]
        return generate_answers(agent.model, agent.tokenizer, conversations, agent.sampling, prompt_cache=cache)

    unbounded = PromptCache()
    answers(3, unbounded)
    at_step_3 = unbounded.held_bytes
    roomy, tight = PromptCache(max_bytes=4 * at_step_3), PromptCache(max_bytes=int(1.05 * at_step_3))
    for step in (3, 5, 7):
        plain = answers(step)
        assert answers(step, roomy) == plain and answers(step, tight) == plain
        assert roomy.held_bytes <= roomy.max_bytes
    assert not roomy.overflowed and sorted(roomy.ids) == [0, 1, 2, 3] and roomy.reused_fraction > 0.3
    assert tight.overflowed and not tight.ids and tight.held_bytes == 0  # past it at step 5, for good
    assert 0 < tight.reused_tokens < roomy.reused_tokens


def test_rows_that_share_a_conversation_run_its_prefix_once_with_the_same_answers(sft_result):
    """GRPO's reward finishes many weeks that share a conversation up to the sampled answer: with
    nothing cached, their common prefix is run once (share_prefixes) and the answers are those of a
    plain batched generate."""
    from rhythm_core.training.generation import generate_answers
    from rhythm_core.training.prompt_cache import PromptCache
    from rhythm_env.protocol import render_messages

    agent = LLMPolicyAgent.from_checkpoint(sft_result[0]["model_dir"], sampling=SamplingConfig(max_new_tokens=64))
    histories = heuristic_histories(2, 8)
    # three rows end after 8 shared steps of week 0 with different last steps (from week 0 and 1), one
    # is week 1's own, one is week 0 cut short
    conversations = [render_messages(histories[0][:8] + [histories[k][8]], variant=agent.variant)
                     for k in (0, 1, 0)] + [render_messages(histories[1], variant=agent.variant),
                                            render_messages(histories[0][:3], variant=agent.variant)]
    cache = PromptCache()
    shared = generate_answers(agent.model, agent.tokenizer, conversations, agent.sampling, prompt_cache=cache)
    assert shared == generate_answers(agent.model, agent.tokenizer, conversations, agent.sampling)
    total = cache.computed_tokens + cache.reused_tokens  # every prompt token, run or served
    assert cache.computed_tokens < 0.8 * total  # week 0's first 8 steps ran once for three rows


def test_a_checkpoints_own_generation_config_does_not_change_the_protocols_decoding(sft_result):
    """Real checkpoints recommend their own decoding (Qwen2.5-Instruct's generation_config.json samples
    at 0.7 with top-k 20 and a 1.05 repetition penalty, and a fine-tuned student inherits it): the
    students still decode greedily, with or without the prompt cache, as SamplingConfig says."""
    from transformers import GenerationConfig

    from rhythm_core.training.generation import generate_answers
    from rhythm_core.training.prompt_cache import PromptCache
    from rhythm_env.protocol import render_messages

    agent = LLMPolicyAgent.from_checkpoint(sft_result[0]["model_dir"], sampling=SamplingConfig(max_new_tokens=48))
    obs, _ = VectorRhythmEnv("continuous").reset(np.array([0, 1, 2]))
    conversations = [render_messages([obs.item(n)], variant=agent.variant) for n in range(3)]
    plain = generate_answers(agent.model, agent.tokenizer, conversations, agent.sampling)
    recommended = agent.model.generation_config
    try:
        agent.model.generation_config = GenerationConfig(
            do_sample=True, temperature=0.7, top_p=0.8, top_k=20, repetition_penalty=3.0, no_repeat_ngram_size=2,
            pad_token_id=recommended.pad_token_id, eos_token_id=recommended.eos_token_id)
        assert generate_answers(agent.model, agent.tokenizer, conversations, agent.sampling) == plain
        assert generate_answers(agent.model, agent.tokenizer, conversations, agent.sampling,
                                prompt_cache=PromptCache()) == plain
    finally:
        agent.model.generation_config = recommended


def test_policy_tokenizes_only_new_messages_with_the_ids_of_whole_conversations(sft_result, monkeypatch):
    """The embedded template renders each message on its own, so the policy extends each episode's
    conversation and token ids turn by turn: at every step they equal the conversation rendered and
    tokenized whole, and the play is the one of a policy that renders everything each step."""
    from rhythm_core.agents.rollout import play_lockstep
    from rhythm_core.training.prompt_tokens import conversation_ids
    from rhythm_env.protocol import render_conversation

    sampling = SamplingConfig(max_new_tokens=32, temperature=1.0, seed=5)
    # (this student learned the table format; in a conversation its sampled answers are any text at all)
    agent = LLMPolicyAgent.from_checkpoint(sft_result[0]["model_dir"], sampling=sampling, prompt_format="chat_labeled")
    assert agent.tokenize_by_message
    checked = []

    def checking(*args):  # every step of the recorded play, checked as it is played
        for step in play_lockstep(*args):
            whole = [render_conversation(h, a[:-1], variant=agent.variant, prompt_format=agent.prompt_format)
                     for h, a in zip(agent.histories, agent.answers)]
            assert agent.last_messages == whole
            assert [row + agent.tokens.generation_prompt for row in agent.tokens.rows] == \
                conversation_ids(agent.tokenizer, whole)
            checked.append(step.t)
            yield step

    monkeypatch.setattr(rollouts, "play_lockstep", checking)
    incremental = play_records(agent, "ood", [10000, 10001], {"id": "student"})
    assert checked == list(range(STEPS_PER_EPISODE))
    monkeypatch.undo()
    plain = LLMPolicyAgent.from_checkpoint(sft_result[0]["model_dir"], sampling=sampling, prompt_format="chat_labeled")
    plain.tokenize_by_message = False
    rendered = play_records(plain, "ood", [10000, 10001], {"id": "student"})
    assert plain.tokens is None and incremental == rendered


def test_only_templates_that_render_each_message_alone_are_tokenized_by_message(sft_result):
    from rhythm_core.training.models import load_model_and_tokenizer
    from rhythm_core.training.prompt_tokens import ConversationTokens, extends_by_message

    _, tokenizer = load_model_and_tokenizer(sft_result[0]["model_dir"])
    assert extends_by_message(tokenizer)
    # a template that rewrites earlier turns (here: drops every assistant turn but the last)
    tokenizer.chat_template = tokenizer.chat_template.replace(
        "{% for message in messages %}",
        "{% for message in messages %}{% if message['role'] != 'assistant' or loop.index >= messages|length - 1 %}"
    ).replace("{% endfor %}", "{% endif %}{% endfor %}")
    assert not extends_by_message(tokenizer)
    tokens = ConversationTokens(tokenizer, 1)
    tokens.prompts([[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]])
    with pytest.raises(ValueError, match="conversations may only grow"):
        tokens.prompts([[{"role": "user", "content": "a"}]])


def _greedy_records(model_dir: str, condition: str, seeds: list[int]) -> list[dict]:
    agent = LLMPolicyAgent.from_checkpoint(model_dir, sampling=SamplingConfig(temperature=0.0))
    return play_records(agent, condition, seeds, {"id": "student"})


def _pid_and_threads() -> tuple[int, int]:
    import os

    import torch

    return os.getpid(), torch.get_num_threads()


def _echo_or_fail(text: str) -> str:
    if text.startswith("no"):
        raise ValueError(f"worker said {text}")
    return text


def test_students_played_side_by_side_give_the_records_of_one_after_the_other(sft_result):
    """Two plays in forked workers, one torch thread each, return what the same plays return here,
    in the order of the jobs; a worker's error is raised in the caller."""
    from rhythm_core.processes import forked_workers
    from rhythm_core.training.side_by_side import run_side_by_side

    model = sft_result[0]["model_dir"]
    jobs = [(model, "ood", [10000, 10001, 10002]), (model, "continuous", [0, 1])]
    assert forked_workers(len(jobs), 2) == 2 and forked_workers(len(jobs), 1) == 1
    forked = run_side_by_side(_greedy_records, jobs, threads=2)
    assert [len(records) for records in forked] == [3, 2]
    assert forked == [_greedy_records(*job) for job in jobs]
    with pytest.raises(ValueError, match="worker said no"):
        run_side_by_side(_echo_or_fail, [("yes",), ("no",)], threads=2)
    assert run_side_by_side(_echo_or_fail, [("a",), ("b",), ("c",)], threads=2) == ["a", "b", "c"]
    # two workers, not this process, each on one of the two threads
    import os

    workers = run_side_by_side(_pid_and_threads, [(), ()], threads=2)
    assert all(pid != os.getpid() for pid, _ in workers) and [threads for _, threads in workers] == [1, 1]


def test_prefix_groups_run_each_conversation_once_not_just_the_system_prompt():
    """Four rows share a 70-token system prompt; two pairs share 170 tokens: each pair is a group
    (saving 340 tokens), not all four on the system prompt (210); an unrelated row stays alone."""
    from rhythm_core.training.prompt_cache import _prefix_groups

    system = [0] * 70
    rows = sorted([system + [1] * 100 + [7], system + [1] * 100 + [8], system + [2] * 100 + [7],
                   system + [2] * 100 + [8], [9] * 5])
    assert _prefix_groups(rows, 64) == [(170, [0, 1]), (170, [2, 3])]
    assert _prefix_groups(rows[:2] + [[9] * 5], 200) == []  # shorter than min_tokens: not worth a pass


def test_policy_reuses_prompt_prefixes_across_steps_with_identical_play(sft_result):
    sampling = SamplingConfig(max_new_tokens=32)
    cached = LLMPolicyAgent.from_checkpoint(sft_result[0]["model_dir"], sampling=sampling)
    plain = LLMPolicyAgent.from_checkpoint(sft_result[0]["model_dir"], sampling=sampling, reuse_prompt_cache=False)
    with_cache = play_records(cached, "ood", [10000, 10001], {"id": "student"})
    without = play_records(plain, "ood", [10000, 10001], {"id": "student"})
    assert [[s["raw_answer"] for s in r["steps"]] for r in with_cache] == \
        [[s["raw_answer"] for s in r["steps"]] for r in without]
    assert plain.prompt_cache is None
    assert cached.prompt_cache.reused_tokens > 3 * cached.prompt_cache.computed_tokens  # >75% reused
    assert cached.prompt_cache.reused_fraction > 0.75


@pytest.fixture(scope="module")
def evaluated(sft_result, tmp_path_factory):
    root = tmp_path_factory.mktemp("eval")
    rollouts = eval_rollouts_stage({"student": sft_result[0]["model_dir"]}, SEEDS, root,
                                   sampling=SamplingConfig(max_new_tokens=96), baselines=["heuristic", "bayes"])
    return root, rollouts, eval_results_stage(rollouts["dir"], "v3", root)


def test_results_have_the_published_shape_and_plots(evaluated):
    _, rollouts, result = evaluated
    data = json.loads(Path(result["json"]).read_text())
    validate_results(data)
    assert (data["grader"], data["graders"]) == ("v3", ["v3", "v2"])
    assert list(data["conditions"]) == ["continuous", "ood", "discrete3"]
    block = data["conditions"]["discrete3"]
    assert block["n_episodes"] == 3 and list(block["agents"]) == ["student", "heuristic", "bayes"]
    student = block["agents"]["student"]
    assert abs(sum(student["action_distribution"].values()) - 1) < 1e-9
    assert set(student["by_grader"]) == {"v3", "v2"}
    assert block["agents"]["heuristic"]["wins_vs_heuristic"] is None
    for png in ("final_scores_png", "belief_accuracy_png"):
        assert Path(result[png]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    broken = json.loads(json.dumps(data))
    broken["conditions"]["ood"]["agents"]["student"]["final_score"] = "high"
    with pytest.raises(jsonschema.ValidationError):
        validate_results(broken)


def test_rollouts_hold_no_grader_output_and_regrade_without_models(evaluated):
    _, rollouts, result = evaluated
    text = "".join(p.read_text() for p in Path(rollouts["dir"]).glob("*.jsonl"))
    assert "final_score" not in text and "belief_skill" not in text
    v2 = compute_results(rollouts["dir"], "v2")  # a new grader reads the same files
    assert v2["grader"] == "v2" and v2["conditions"]["continuous"]["agents"]["student"]["final_score"] >= 0
    # ... and gives exactly the v2 scores the v3 results carried beside their own, which differ
    v3 = json.loads(Path(result["json"]).read_text())
    for condition, block in v3["conditions"].items():
        for agent, metrics in block["agents"].items():
            assert v2["conditions"][condition]["agents"][agent]["final_score"] == metrics["by_grader"]["v2"]["final_score"]
    student = v3["conditions"]["continuous"]["agents"]["student"]
    assert student["by_grader"]["v2"]["final_score"] != student["final_score"]
    # the manifest says how each student wrote its beliefs (this one learned no evidence chain)
    files = json.loads((Path(rollouts["dir"]) / "manifest.json").read_text())["files"]
    assert files["student__continuous.jsonl"]["belief_sum"] is False and "belief_sum" not in files["bayes__continuous.jsonl"]


def test_a_students_manifest_entry_says_whether_it_wrote_each_belief_as_the_sum(sft_result, tmp_path):
    """`belief_sum` says whether the belief-sum processor ran, not what the checkpoint asked for: a
    linear-chain record asks for it, and the tiny student's play runs it, greedy or sampled; a Qwen2
    tokenizer (no whole-number belief tokens: the published 3B student's) runs none."""
    from rhythm_core.evaluation.rollouts import _play_file
    from rhythm_core.training.models import checkpoint_info, load_model_and_tokenizer
    from rhythm_core.training.qwen2_standin import build_qwen2_standin

    model_dir = sft_result[0]["model_dir"]
    linear = {**checkpoint_info(model_dir), "readout_form": "linear"}

    def linear_chain(folder, loaded, sampling):
        record = tmp_path / f"{folder.name}_linear_record"
        record.mkdir(exist_ok=True)
        (record / "rhythm_checkpoint.json").write_text(json.dumps(linear))
        return lambda: LLMPolicyAgent.from_checkpoint(record, loaded=loaded, sampling=sampling)

    tiny = load_model_and_tokenizer(model_dir)
    standin = build_qwen2_standin(tmp_path / "qwen2", ['Day 1 morning. {"belief": {"social": 0.42}} +0.05'] * 20)
    greedy, sampled = SamplingConfig(max_new_tokens=8), SamplingConfig(max_new_tokens=8, temperature=0.7)
    players = {
        "tiny_greedy": (linear_chain(Path(model_dir), tiny, greedy), True),
        "tiny_greedy_asked_not_to": (lambda: LLMPolicyAgent.from_checkpoint(model_dir, loaded=tiny, sampling=greedy,
                                                                           sum_beliefs=False), False),
        "tiny_sampled": (linear_chain(Path(model_dir), tiny, sampled), True),  # the sum drawn as the only choice
        "qwen2_greedy": (linear_chain(standin, load_model_and_tokenizer(str(standin)), greedy), False),
    }
    for name, (make, ran) in players.items():
        assert make().sum_beliefs is (name != "tiny_greedy_asked_not_to")  # what the record asks for
        (tmp_path / name).mkdir()
        _, entry, _ = _play_file("student", make, {"id": "student"}, "continuous", [0], tmp_path / name)
        assert entry["belief_sum"] is ran, name


def test_corrupt_checkpoint_fails_clearly_and_publishes_nothing(tmp_path):
    bad = tmp_path / "ckpt"
    bad.mkdir()
    (bad / "config.json").write_text("{ not json")
    with pytest.raises(CheckpointError, match=str(bad)):
        eval_rollouts_stage({"student": str(bad)}, SEEDS, tmp_path / "root")
    assert not (tmp_path / "root").exists()  # the folders the failed run created are gone too
    with pytest.raises(CheckpointError, match="not a model checkpoint"):
        LLMPolicyAgent.from_checkpoint(tmp_path)


def test_training_seeds_are_refused_for_evaluation():
    with pytest.raises(ValueError, match=r"seed 1000 is not an evaluation seed of continuous \(0-999\)"):
        eval_seed_list("continuous", "998-1002")
    assert eval_seed_list("discrete3", "20000-20014") == list(range(20000, 20015))


def test_rhythm_eval_cli(sft_result, tmp_path, capsys):
    code = main(["eval", "--checkpoint", str(Path(sft_result[0]["model_dir"]).parent), "--out", str(tmp_path),
                 "--continuous-seeds", "0-1", "--ood-seeds", "10000", "--discrete3-seeds", "20000-20002",
                 "--baselines", "heuristic", "--max-new-tokens", "96"])
    out = capsys.readouterr().out
    assert code == 0 and "| continuous | student |" in out and "| ood | heuristic |" in out
    assert list(tmp_path.glob("eval_results/*/eval_results.json"))


def test_student_gaps_feed_the_checks_and_a_perfect_belief_is_not_a_missing_one():
    from rhythm_core.evaluation.results import student_gaps

    def agent(score, mae, invalid=0.0):
        return {"final_score": score, "belief_mae": mae, "invalid_rate": invalid}

    results = {"conditions": {
        "continuous": {"agents": {"student_grpo": agent(0.50, 0.0, 0.01), "student_sft": agent(0.40, None, 0.2),
                                  "heuristic": agent(0.45, None), "bayes": agent(0.70, 0.10)}},
        "ood": {"agents": {"student_grpo": agent(0.30, 0.25)}},  # no baselines played: only the invalid rate
        # the fallback-only policy beats the heuristic here: students are measured against it
        "discrete3": {"agents": {"student_grpo": agent(0.50, 0.2), "heuristic": agent(0.45, None),
                                 "fallback": agent(0.48, None, 1.0)}},
    }}
    gaps = student_gaps(results)
    assert gaps["score_vs_heuristic"] == {"continuous/student_grpo": 0.05, "continuous/student_sft": -0.05,
                                          "discrete3/student_grpo": 0.02}
    assert gaps["belief_mae_vs_teacher"] == {"continuous/student_grpo": -0.1, "continuous/student_sft": 0.9}
    assert gaps["invalid_rate"] == {"continuous/student_grpo": 0.01, "continuous/student_sft": 0.2,
                                    "ood/student_grpo": 0.0, "discrete3/student_grpo": 0.0}


def test_every_checkpoint_that_played_gets_its_recovery_whatever_its_name(tmp_path):
    """`rhythm eval --name grpo`: a student is a player whose identity in the rollouts manifest is a
    checkpoint, not a player named student*; a baseline is never one, whatever its name."""
    from functools import partial

    from rhythm_core.agents import get_agent
    from rhythm_core.evaluation.results import headline_figures, markdown_table, recovery, student_gaps, student_names
    from rhythm_core.evaluation.rollouts import _play_file, publish_rollouts
    from rhythm_core.store import staging

    players = {"grpo": ("heuristic_const_belief", {"backend": "checkpoint", "model": "/models/grpo", "id": "grpo"}),
               "student_lookalike": ("random", {"backend": "baseline", "model": "random", "id": "student_lookalike"}),
               "heuristic": ("heuristic", {"backend": "baseline", "model": "heuristic", "id": "heuristic"}),
               "bayes": ("bayes", {"backend": "baseline", "model": "bayes", "id": "bayes"}),
               "oracle": ("oracle", {"backend": "baseline", "model": "oracle", "id": "oracle"})}
    with staging(tmp_path / "eval_rollouts") as staged:
        files = dict(_play_file(name, partial(get_agent, agent), identity, "continuous", [0, 1, 2, 3], staged)[:2]
                     for name, (agent, identity) in players.items())
        rollouts = publish_rollouts(staged, tmp_path, checkpoints={}, seeds={"continuous": "0-3"},
                                    sampling=SamplingConfig(), baselines=[], files=files,
                                    extra_players={name: identity for name, (_, identity) in players.items()})
    results = compute_results(rollouts["dir"], "v3")  # validated against the published shape
    agents = results["conditions"]["continuous"]["agents"]
    grpo, lookalike = agents["grpo"], agents["student_lookalike"]
    assert grpo["recovery"] == pytest.approx(recovery(grpo["final_score"], agents["heuristic"]["final_score"],
                                                      agents["bayes"]["final_score"]))
    assert grpo["belief_gap_vs_teacher"]["n"] == 4
    assert lookalike["recovery"] is None and "belief_gap_vs_teacher" not in lookalike
    assert student_names(results) == ["grpo"]
    assert f"| continuous | grpo | {grpo['final_score']:.3f} |" in markdown_table(results)
    assert f"{grpo['recovery']:.0%} |" in markdown_table(results).split("| grpo |")[1].splitlines()[0]
    figures = headline_figures(results)
    assert "continuous/grpo/recovery" in figures and "continuous/grpo/invalid_rate" in figures
    assert "continuous/student_lookalike/invalid_rate" not in figures
    assert set(student_gaps(results)["invalid_rate"]) == {"continuous/grpo"}
    # a document without the players' identities (older, or made by hand): the players named student*
    assert student_names({"conditions": results["conditions"]}) == ["student_lookalike"]
    # distilled from another teacher that played (the oracle stands in for it): recovery measures
    # against that teacher, recovery_bayes against the Bayesian one
    distilled = compute_results(rollouts["dir"], "v3", provenance={"distilled_from": "oracle"})
    block = distilled["conditions"]["continuous"]
    grpo = block["agents"]["grpo"]
    assert block["recovery_teacher"] == "oracle" and grpo["recovery"] is not None
    assert grpo["recovery"] == pytest.approx(recovery(grpo["final_score"], agents["heuristic"]["final_score"],
                                                      agents["oracle"]["final_score"]))
    assert grpo["recovery_bayes"] is not None and grpo["recovery_bayes"] == pytest.approx(agents["grpo"]["recovery"])
    assert "of bayes')" in markdown_table(distilled).split("| grpo |")[1].splitlines()[0]


def test_recovery_is_the_share_of_the_teachers_margin_over_the_heuristic():
    from rhythm_core.evaluation.results import recovery

    assert recovery(0.55, 0.45, 0.65) == pytest.approx(0.5)
    assert recovery(0.65, 0.45, 0.65) == pytest.approx(1.0)
    assert recovery(0.40, 0.45, 0.65) == pytest.approx(-0.25)
    assert recovery(0.50, 0.45, 0.44) is None  # no margin to recover


def test_the_belief_check_judges_the_paired_gap_against_its_noise(tmp_path):
    """The student's belief gap to the teacher is paired week by week; the check fails only when it
    exceeds 0.02 by more than two standard errors (a CPU's rounding moved the OOD gap to 0.028 ± 0.009)."""

    from rhythm_core.evaluation.results import paired_belief_gap
    from rhythm_env.sim.episode import EpisodeBatch
    from rhythm_pipeline.defs.checks import belief_verdict

    def batch(seeds, maes):
        fake = EpisodeBatch.__new__(EpisodeBatch)
        fake.seeds, fake.belief_mae = np.array(seeds), (lambda: np.array(maes, dtype=float))
        return fake

    teacher = batch([3, 1, 2], [0.10, 0.20, 0.30])
    gap = paired_belief_gap(batch([1, 2, 3], [0.25, 0.33, np.nan]), teacher)  # seed order differs; no belief = 1.0
    assert gap["n"] == 3 and gap["mean"] == pytest.approx((0.05 + 0.03 + 0.90) / 3)
    assert gap["se"] == pytest.approx(np.std([0.05, 0.03, 0.90], ddof=1) / np.sqrt(3))

    def run_check(mean, se):
        agents = {"bayes": {"final_score": 0.6, "belief_mae": 0.118, "invalid_rate": 0.0},
                  "student_sft": {"final_score": 0.6, "belief_mae": 0.118 + mean, "invalid_rate": 0.0,
                                  "belief_gap_vs_teacher": {"mean": mean, "se": se, "n": 50}}}
        return belief_verdict({"conditions": {"ood": {"agents": agents}}})

    within_noise = run_check(0.028, 0.009)
    assert within_noise.passed and "within noise: ood/student_sft" in within_noise.description
    assert run_check(0.015, 0.009).passed
    beyond = run_check(0.045, 0.009)
    assert not beyond.passed and "beyond 2 standard errors: ood/student_sft" in beyond.description
