"""Published artifacts cannot drift: nothing writes into one, every reader checks its files against
the record its publication wrote (and the digest its materialization recorded), Dagster fails a
blocking check on a tampered one, and what killed runs leave behind is cleaned on the next run."""

import os
import socket
import subprocess
import sys

import dagster as dg
import pytest

from rhythm_core.cli import main
from rhythm_core.data.stages import dataset_stage, reeval_stage
from rhythm_core.store import FILES_MANIFEST, ArtifactChanged, remove_stale_staging, staging_dir, verify_artifact
from rhythm_core.teacher.settings import TeacherSettings
from rhythm_core.teacher.stage import teacher_stage
from rhythm_pipeline.defs.resources import artifact_store_from_env


@pytest.fixture
def published(tmp_path):
    """Four teacher weeks published under tmp_path/teacher_trajectories/<version>/."""
    return teacher_stage(TeacherSettings(), "continuous", "1000-1003", tmp_path)


def test_a_write_into_a_published_artifact_is_refused_and_changes_nothing(published, capsys):
    path = published["path"]
    before = open(path, "rb").read()
    assert main(["teacher", "--seeds", "3000-3004", "--out", path]) == 2
    err = capsys.readouterr().err
    assert "published teacher_trajectories" in err and "never change" in err
    assert open(path, "rb").read() == before
    root = os.path.dirname(path)
    assert main(["distill", "--out", os.path.join(root, "runs")]) == 2  # nothing goes inside one either
    assert not os.path.exists(os.path.join(root, "runs"))


def test_a_tampered_artifact_fails_its_next_read_naming_the_file_and_both_hashes(published, tmp_path):
    path = published["path"]
    assert verify_artifact(path, published["files_digest"]) == published["files_digest"]
    with open(path, "a") as fh:
        fh.write("\n")
    with pytest.raises(ArtifactChanged, match=r"trajectories\.jsonl: changed after it was published: sha256 "
                                              r"[0-9a-f]{64}, recorded [0-9a-f]{64}"):
        reeval_stage(path, "v3", tmp_path / "out", files_digest_recorded=published["files_digest"])
    with pytest.raises(ArtifactChanged, match="changed after it was published"):
        dataset_stage(published, tmp_path / "out")
    assert not (tmp_path / "out" / "reeval_report").exists() or not any((tmp_path / "out" / "reeval_report").iterdir())


def test_an_added_file_or_a_replaced_record_is_caught_too(published):
    root = os.path.dirname(published["path"])
    extra = os.path.join(root, "cache-0001.arrow")
    open(extra, "w").write("x")
    with pytest.raises(ArtifactChanged, match="added to the published artifact"):
        verify_artifact(root)
    os.remove(extra)
    with pytest.raises(ArtifactChanged, match="the artifact was replaced"):
        verify_artifact(root, "0123456789abcdef")


def test_the_teachers_episodes_are_stored_once_and_a_rerun_plays_nothing(published, tmp_path):
    work = tmp_path / "teacher_trajectories" / "work"
    assert not list(work.glob("*.jsonl")) and len(list(work.glob("*.published"))) == 1
    again = teacher_stage(TeacherSettings(), "continuous", "1000-1003", tmp_path)
    assert again["version"] == published["version"] and again["run"]["episodes_written_this_run"] == 0
    assert again["files_digest"] == published["files_digest"]


def test_leftovers_of_killed_runs_go_and_live_runs_stay(tmp_path):
    host = socket.gethostname().replace("-", "_")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    leftovers = [tmp_path / f".staging-{host}-{dead}-abc", tmp_path / ".staging-31ibi0ge",
                 tmp_path / f".old-1234abcd-{dead}"]
    live = [tmp_path / f".staging-{host}-{os.getpid()}-xyz", tmp_path / f".staging-otherhost-{dead}-q",
            tmp_path / ".staging-run-0c7a1e5e-0000-4000-8000-000000000000"]
    for folder in leftovers + live:
        folder.mkdir()
    made = staging_dir(tmp_path)
    assert not any(p.exists() for p in leftovers) and all(p.exists() for p in live)
    assert made.name.startswith(f".staging-{host}-{os.getpid()}-")
    assert remove_stale_staging(tmp_path) == []


