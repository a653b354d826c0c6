"""The mistakes people make on a command line, through the real `rhythm` CLI in a subprocess: each
exits 2 with one line naming the argument or file, before any work, and leaves every input and
unrelated file byte-identical (nothing created, nothing removed)."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

RHYTHM = [sys.executable, "-m", "rhythm_core.cli"]


def rhythm(*argv, cwd, env=None, timeout=120):
    full_env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "RHYTHM_DEBUG", "DAGSTER_HOME")}
    full_env.update(env or {})
    return subprocess.run([*RHYTHM, *argv], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)


def snapshot(root: Path) -> dict:
    """Every path under `root` with its bytes' hash (folders as None)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
            for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A teacher file of four training weeks, an unrelated folder with a note, and a plain text file."""
    root = tmp_path_factory.mktemp("cli")
    done = rhythm("teacher", "--seeds", "1000-1003", "--out", "t.jsonl", cwd=root)
    assert done.returncode == 0, done.stderr
    (root / "precious").mkdir()
    (root / "precious" / "notes.txt").write_text("do not lose me\n")
    (root / "notes.txt").write_text("a plain line without a newline")
    return root


# (argv, the message's start or a piece of it)
MISTAKES = [
    (["dataset", "--jsonl", "t.jsonl", "--out", "t.jsonl"], "--out t.jsonl would overwrite the input --jsonl t.jsonl"),
    (["dataset", "--jsonl", "t.jsonl", "--out", "."], "--out . would overwrite the input --jsonl t.jsonl"),
    (["dataset", "--jsonl", "t.jsonl", "--out", "precious"],
     "--out precious exists and is not an earlier sft_dataset (no provenance.json in it); refusing to replace it "
     "(pass --overwrite"),
    (["dataset", "--jsonl", "t.jsonl", "--out", "notes.txt"], "--out notes.txt is a file, not a folder"),
    (["dataset", "--jsonl", "missing.jsonl", "--out", "d"], "--jsonl missing.jsonl: no such file"),
    (["dataset", "--jsonl", "precious", "--out", "d"], "--jsonl precious is a folder; give a file"),
    (["dataset", "--jsonl", "t.jsonl", "--out", "d", "--validation-fraction", "1.5"],
     "--validation-fraction must be above 0 and below 1, got 1.5"),
    (["dataset", "--jsonl", "t.jsonl", "--out", "no/such/dir/d"], "--out no/such/dir/d: the folder"),
    (["reeval", "--jsonl", "t.jsonl", "--out", "t.jsonl"], "--out t.jsonl would overwrite the input --jsonl t.jsonl"),
    (["reeval", "--jsonl", "t.jsonl", "--out", "notes.txt"], "--out notes.txt is a file, not a folder"),
    (["reeval", "--jsonl", "t.jsonl", "--out", "precious"], "--out precious exists and is not an earlier reeval_report"),
    (["reeval", "--jsonl", "notes.txt", "--out", "r"], "notes.txt:1: incomplete last line"),
    (["teacher", "--out", "precious"], "--out precious is a folder; give a file path"),
    (["teacher", "--out", "/nonexistent/dir/t.jsonl"], "--out /nonexistent/dir/t.jsonl: the folder /nonexistent/dir "
                                                       "does not exist (create it first)"),
    (["teacher", "--out", "notes.txt"], "--out: cannot resume: notes.txt: the last line is not a trajectory record"),
    (["teacher", "--out", "precious/notes.txt"], "--out: cannot resume: precious/notes.txt:1: not valid JSON"),
    (["teacher", "--purpose", "evaluation", "--seeds", "0-3", "--out", "t.jsonl"],
     "--out: cannot resume: t.jsonl, line 1: holds training records; this run writes evaluation records"),
    (["teacher", "--seeds", "0-3", "--out", "x.jsonl"], "seed 0 is not a training seed"),
    (["teacher", "--seeds", "9600", "--out", "x.jsonl"],
     "seed 9600 is a tuning seed (1 such); continuous seeds 9500-9699 are reserved for tuning"),
    (["teacher", "--seeds", "ten", "--out", "x.jsonl"], "bad seed range 'ten'"),
    (["teacher", "--temperature", "-1", "--out", "x.jsonl"], "--temperature must be between 0 and 2"),
    (["teacher", "--max-cost-usd", "-5", "--out", "x.jsonl"], "--max-cost-usd must be a number of dollars > 0"),
    (["teacher", "--concurrency", "0", "--out", "x.jsonl"], "--concurrency must be >= 1, got 0"),
    (["teacher", "--timeout", "0", "--out", "x.jsonl"], "--timeout must be a number of seconds > 0"),
    (["teacher", "--model", "gpt-4o", "--out", "x.jsonl"], "--model: only for --backend openai or azure"),
    (["teacher", "--backend", "openai", "--out", "x.jsonl"], "the openai teacher backend needs a --model"),
    (["teacher", "--backend", "openai", "--model", "gpt-4o", "--out", "x.jsonl"],
     "the openai teacher at https://api.openai.com/v1 needs an API key: set OPENAI_API_KEY"),
    (["teacher", "--backend", "azure", "--model", "gpt-4o", "--out", "x.jsonl"],
     "the azure teacher backend needs --azure-endpoint"),
    (["teacher", "--backend", "openai", "--model", "m", "--base-url", "127.0.0.1:8000", "--out", "x.jsonl"],
     "--base-url must be an http(s) URL"),
    (["teacher", "--backend", "openai", "--model", "m", "--api-key-env", "MY_TEAM_KEY",
      "--base-url", "https://llm.example.com/v1", "--out", "x.jsonl"], "needs an API key: set MY_TEAM_KEY"),
    (["teacher", "--out"], "argument --out: expected one argument (see rhythm teacher --help)"),
    (["teacher", "--seeds", "1000"], "the following arguments are required: --out"),
    (["eval", "--checkpoint", "missing", "--out", "e", "--baselines", "random,gpt"],
     "--baselines: unknown baseline(s) gpt; allowed:"),
    (["eval", "--checkpoint", "missing", "--out", "e", "--continuous-seeds", "5000"],
     "--continuous-seeds: seed 5000 is not an evaluation seed of continuous"),
    (["eval", "--checkpoint", "missing", "--out", "e", "--temperature", "-1"], "--temperature must be between 0 and 2"),
    (["eval", "--checkpoint", "missing", "--out", "e", "--max-new-tokens", "0"], "--max-new-tokens must be >= 1"),
    (["eval", "--checkpoint", "missing", "--out", "notes.txt"], "--out notes.txt is a file, not a folder"),
    (["eval", "--checkpoint", "missing", "--out", "e"], "missing: not a model checkpoint"),
    (["eval", "--checkpoint", "missing", "--out", "s3://bucket/e"],
     "--out s3://bucket/e: this command writes to a local path; object stores are taken by `rhythm distill --out`"),
    (["dataset", "--jsonl", "t.jsonl", "--out", "gs://bucket/d"], "--out gs://bucket/d: this command writes to a local"),
    (["eval", "--checkpoint", "precious", "--out", "e"], "precious: not a model checkpoint"),
    (["env-dataset", "--seeds", "0-99", "--out", "w"],
     "--seeds: seed 0 is not a training seed (100 such); continuous training seeds are 1000-9999"),
    (["env-dataset", "--condition", "ood", "--seeds", "10000-10009", "--out", "w"],
     "--seeds: condition 'ood' is evaluation-only"),
    (["env-dataset", "--purpose", "evaluation", "--seeds", "1000-1009", "--out", "w"],
     "--seeds: seed 1000 is not an evaluation seed of continuous"),
    (["env-dataset", "--out", "precious"], "--out precious exists and is not an earlier env_dataset"),
    (["distill", "--out", "notes.txt"], "--out notes.txt is a file, not a folder"),
    (["distill", "--out", "/nonexistent/run"], "--out /nonexistent/run: the folder /nonexistent does not exist"),
    (["distill", "--preset", "huge", "--out", "d"], "argument --preset: invalid choice: 'huge'"),
    (["distill", "--processes", "0", "--out", "d"], "--processes 0: expected a whole number ≥ 1"),
    (["baselines", "--seeds", "9990-10010"], "seed 10010 is outside the continuous range 0-9999"),
    (["baselines", "--seeds", "10-5"], "bad seed range '10-5'"),
    (["baselines", "--agents", "random,gpt"], "unknown agent(s) gpt"),
    (["baselines", "--grader", "v9"], "argument --grader: invalid choice: 'v9'"),
    (["lineage", "eval_results"], "rhythm lineage: error: DAGSTER_HOME is not set"),
    # a flag the command does not have: named with its command and the closest flag it has
    (["baselines", "--sedes", "0-9"],
     "rhythm baselines: error: unrecognized argument --sedes (did you mean --seeds?); see rhythm baselines --help"),
    (["teacher", "--out", "x.jsonl", "--temprature=0.5"], "unrecognized argument --temprature (did you mean "
                                                          "--temperature?); see rhythm teacher --help"),
    (["distill", "--out", "d", "--presets", "demo", "--gradr", "v2"],
     "unrecognized arguments --presets (did you mean --preset?), --gradr (did you mean --grader?)"),
    (["dataset", "--jsonl", "t.jsonl", "--out", "d", "now"], "unrecognized argument now; see rhythm dataset --help"),
    (["lineage", "eval_results", "--debgu"], "rhythm lineage: error: unrecognized argument --debgu (did you mean "
                                             "--debug?); see rhythm lineage --help"),
    (["eval", "--checkpoint", "missing", "--out", "e", "--name", "heuristic"],
     "--name heuristic: the name of a reference agent; pick another"),
]


@pytest.mark.parametrize("argv, message", MISTAKES, ids=[" ".join(a) for a, _ in MISTAKES])
def test_a_mistake_is_one_line_exit_2_and_changes_nothing(workdir, argv, message):
    before = snapshot(workdir)
    done = rhythm(*argv, cwd=workdir)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(lines) == 1, done.stderr
    assert message in lines[0], lines[0]
    assert lines[0].startswith(f"rhythm {argv[0]}: error: ")
    assert snapshot(workdir) == before


def test_lineage_names_an_unknown_asset_without_touching_the_instance(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    done = rhythm("lineage", "eval_result", cwd=tmp_path, env={"DAGSTER_HOME": str(home)})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert "unknown asset 'eval_result'; assets: " in done.stderr and "eval_results" in done.stderr
    assert not any(home.iterdir())


def test_an_unreachable_endpoint_fails_within_the_connect_budget_and_leaves_no_file(tmp_path):
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = rhythm("teacher", "--backend", "openai", "--model", "m", "--base-url", f"http://127.0.0.1:{port}/v1",
                  "--seeds", "1000-1003", "--out", "t.jsonl", "--connect-budget", "1", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"rhythm teacher: error: cannot reach the openai endpoint http://127.0.0.1:{port}/v1")
    assert "for 1 s" in last and "--connect-budget" in last
    assert not any(tmp_path.iterdir())  # no empty trajectory file


def test_a_401_names_the_variable_holding_the_key(tmp_path):
    from tests.openai_server import serve

    with serve(expected_api_key="sk-the-right-key") as server:
        done = rhythm("teacher", "--backend", "openai", "--model", "m", "--base-url", server.base_url, "--seeds",
                      "1000", "--out", "t.jsonl", "--api-key-env", "TEAM_KEY", cwd=tmp_path,
                      env={"TEAM_KEY": "sk-wrong-key-123456789"})
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert "HTTP 401" in last and "check the API key in TEAM_KEY" in last
    assert "sk-wrong-key-123456789" not in done.stderr
    assert not any(tmp_path.iterdir())


def test_outputs_that_are_ours_are_replaced_and_overwrite_replaces_a_strangers_folder(workdir, tmp_path):
    import shutil

    shutil.copy(workdir / "t.jsonl", tmp_path / "t.jsonl")
    for _ in range(2):  # the second run replaces the first report: it is ours
        done = rhythm("reeval", "--jsonl", "t.jsonl", "--out", "report", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "report").iterdir()) == [
        ".rhythm-files.json", "per_condition.parquet", "per_episode.parquet", "report.json", "report.md"]
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("x")
    done = rhythm("dataset", "--jsonl", "t.jsonl", "--out", "mine", "--overwrite", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "mine" / "provenance.json").is_file() and not (tmp_path / "mine" / "notes.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "report", "t.jsonl"]  # no staging leftovers


def test_debug_shows_a_mistakes_traceback(workdir):
    for flags, env in ((["--debug"], {}), ([], {"RHYTHM_DEBUG": "1"})):
        done = rhythm("dataset", *flags, "--jsonl", "t.jsonl", "--out", "t.jsonl", cwd=workdir, env=env)
        assert done.returncode != 0 and "Traceback" in done.stderr and "OutputRefused" in done.stderr


def test_a_closed_pipe_ends_quietly(workdir):
    done = subprocess.run(" ".join(RHYTHM) + " baselines --seeds 0-99 --agents random,heuristic | head -1",
                          shell=True, cwd=workdir, capture_output=True, text=True, timeout=120,
                          executable="/bin/bash")
    assert done.returncode == 0 and done.stdout.startswith("condition=continuous")
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr


def test_help_documents_every_option_with_its_default_and_version():
    from rhythm_core.cli import build_parser

    parser = build_parser()
    assert rhythm("--version", cwd=".").stdout.startswith("rhythm ")
    commands = parser._subparsers._group_actions[0].choices
    for name, sub in commands.items():
        if name in parser._plugin_names:
            continue
        text = rhythm(name, "--help", cwd=".").stdout
        for action in sub._actions:
            if not action.option_strings or action.dest == "help":
                continue
            assert action.help, f"rhythm {name} {action.option_strings[0]} has no help text"
            if action.default not in (None, False) and not action.required:
                assert f"(default:{action.default})" in "".join(text.split()), (name, action.dest)
