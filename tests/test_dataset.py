"""The SFT dataset: examples, splits, extra columns, card, atomic save and Hub push (fake api, offline)."""

from __future__ import annotations

import copy
import inspect
import json
import shutil
from pathlib import Path

import datasets
import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from huggingface_hub import CommitInfo, HfApi, RepoUrl

from rhythm_core.data.card import dataset_card
from rhythm_core.data.hub import push_to_hub
from rhythm_core.data.sft_dataset import assign_splits, save_sft_dataset
from rhythm_core.data.sft_dataset import build_sft_dataset as build_recipe_dataset
from rhythm_core.data.summary import check_no_eval_seeds, content_hash, seed_ranges
from rhythm_core.teacher.run import run_teacher
from rhythm_core.teacher.settings import TeacherSettings
from rhythm_core.teacher.trajectories import read_trajectories
from rhythm_env.protocol import SYSTEM_PROMPT, parse_answer
from rhythm_env.sim import EnvState, RhythmEnv, VectorRhythmEnv
from rhythm_env.sim.profiles import sample_factors
from rhythm_env.sim.spec import ACTION_INDEX, METERS, STEPS_PER_EPISODE, true_belief


def build_sft_dataset(records, **kwargs):
    """These tests pin what they check: the table format with the teacher's reasoning unless they ask
    for another (the recipe's defaults, chat_labeled + evidence, are tested in test_evidence.py)."""
    return build_recipe_dataset(records, **{"prompt_format": "table", "reasoning": "full", **kwargs})


SEEDS = list(range(1000, 1012))
CANARY = "hf_" + "CANARYtokenDoNotLeak0123456789abcdef"  # built, so no token-shaped literal is committed
PROVENANCE = {
    "teacher": {"backend": "bayes", "model": "bayes-kalman-1", "id": "bayes"},
    "grader": "v3",
    "filter": "none",
    "env_version": "rhythm-env-1",
    "source_file": "teacher_trajectories.jsonl",
    "source_sha256": "0" * 64,
}


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> list[dict]:
    path = tmp_path_factory.mktemp("traj") / "teacher.jsonl"
    run_teacher(TeacherSettings(backend="bayes"), "continuous", SEEDS, path)
    return read_trajectories(path).records


@pytest.fixture(scope="module")
def eval_record(tmp_path_factory) -> dict:
    path = tmp_path_factory.mktemp("traj_eval") / "teacher.jsonl"
    run_teacher(TeacherSettings(backend="bayes"), "continuous", [5], path)
    return read_trajectories(path).records[0]


@pytest.fixture(scope="module")
def built(records):
    return build_sft_dataset(records, validation_fraction=0.2, seed=0)


def _rows(dd):
    return [(split, row) for split in dd for row in dd[split]]


def _split_seeds(dd) -> dict[str, set[int]]:
    return {split: set(dd[split]["seed"]) for split in dd}


def _step(records, seed, t) -> dict:
    return next(r for r in records if r["seed"] == seed)["steps"][t]


# ---- examples ----------------------------------------------------------------------------------
def test_chat_format_is_one_conversation_per_episode(records):
    from rhythm_core.data.sft_dataset import dataset_format
    from rhythm_env.protocol import render_chat_turn

    chat = build_sft_dataset(records, validation_fraction=0.2, prompt_format="chat")
    assert dataset_format(chat).as_dict() == {"prompt_format": "chat", "reasoning": "full"}
    assert sum(len(chat[s]) for s in chat) == len(SEEDS)
    for _, row in _rows(chat):
        record = next(r for r in records if r["seed"] == row["seed"])
        roles = [m["role"] for m in row["messages"]]
        assert roles == ["system"] + ["user", "assistant"] * STEPS_PER_EPISODE
        answers = [parse_answer(m["content"]) for m in row["messages"] if m["role"] == "assistant"]
        assert [a.action for a in answers] == record["actions"]
        assert [a.belief for a in answers] == [s["parsed"]["belief"] for s in record["steps"]]
        assert row["steps"] == list(range(STEPS_PER_EPISODE)) and len(row["env_states"]) == STEPS_PER_EPISODE
        # each user turn is rendered from exactly the state its env_state restores
        history = [EnvState.from_json(s).observation() for s in row["env_states"]]
        users = [m["content"] for m in row["messages"] if m["role"] == "user"]
        assert users == [render_chat_turn(history[: t + 1]) for t in range(STEPS_PER_EPISODE)]
        assert np.allclose([o.meters for o in history], record["meters"][:STEPS_PER_EPISODE])
    assert not check_no_eval_seeds(chat)
    assert "prompt format | chat" in dataset_card(chat, PROVENANCE)