def test_dagster_fails_a_blocking_check_and_the_downstream_step_on_a_tampered_artifact(instance, tmp_path):
    from rhythm_pipeline.defs.assets.data import reeval_report, teacher_trajectories
    from rhythm_pipeline.defs.checks import FILES_UNCHANGED
    from rhythm_pipeline.defs.resources import TeacherResource

    check = next(c for c in FILES_UNCHANGED if next(iter(c.check_keys)).asset_key == teacher_trajectories.key)
    from tests.conftest import materialize_shard

    first = materialize_shard([teacher_trajectories, check], instance, "1000-1003",
                              resources={"teacher": TeacherResource(), "artifacts": artifact_store_from_env()})
    assert first.success and all(e.passed for e in first.get_asset_check_evaluations())
    path = first.output_for_node("teacher_trajectories")["path"]
    with open(path, "r+b") as fh:
        fh.seek(10)
        fh.write(b"#")
    rerun = dg.materialize([teacher_trajectories, check], instance=instance, resources={"teacher": TeacherResource(), "artifacts": artifact_store_from_env()},
                           selection=dg.AssetSelection.checks(check), raise_on_error=False)
    (evaluation,) = rerun.get_asset_check_evaluations()
    assert not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.ERROR
    assert "changed after it was published" in evaluation.description and "recorded" in evaluation.description
    downstream = dg.materialize([teacher_trajectories, reeval_report], instance=instance,
                                resources={"teacher": TeacherResource(), "artifacts": artifact_store_from_env()}, selection=[reeval_report],
                                raise_on_error=False)
    assert not downstream.success
    failure = next(e for e in downstream.all_events if e.is_step_failure)
    assert "changed after it was published" in failure.step_failure_data.error.to_string()
    assert FILES_MANIFEST not in os.listdir(tmp_path)


def _trained(tmp_path, name: str, *, weights: bytes = b"weights", train_s: float = 1.0, readout_form="linear"):
    """A training run's staged folder as SFT leaves it (result.json, model/ with weights, tokenizer, record)."""
    import json

    staged = tmp_path / name
    (staged / "model").mkdir(parents=True)
    (staged / "model" / "model.safetensors").write_bytes(weights)
    (staged / "model" / "tokenizer.json").write_text('{"vocab": {}}')
    record = {"prompt_format": "chat_labeled", "readout_form": readout_form, "metrics": {"train_s": train_s}}
    (staged / "model" / "rhythm_checkpoint.json").write_text(json.dumps(record))
    (staged / "result.json").write_text(json.dumps({"model_dir": str(staged / "model"), "train_s": train_s}))
    return staged


def test_a_retrained_checkpoint_never_rewrites_its_published_version(tmp_path):
    """The version names how a student plays (weights, tokenizer, the record's decoding fields): a rerun
    that plays the same keeps the published folder as it was and reports its own figures; a record that
    plays otherwise is a new version; a damaged earlier copy is replaced."""
    import json

    from rhythm_core.training.publish import publish_checkpoint

    root = tmp_path / "root"
    first = publish_checkpoint(_trained(tmp_path, "a", train_s=1.0), root, "sft_checkpoint")
    assert not first["kept_published"] and json.loads((root / "sft_checkpoint" / first["version"] / "result.json").read_text())["train_s"] == 1.0
    again = publish_checkpoint(_trained(tmp_path, "b", train_s=2.0), root, "sft_checkpoint")
    assert again["version"] == first["version"] and again["kept_published"] and again["train_s"] == 2.0
    assert again["files_digest"] == first["files_digest"] and not (tmp_path / "b").exists()
    assert json.loads((root / "sft_checkpoint" / first["version"] / "result.json").read_text())["train_s"] == 1.0
    other = publish_checkpoint(_trained(tmp_path, "c", readout_form="innovation"), root, "sft_checkpoint")
    assert other["version"] != first["version"] and not other["kept_published"]  # same weights, other play
    (root / "sft_checkpoint" / first["version"] / "model" / "tokenizer.json").write_text("damaged")
    repaired = publish_checkpoint(_trained(tmp_path, "d", train_s=3.0), root, "sft_checkpoint")
    assert repaired["version"] == first["version"] and not repaired["kept_published"]
    assert verify_artifact(repaired["path"], repaired["files_digest"]) == repaired["files_digest"]


def test_an_adapter_checkpoints_version_covers_its_adapter_config(tmp_path):
    """A LoRA adapter plays by its adapter_config.json (base model, rank, scaling, target modules) as much
    as by its weights: two GRPO adapters that differ only there are two versions. A checkpoint without
    one (the tiny student's, the demo's) keeps the version it had before adapter configs were covered."""
    import json

    from rhythm_core.training.publish import checkpoint_version, publish_checkpoint

    def grpo_adapter(name: str, lora_alpha: int):
        staged = _trained(tmp_path, name, weights=b"adapter weights")
        model = staged / "model"
        (model / "model.safetensors").rename(model / "adapter_model.safetensors")
        (model / "adapter_config.json").write_text(json.dumps(
            {"peft_type": "LORA", "base_model_name_or_path": "Qwen/Qwen2.5-3B-Instruct", "r": 16,
             "lora_alpha": lora_alpha, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}))
        record = json.loads((model / "rhythm_checkpoint.json").read_text())
        (model / "rhythm_checkpoint.json").write_text(json.dumps({**record, "stage": "grpo"}))
        return staged

    a, b = grpo_adapter("a", lora_alpha=32), grpo_adapter("b", lora_alpha=64)
    assert checkpoint_version(a / "model") != checkpoint_version(b / "model")
    root = tmp_path / "root"
    first, second = (publish_checkpoint(s, root, "grpo_checkpoint") for s in (a, b))
    assert first["version"] != second["version"] and not second["kept_published"]
    # pinned: the version this folder had while PLAY_FILES named no adapter_config.json
    assert checkpoint_version(_trained(tmp_path, "full") / "model") == "1122c9e6f7d360b4"


