import json

import pytest

from rhythm_core.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_baselines_json_shape(capsys):
    code, out, _ = run(capsys, "baselines", "--condition", "ood", "--seeds", "10000-10019", "--grader", "v2", "--json")
    assert code == 0
    data = json.loads(out)
    assert set(data) == {"condition", "grader", "n_episodes", "agents"}
    assert (data["condition"], data["grader"], data["n_episodes"]) == ("ood", "v2", 20)
    assert list(data["agents"]) == ["random", "heuristic", "heuristic_const_belief", "fallback", "bayes", "bayes_v3",
                                    "search", "oracle"]
    for name, block in data["agents"].items():
        assert set(block) == {"final_score", "ci95", "belief_mae", "components"}
        lo, hi = block["ci95"]
        assert lo <= block["final_score"] <= hi
        assert set(block["components"]) == {"wellbeing", "progress", "crash_avoidance", "belief_accuracy"}
        assert (block["belief_mae"] is None) == (name in ("random", "heuristic", "fallback"))


def test_baselines_table_and_agent_subset(capsys):
    code, out, _ = run(capsys, "baselines", "--seeds", "0-9", "--agents", "random,bayes")
    assert code == 0
    assert "grader=v3" in out and "bayes" in out and "belief_skill" in out and "oracle" not in out


def test_baselines_rejects_bad_input(capsys):
    code, _, err = run(capsys, "baselines", "--condition", "continuous", "--seeds", "9990-10010")
    assert code == 2 and "seed 10010 is outside the continuous range 0-9999" in err
    code, _, err = run(capsys, "baselines", "--seeds", "ten")
    assert code == 2 and "bad seed range 'ten'" in err
    with pytest.raises(SystemExit):
        main(["baselines", "--agents", "random,gpt"])
    assert "unknown agent(s) gpt" in capsys.readouterr().err


def test_teacher_against_a_reasoning_endpoint_prints_billed_usage(capsys, tmp_path, monkeypatch):
    from rhythm_core.teacher.trajectories import read_trajectories
    from tests.openai_server import serve

    monkeypatch.setenv("RHYTHM_CLI_TEST_KEY", "sk-cli-test")
    out = tmp_path / "t.jsonl"
    with serve(params="reasoning", reasoning_tokens=64, prefix_cache=True) as server:
        code, stdout, _ = run(capsys, "teacher", "--backend", "openai", "--base-url", server.base_url, "--model",
                              "gpt-5.4", "--seeds", "1000-1001", "--out", str(out), "--api-key-env",
                              "RHYTHM_CLI_TEST_KEY", "--price-input", "2.5", "--price-cached-input", "0.25",
                              "--price-output", "15", "--reasoning-effort", "low", "--structured-output", "on")
        bodies = [r.body for r in server.requests]
    assert code == 0, stdout
    records = read_trajectories(out).records
    cached = sum(r["usage"]["cached_prompt_tokens"] for r in records)
    prompt = sum(r["usage"]["prompt_tokens"] for r in records)
    assert 0 < cached < prompt
    assert f"(cached {cached}, cache hit {cached / prompt:.1%})" in stdout
    assert f"(reasoning {2 * 28 * 64})" in stdout and "requests sent max_completion_tokens, structured output on" in stdout
    cost = sum(r["usage"]["cost_usd"] for r in records)
    assert f"cost ${cost:.4f}" in stdout
    assert all(b["reasoning_effort"] == "low" and "response_format" in b and "temperature" not in b for b in bodies)


def test_teacher_fails_fast_with_the_servers_message(capsys, tmp_path):
    from tests.openai_server import serve

    with serve(params="reasoning") as server:
        code, _, err = run(capsys, "teacher", "--backend", "openai", "--base-url", server.base_url, "--model",
                           "gpt-5.4", "--seeds", "1000-1003", "--out", str(tmp_path / "t.jsonl"), "--temperature", "0")
        assert server.request_count == 1
    assert code == 2
    assert "rhythm teacher: error: the openai endpoint rejected the request for model 'gpt-5.4'" in err
    assert "Unsupported value: 'temperature' does not support 0.0 with this model." in err