def test_labeled_chat_format(records):
    from rhythm_core.data.sft_dataset import dataset_format
    from rhythm_env.protocol import render_labeled_turn

    data = build_sft_dataset(records, validation_fraction=0.2, prompt_format="chat_labeled", reasoning="none")
    assert dataset_format(data).as_dict() == {"prompt_format": "chat_labeled", "reasoning": "none"}
    assert sum(len(data[s]) for s in data) == len(SEEDS)
    for _, row in _rows(data):
        record = next(r for r in records if r["seed"] == row["seed"])
        history = [EnvState.from_json(s).observation() for s in row["env_states"]]
        users = [m["content"] for m in row["messages"] if m["role"] == "user"]
        assert users == [render_labeled_turn(history[: t + 1]) for t in range(STEPS_PER_EPISODE)]
        answers = [parse_answer(m["content"]) for m in row["messages"] if m["role"] == "assistant"]
        assert [a.action for a in answers] == record["actions"]
        for answer, step in zip(answers, record["steps"]):
            assert answer.belief == {d: round(v, 2) + 0.0 for d, v in step["parsed"]["belief"].items()}
    assert "prompt format | chat_labeled" in dataset_card(data, PROVENANCE)


def test_reasoning_none_keeps_belief_and_action_only(records):
    bare = build_sft_dataset(records, validation_fraction=0.2, prompt_format="chat", reasoning="none")
    full = build_sft_dataset(records, validation_fraction=0.2, prompt_format="chat")
    for (_, b), (_, f) in zip(_rows(bare), _rows(full)):
        for mb, mf in zip(b["messages"], f["messages"]):
            if mb["role"] != "assistant":
                assert mb == mf
                continue
            pb, pf = parse_answer(mb["content"]), parse_answer(mf["content"])
            assert pb.reasoning == "" and pf.reasoning and (pb.action, pb.belief) == (pf.action, pf.belief)
    with pytest.raises(ValueError, match="unknown reasoning"):
        build_sft_dataset(records, reasoning="some")


def test_chat_format_leaves_out_episodes_with_a_fallback_step(records):
    broken = copy.deepcopy(records)
    step = broken[0]["steps"][5]
    step["invalid"], step["parsed"] = True, {**step["parsed"], "valid": False}
    chat = build_sft_dataset(broken, validation_fraction=0.2, prompt_format="chat")
    assert sum(len(chat[s]) for s in chat) == len(SEEDS) - 1
    assert broken[0]["seed"] not in {row["seed"] for _, row in _rows(chat)}



def test_one_example_per_step_with_canonical_teacher_answer(records, built):
    assert set(built) == {"train", "validation"}
    assert sum(len(built[s]) for s in built) == len(SEEDS) * STEPS_PER_EPISODE
    seen = set()
    for _, row in _rows(built):
        step = _step(records, row["seed"], row["step"])
        roles = [m["role"] for m in row["messages"]]
        assert roles == ["system", "user", "assistant"]
        assert row["messages"][0]["content"] == SYSTEM_PROMPT
        assert row["messages"][1]["content"] == step["prompt"]
        parsed = parse_answer(row["messages"][2]["content"])
        assert parsed.valid and parsed.action == step["action"]
        assert parsed.belief == step["parsed"]["belief"]
        assert row["condition"] == "continuous" and row["teacher"] == "bayes"
        seen.add((row["seed"], row["step"]))
    assert len(seen) == len(SEEDS) * STEPS_PER_EPISODE