def test_the_same_student_saved_by_another_transformers_release_keeps_its_version(tmp_path):
    """config.json and generation_config.json name the transformers release that wrote them; that is not
    the student, so the same weights and config saved by another release have the same version (an
    operator's image resolved later publishes the same work under the same name), while any other field
    of those files is the student's and changes it."""
    import json

    from rhythm_core.training.publish import checkpoint_version

    def saved(name: str, release: str, hidden_size: int = 128):
        staged = _trained(tmp_path, name)
        for file, fields in (("config.json", {"hidden_size": hidden_size, "model_type": "llama"}),
                             ("generation_config.json", {"eos_token_id": 2, "pad_token_id": 3})):
            (staged / "model" / file).write_text(json.dumps({**fields, "transformers_version": release},
                                                            indent=2, sort_keys=True) + "\n")
        return checkpoint_version(staged / "model")

    assert saved("lock", "5.24.0") == saved("newer", "5.25.0") == saved("older", "4.57.1")
    assert saved("wider", "5.24.0", hidden_size=256) != saved("lock-again", "5.24.0")


_SAVE_AS_A_STAGE_DOES = """
import sys
from rhythm_core.training.models import load_model_and_tokenizer, save_tokenizer
from rhythm_core.training.publish import checkpoint_version
model, tokenizer = load_model_and_tokenizer(sys.argv[1])
model.save_pretrained(sys.argv[2])
save_tokenizer(tokenizer, sys.argv[2])
print(checkpoint_version(sys.argv[2]))
"""


def test_the_same_student_saved_online_offline_or_under_another_hf_home_has_one_version(sft_result, tmp_path):
    """Loading a student under HF_HUB_OFFLINE=1 (as an air-gapped cluster or a CI job sets it) or another
    HF_HOME, then saving it as SFT and GRPO do, writes the same files and publishes the same version as
    loading it online: the saved tokenizer config records nothing of how it was loaded."""
    import json
    from pathlib import Path

    from rhythm_core.training.models import resolve_model_dir

    student = resolve_model_dir(sft_result[0]["model_dir"])
    settings = {"unset": {}, "online": {"HF_HUB_OFFLINE": "0"}, "offline": {"HF_HUB_OFFLINE": "1"},
                "other-home": {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "elsewhere" / "hf")}}
    children = {}
    for name, extra in settings.items():
        env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HOME")}
        children[name] = subprocess.Popen([sys.executable, "-c", _SAVE_AS_A_STAGE_DOES, str(student), str(tmp_path / name)],
                                          env={**env, **extra}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    versions = {}
    for name, child in children.items():
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err[-2000:]
        versions[name] = out.split()[-1]
    assert len(set(versions.values())) == 1, versions
    configs = {name: (tmp_path / name / "tokenizer_config.json").read_bytes() for name in settings}
    assert len(set(configs.values())) == 1
    assert not {"local_files_only", "is_local", "cache_dir", "token"} & set(json.loads(configs["offline"]))
    assert Path(tmp_path / "other-home" / "tokenizer.json").read_bytes() == (tmp_path / "unset" / "tokenizer.json").read_bytes()


def test_a_checkpoints_version_ignores_how_any_writer_loaded_its_tokenizer(tmp_path):
    """A tokenizer config written by other code (TRL's own save, an older image) may carry load-time keywords
    and another layout: the version reads the config without them; a field that changes play still counts."""
    import json

    from rhythm_core.training.publish import checkpoint_version

    def saved(name: str, indent, **fields):
        staged = _trained(tmp_path, name)
        config = {"eos_token": "<|im_end|>", "model_max_length": 4096, "tokenizer_class": "Qwen2Tokenizer", **fields}
        (staged / "model" / "tokenizer_config.json").write_text(json.dumps(config, indent=indent))
        return checkpoint_version(staged / "model")

    clean = saved("clean", 2)
    assert clean == saved("offline", 2, local_files_only=True, is_local=True)
    assert clean == saved("online", None, local_files_only=False, is_local=False, cache_dir="/home/someone/.cache")
    assert clean != saved("left-padded", 2, padding_side="left")