def test_an_unrecognized_flag_is_named_with_its_command_and_the_closest_flag(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["baselines", "--sedes", "0-9"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err == ("rhythm baselines: error: unrecognized argument --sedes (did you mean "
                                       "--seeds?); see rhythm baselines --help\n")
    with pytest.raises(SystemExit):
        main(["eval", "--checkpoint", "m", "--out", "o", "--nmae", "grpo", "--xyz", "--json"])
    assert capsys.readouterr().err == ("rhythm eval: error: unrecognized arguments --nmae (did you mean --name?), "
                                       "--xyz, --json; see rhythm eval --help\n")


def test_distill_runs_the_demo_preset_unless_told_otherwise(capsys, tmp_path, monkeypatch):
    import inspect

    import rhythm_core.distill as distill

    assert inspect.signature(distill.run_distillation).parameters["preset"].default == "demo"
    calls = []
    monkeypatch.setattr(distill, "run_distillation",
                        lambda out, preset, **kw: calls.append(preset) or {"results_json": f"{out}/r.json"})
    assert main(["distill", "--out", str(tmp_path / "run")]) == 0
    assert main(["distill", "--preset", "long", "--out", str(tmp_path / "run")]) == 0
    assert calls == ["demo", "long"]


def test_a_preset_that_names_no_teacher_distils_the_default_one(tmp_path, monkeypatch):
    import rhythm_core.distill as distill
    from rhythm_core.teacher.settings import DEFAULT_BACKEND, TeacherSettings

    class Played(Exception):
        pass

    played = []

    def teacher_stage(settings, condition, seeds, root, **kwargs):
        played.append(settings.backend)
        raise Played  # stop before any work

    monkeypatch.setattr(distill, "teacher_stage", teacher_stage)
    with pytest.raises(Played):
        distill.run_distillation(tmp_path, {k: v for k, v in distill.PRESETS["demo"].items() if k != "teacher"})
    assert played == [DEFAULT_BACKEND] == [TeacherSettings().backend]


def test_each_preset_distils_its_own_teacher_from_the_cli_and_from_dagster(tmp_path, monkeypatch):
    import dagster as dg

    import rhythm_core.distill as distill
    from rhythm_pipeline.definitions import defs
    from rhythm_pipeline.defs import jobs

    class Played(Exception):
        pass

    played = []

    def teacher_stage(settings, condition, seeds, root, **kwargs):
        played.append((settings.backend, condition, seeds))
        raise Played

    monkeypatch.setattr(distill, "teacher_stage", teacher_stage)
    for preset in ("demo", "long", {**distill.PRESETS["demo"], "teacher": "bayes"}):
        with pytest.raises(Played):
            distill.run_distillation(tmp_path / "run", preset)
    # the preset's teacher, not TeacherSettings' default (both are the search teacher's now)
    assert played == [("search", "continuous", "1000-2999"), ("search", "continuous", "1000-3999"),
                      ("bayes", "continuous", "1000-2999")]
    # In Dagster the preset's weeks are its teacher shards (1000-2999, then 3000-3999 played on their own) by
    # the resource's default teacher, the presets' teacher; the long job trains on them with its config.
    teacher = dg.validate_run_config(defs.resolve_job_def("teacher_data"), {})
    assert teacher["resources"]["teacher"]["config"]["backend"] == distill.PRESETS["long"]["teacher"] == "search"
    assert teacher["resources"]["teacher"]["config"]["backend"] == distill.PRESETS["demo"]["teacher"]  # one recipe
    long = dg.validate_run_config(defs.resolve_job_def("rhythm_lineage_long"), jobs.rhythm_lineage_long.config)
    assert long["ops"]["sft_dataset"]["config"]["readout_form"] == "innovation"  # the long student learns it
    assert long["ops"]["sft_checkpoint"]["config"]["max_steps"] == distill.PRESETS["long"]["sft"]["max_steps"]
    main_job = dg.validate_run_config(defs.resolve_job_def("training"), {})
    assert main_job["ops"]["sft_dataset"]["config"]["readout_form"] == "linear"
    assert main_job["ops"]["sft_dataset"]["config"]["teacher_shards"] == []  # every published shard


def test_plugin_commands_have_a_line_of_their_own_in_the_help(capsys, tmp_path, monkeypatch):
    from importlib.metadata import EntryPoint

    from rhythm_core.cli.parsing import plugin_description
    from rhythm_pipeline.lineage import DESCRIPTION

    with pytest.raises(SystemExit):
        main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert f"lineage {DESCRIPTION}" in help_text and "(lineage --help)" not in help_text
    # read from the source, never imported: a DESCRIPTION constant, else the docstring's first line
    (tmp_path / "plugin_pkg").mkdir()
    (tmp_path / "plugin_pkg" / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (tmp_path / "plugin_pkg" / "documented.py").write_text('"""Say hello.\n\nMore."""\nraise RuntimeError()\n')
    (tmp_path / "plugin_pkg" / "bare.py").write_text("def cli(argv):\n    return 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def described(value: str) -> str:
        return plugin_description(EntryPoint(name="hello", value=value, group="rhythm.commands"))

    assert described("plugin_pkg.documented:cli") == "Say hello."
    assert described("plugin_pkg.bare:cli") == "from plugin_pkg.bare (hello --help)"
    assert described("no_such_package.mod:cli") == "from no_such_package.mod (hello --help)"
    assert described("rhythm_pipeline.lineage:cli") == DESCRIPTION


def test_the_cli_is_split_into_commands_argument_checks_and_parsing():
    """rhythm_core/cli/commands.py keeps the commands and their parser (every module at most 450 lines, the
    project's rule); every command's argument check lives in rhythm_core.cli.checks, argparse's machinery in
    rhythm_core.cli.parsing."""
    from pathlib import Path

    import rhythm_core.cli as cli
    from rhythm_core.cli import build_parser
    from rhythm_core.cli.parsing import OneLineParser

    assert all(len(module.read_text().splitlines()) <= 450 for module in Path(cli.__file__).parent.glob("*.py"))
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    for name, sub in commands.items():
        assert isinstance(sub, OneLineParser), name
        if name not in parser._plugin_names:
            assert sub.get_default("check").__module__ == "rhythm_core.cli.checks", name
            assert sub.get_default("func").__module__ == "rhythm_core.cli.commands", name