def test_fallback_step_is_dropped(records):
    edited = copy.deepcopy(records)
    rec = edited[3]
    rec["steps"][5]["invalid"] = True
    rec["steps"][5]["parsed"].update(valid=False, action=None, belief=None, error="no JSON object found")
    rec["invalid"][5] = True
    dd = build_sft_dataset(edited, validation_fraction=0.2)
    keys = {(row["seed"], row["step"]) for _, row in _rows(dd)}
    assert len(keys) == len(SEEDS) * STEPS_PER_EPISODE - 1
    assert (rec["seed"], 5) not in keys
    assert (rec["seed"], 4) in keys and (rec["seed"], 6) in keys  # the rest of the episode stays
    split = next(s for s in dd if rec["seed"] in set(dd[s]["seed"]))
    episodes = len(set(dd[split]["seed"]))
    assert len(dd[split]) == episodes * STEPS_PER_EPISODE - 1
    assert f"| {split} | {episodes} | {len(dd[split])} | 1 |" in dataset_card(dd, PROVENANCE)  # reported


def test_parsed_action_disagreeing_with_taken_action_is_an_error(records):
    edited = copy.deepcopy(records[:2])
    step = edited[0]["steps"][2]
    step["parsed"]["action"] = "NAP" if step["action"] != "NAP" else "SLEEP"
    with pytest.raises(ValueError, match="not the action taken"):
        build_sft_dataset(edited)


def test_replay_mismatch_is_an_error(records):
    edited = copy.deepcopy(records[:2])
    edited[1]["meters"][7][0] += 0.01
    with pytest.raises(ValueError, match=f"seed {edited[1]['seed']}.*step 7"):
        build_sft_dataset(edited)
    from rhythm_core.teacher.trajectories import TrajectoryError, replay_check

    replay_check(records[:2])  # the untouched records replay exactly
    with pytest.raises(TrajectoryError, match=f"episode 2 \\(seed {edited[1]['seed']}\\).*1 episode\\(s\\) differ"):
        replay_check(edited)


def test_duplicate_and_empty_inputs(records):
    with pytest.raises(ValueError, match="twice"):
        build_sft_dataset([records[0], records[0]])
    with pytest.raises(ValueError, match="no episodes"):
        build_sft_dataset(records, keep_seeds={42})
    with pytest.raises(ValueError, match="validation_fraction"):
        build_sft_dataset(records, validation_fraction=0.0)


# ---- splits ------------------------------------------------------------------------------------
def test_split_by_episode_and_deterministic(records, built):
    by_split = _split_seeds(built)
    assert not by_split["train"] & by_split["validation"]
    assert by_split["train"] | by_split["validation"] == set(SEEDS)
    assert by_split["validation"]
    for split in built:  # every episode in a split has all its steps there
        counts = {s: list(built[split]["seed"]).count(s) for s in by_split[split]}
        assert set(counts.values()) == {STEPS_PER_EPISODE}

    again = build_sft_dataset(list(reversed(records)), validation_fraction=0.2, seed=0)
    assert _split_seeds(again) == by_split
    assert content_hash(again) == content_hash(built)
    assert [r for _, r in _rows(again)] == [r for _, r in _rows(built)]
    assert dataset_card(again, PROVENANCE) == dataset_card(built, PROVENANCE)

    others = [build_sft_dataset(records, validation_fraction=0.2, seed=s) for s in (1, 2, 3)]
    changed = [o for o in others if _split_seeds(o) != by_split]
    assert changed  # the split seed matters, and the content hash sees the split
    assert all(content_hash(o) != content_hash(built) for o in changed)


def test_split_of_an_episode_does_not_depend_on_the_others():
    everything = assign_splits([("continuous", s) for s in range(1000, 1400)], 0.1, seed=7)
    part = assign_splits([("continuous", s) for s in range(1000, 1400, 3)], 0.1, seed=7)
    assert all(everything[ep] == split for ep, split in part.items())
    share = sum(v == "validation" for v in everything.values()) / len(everything)
    assert 0.05 < share < 0.15


def test_at_least_one_validation_episode(records):
    dd = build_sft_dataset(records[:2], validation_fraction=0.001)
    assert len(_split_seeds(dd)["validation"]) == 1 and len(_split_seeds(dd)["train"]) == 1
    dd = build_sft_dataset(records[:2], validation_fraction=0.999)
    assert len(_split_seeds(dd)["train"]) == 1
    single = build_sft_dataset(records[:1])
    assert len(single["validation"]) == 0 and len(single["train"]) == STEPS_PER_EPISODE


def test_keep_seeds_filter(records):
    keep = {1001, 1004, 1007, 1010}
    dd = build_sft_dataset(records, keep_seeds=keep, validation_fraction=0.2)
    seeds = _split_seeds(dd)
    assert seeds["train"] | seeds["validation"] == keep
    assert sum(len(dd[s]) for s in dd) == len(keep) * STEPS_PER_EPISODE
    assert "keep_seeds: 4 of 12 episodes kept" in dataset_card(dd, {"grader": "v3"})


# ---- extra columns ------------------------------------------------------------------------------
def test_true_belief_column(built):
    for _, row in _rows(built):
        expected = true_belief(sample_factors("continuous", [row["seed"]]))[0]
        assert row["true_belief"] == pytest.approx(expected.tolist(), abs=1e-12)
        assert len(row["true_belief"]) == 3


def test_env_state_restores_the_prompt_state(records, built):
    env = VectorRhythmEnv("continuous")
    for _, row in _rows(built):
        state = EnvState.from_dict(json.loads(row["env_state"]))
        assert state.step == row["step"] and state.seeds.tolist() == [row["seed"]]
        obs = env.restore(state)
        step = _step(records, row["seed"], row["step"])
        observed = step["observation"]
        assert obs.step == row["step"]
        np.testing.assert_allclose(obs.meters[0], [observed["meters"][m] for m in METERS], atol=5.1e-5)
        if row["step"] > 0:
            assert obs.item(0).last_action == observed["last_action"]
            np.testing.assert_allclose(obs.anomaly[0], [observed["anomaly"][m] for m in METERS], atol=5.1e-5)
        after, *_ = env.step(np.array([ACTION_INDEX[step["action"]]]))
        assert after.meters[0].tolist() == [step["meters_after"][m] for m in METERS]
    # the scalar env restores the same one-episode snapshot
    row = built["train"][10]
    scalar = RhythmEnv("continuous")
    obs = scalar.restore(EnvState.from_dict(json.loads(row["env_state"])))
    assert obs.step == 10


# ---- eval seeds ---------------------------------------------------------------------------------
def test_check_no_eval_seeds(records, eval_record, built):
    assert check_no_eval_seeds(built) == []
    # the builder refuses evaluation seeds; a dataset made some other way is still caught by the check
    with pytest.raises(ValueError, match="seed 5 is not a training seed"):
        build_sft_dataset(records + [eval_record], validation_fraction=0.2)
    leaked = datasets.DatasetDict({**built, "validation": built["validation"].map(lambda row: {"seed": 5})})
    assert check_no_eval_seeds(leaked) == [("continuous", 5)]
    assert "evaluation seeds present | continuous 5" in dataset_card(leaked, PROVENANCE)


# ---- card ---------------------------------------------------------------------------------------
def _front_matter(card: str) -> dict:
    assert card.startswith("---\n")
    head, _, _ = card[4:].partition("\n---\n")
    return yaml.safe_load(head)


def test_dataset_card(built):
    card = dataset_card(built, PROVENANCE)
    meta = _front_matter(card)
    assert meta["license"] and meta["task_categories"] == ["text-generation"] and "sft" in meta["tags"]
    assert meta["configs"][0]["data_files"] == [
        {"split": "train", "path": "data/train-*"},
        {"split": "validation", "path": "data/validation-*"},
    ]
    splits = {s["name"]: s["num_examples"] for s in meta["dataset_info"]["splits"]}
    assert splits == {s: len(built[s]) for s in built}
    assert [f["name"] for f in meta["dataset_info"]["features"]] == list(built["train"].features)
    seeds = _split_seeds(built)
    for text in ("bayes-kalman-1", "| grader | v3 |", PROVENANCE["source_sha256"], "rhythm-env-1",
                 f"| train | {len(seeds['train'])} | {len(built['train'])} |",
                 f"| validation | {len(seeds['validation'])} | {len(built['validation'])} |",
                 f"continuous ({len(seeds['validation'])}): {seed_ranges(seeds['validation'])}",
                 "Episodes per condition: continuous 12.", content_hash(built)):
        assert text in card, text
    assert dataset_card(built, PROVENANCE) == card


def test_card_refuses_secrets(built):
    with pytest.raises(ValueError, match="secret"):
        dataset_card(built, {**PROVENANCE, "hf_token": "abc"})
    with pytest.raises(ValueError, match="token"):
        dataset_card(built, {**PROVENANCE, "note": CANARY})


def test_seed_ranges():
    assert seed_ranges([1005, 1000, 1001, 1002, 1002]) == "1000-1002, 1005"
    assert seed_ranges([]) == "none"


# ---- save ---------------------------------------------------------------------------------------
def test_save_is_atomic_and_replaces(records, built, tmp_path, monkeypatch):
    out = tmp_path / "sft"
    summary = save_sft_dataset(built, out, PROVENANCE)
    assert summary["path"] == str(out)
    assert summary["examples"] == {s: len(built[s]) for s in built}
    assert summary["episodes"] == {s: len(v) for s, v in _split_seeds(built).items()}
    assert summary["content_hash"] == content_hash(built)
    loaded = datasets.load_from_disk(str(out))
    assert content_hash(loaded) == summary["content_hash"]
    assert (out / "README.md").read_text() == dataset_card(built, PROVENANCE) == dataset_card(loaded, PROVENANCE)
    saved = json.loads((out / "provenance.json").read_text())
    assert saved["grader"] == "v3" and saved["sft_dataset"]["content_hash"] == summary["content_hash"]

    smaller = build_sft_dataset(records, keep_seeds={1000, 1001, 1002}, validation_fraction=0.2)
    second = save_sft_dataset(smaller, out, PROVENANCE)
    assert second["content_hash"] != summary["content_hash"]
    assert content_hash(datasets.load_from_disk(str(out))) == second["content_hash"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sft"]  # no temp or old dirs left

    def broken_save(self, path, *args, **kwargs):
        Path(path, "partial").write_text("half written")
        raise OSError("disk full")

    monkeypatch.setattr(datasets.DatasetDict, "save_to_disk", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_sft_dataset(built, out, PROVENANCE)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sft"]
    assert content_hash(datasets.load_from_disk(str(out))) == second["content_hash"]
    assert json.loads((out / "provenance.json").read_text())["sft_dataset"]["content_hash"] == second["content_hash"]


def test_identical_inputs_give_identical_hash(records, tmp_path):
    a = save_sft_dataset(build_sft_dataset(records, validation_fraction=0.2), tmp_path / "a", PROVENANCE)
    b = save_sft_dataset(build_sft_dataset(copy.deepcopy(records), validation_fraction=0.2), tmp_path / "b", PROVENANCE)
    assert a["content_hash"] == b["content_hash"]
    assert (tmp_path / "a" / "README.md").read_bytes() == (tmp_path / "b" / "README.md").read_bytes()
    assert (tmp_path / "a" / "provenance.json").read_bytes() == (tmp_path / "b" / "provenance.json").read_bytes()


# ---- push ---------------------------------------------------------------------------------------
class FakeApi:
    """Records calls; checks them against the real HfApi signatures; keeps a copy of each upload."""

    def __init__(self, token: str, store: Path):
        self.token = token
        self.store = store
        self.calls: list[tuple[str, dict]] = []

    def _record(self, name, *args, **kwargs):
        inspect.signature(getattr(HfApi, name)).bind(self, *args, **kwargs)  # TypeError on a wrong call
        self.calls.append((name, {"args": args, **kwargs}))

    def create_repo(self, *args, **kwargs):
        self._record("create_repo", *args, **kwargs)
        return RepoUrl(f"https://huggingface.co/datasets/{args[0]}")

    def create_branch(self, *args, **kwargs):
        self._record("create_branch", *args, **kwargs)

    def upload_folder(self, *args, **kwargs):
        self._record("upload_folder", *args, **kwargs)
        shutil.copytree(kwargs["folder_path"], self.store)
        return CommitInfo(
            commit_url=f"https://huggingface.co/datasets/{kwargs['repo_id']}/commit/{'ab' * 20}",
            commit_message=kwargs["commit_message"], commit_description="", oid="ab" * 20,
        )


def test_push_to_hub_with_fake_api(built, tmp_path):
    out = tmp_path / "sft"
    summary = save_sft_dataset(built, out, PROVENANCE)
    api = FakeApi(CANARY, tmp_path / "uploaded")
    result = push_to_hub(out, "someone/rhythm-sft", api=api)

    names = [name for name, _ in api.calls]
    assert names == ["create_repo", "upload_folder"]
    create = api.calls[0][1]
    assert create["args"] == ("someone/rhythm-sft",)
    assert create["repo_type"] == "dataset" and create["private"] is True and create["exist_ok"] is True
    upload = api.calls[1][1]
    assert upload["repo_id"] == "someone/rhythm-sft" and upload["repo_type"] == "dataset"
    assert upload["revision"] is None and summary["content_hash"][:12] in upload["commit_message"]

    assert result["repo_id"] == "someone/rhythm-sft"
    assert result["revision"] == "ab" * 20
    assert result["url"] == "https://huggingface.co/datasets/someone/rhythm-sft"
    uploaded = api.store
    assert (uploaded / "README.md").read_text() == (out / "README.md").read_text()
    for split in ("train", "validation"):
        path = uploaded / "data" / f"{split}-00000-of-00001.parquet"
        assert pq.read_table(path).num_rows == len(built[split])
        ds = datasets.Dataset.from_parquet(str(path), cache_dir=str(tmp_path / "cache"))
        assert content_hash({split: ds}) == content_hash({split: built[split]})
    assert sorted(result["files"]) == sorted(
        p.relative_to(uploaded).as_posix() for p in uploaded.rglob("*") if p.is_file()
    )

    assert CANARY not in json.dumps(result)
    for path in uploaded.rglob("*"):
        if path.is_file():
            assert CANARY.encode() not in path.read_bytes(), path


def test_push_to_a_branch_and_token_guard(built, tmp_path):
    out = tmp_path / "sft"
    save_sft_dataset(built, out, PROVENANCE)
    api = FakeApi(CANARY, tmp_path / "uploaded")
    result = push_to_hub(out, "someone/rhythm-sft", api=api, private=False, revision="v2", commit_message="msg")
    assert [n for n, _ in api.calls] == ["create_repo", "create_branch", "upload_folder"]
    assert api.calls[0][1]["private"] is False
    assert api.calls[1][1]["branch"] == "v2" and api.calls[2][1]["revision"] == "v2"
    assert api.calls[2][1]["commit_message"] == "msg" and result["revision"] == "ab" * 20

    # a token that somehow ended up in a file is never uploaded
    for text in ("Day 1 morning", "bayes-kalman-1"):  # text that does occur in the data / in the card
        leaky = FakeApi(text, tmp_path / "never")
        with pytest.raises(RuntimeError, match="contains the Hub token"):
            push_to_hub(out, "someone/rhythm-sft", api=leaky)
        assert [n for n, _ in leaky.calls] == ["create_repo"] and not (tmp_path / "never").exists()


def test_publish_puts_the_previous_version_back_if_the_final_rename_fails(tmp_path, monkeypatch):
    import os

    from rhythm_core.store import publish_dir

    final, staged = tmp_path / "v1", tmp_path / ".staging-x"
    final.mkdir()
    (final / "data").write_text("old")
    (final / "provenance.json").write_text("{}")  # an sft_dataset: ours to replace
    staged.mkdir()
    (staged / "data").write_text("new")
    real_replace, calls = os.replace, []

    def replace(src, dst):
        calls.append((src, dst))
        if len(calls) == 2:  # the staged directory moving into place
            raise OSError("device busy")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr("rhythm_core.store.files.exchange_dirs", lambda a, b: False)  # a system without renameat2
    with pytest.raises(OSError, match="device busy"):
        publish_dir(staged, final, kind="sft_dataset")
    assert (final / "data").read_text() == "old" and (staged / "data").read_text() == "new"


def test_the_dataset_format_has_one_set_of_defaults_and_names_a_bad_field():
    from rhythm_env.protocol import DEFAULT_PROMPT_FORMAT, DEFAULT_REASONING, DatasetFormat

    assert DatasetFormat() == DatasetFormat(DEFAULT_PROMPT_FORMAT, DEFAULT_REASONING)
    assert DatasetFormat("chat_labeled").chat and not DatasetFormat("table", "full").chat
    # Artifacts written before the format was recorded were tables with the teacher's reasoning.
    assert DatasetFormat.from_info({}) == DatasetFormat("table", "full")
    assert DatasetFormat.from_info({"prompt_format": "chat", "reasoning": "none"}) == DatasetFormat("chat", "none")
    with pytest.raises(ValueError, match="unknown reasoning 'update'; allowed: evidence, none, full"):
        DatasetFormat("chat", "update")
    with pytest.raises(ValueError, match="unknown prompt_format 'html'"):
        DatasetFormat.from_info({"prompt_format": "html"})
