"""The launchpad shows every knob rhythm_core declares, with rhythm_core's names, types and defaults:
the training configs and the teacher resource are generated from their dataclasses, not copied."""

import dataclasses

import dagster as dg
import pytest

from rhythm_core.teacher.settings import TeacherSettings
from rhythm_pipeline.defs.launchpad import launchpad_config, run_config_of
from rhythm_pipeline.defs.resources import TeacherResource


def test_the_teacher_resource_has_every_teacher_setting_with_its_default():
    settings = {f.name: f for f in dataclasses.fields(TeacherSettings)}
    shown = set(TeacherResource.model_fields) - {"backfill_max_cost_usd"}  # the one knob of Dagster's own
    assert shown == set(settings) - {"backoff_base_s", "backoff_cap_s"}
    assert TeacherResource.model_fields["backfill_max_cost_usd"].default is None
    defaults = TeacherSettings()
    assert all(TeacherResource.model_fields[name].default == getattr(defaults, name) for name in shown)
    assert TeacherResource().settings() == defaults
    chosen = TeacherResource(backend="openai", model="gpt-5.4", base_url="http://127.0.0.1:8000/v1", concurrency=3,
                             price_input_per_m=2.5, max_cost_usd=5.0).settings()
    assert (chosen.backend, chosen.model, chosen.concurrency, chosen.max_cost_usd) == ("openai", "gpt-5.4", 3, 5.0)
    with pytest.raises(ValueError, match="needs a model name"):  # TeacherSettings' own checks still apply
        TeacherResource(backend="openai").settings()


def test_the_teachers_variables_are_read_when_a_run_uses_the_resource(monkeypatch):
    """RHYTHM_TEACHER_* and the API key's variable fill the fields left at their defaults, when the settings
    are made (in the run), never when the definitions load; a field the launchpad sets wins."""
    for name in ("RHYTHM_TEACHER_BACKEND", "RHYTHM_TEACHER_MODEL", "RHYTHM_TEACHER_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    resource = TeacherResource()
    assert resource.settings().backend == TeacherSettings().backend
    monkeypatch.setenv("RHYTHM_TEACHER_BACKEND", "openai")
    monkeypatch.setenv("RHYTHM_TEACHER_MODEL", "gpt-5.4")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-later")
    settings = resource.settings()
    assert (settings.backend, settings.model, settings.api_key) == ("openai", "gpt-5.4", "sk-later")
    assert TeacherResource(backend="bayes").settings().backend == "bayes"


def test_the_api_key_comes_from_its_environment_variable_at_run_time(monkeypatch):
    monkeypatch.setenv("RHYTHM_TEST_TEACHER_KEY", "sk-from-env")
    resource = TeacherResource(backend="openai", model="m", api_key=dg.EnvVar("RHYTHM_TEST_TEACHER_KEY"))

    @dg.asset
    def reads_key(teacher: TeacherResource) -> str:
        return teacher.settings().api_key

    result = dg.materialize([reads_key], resources={"teacher": resource})
    assert result.output_for_node("reads_key") == "sk-from-env"


def test_a_new_knob_in_a_run_config_reaches_the_launchpad_and_back():
    @dataclasses.dataclass
    class RunConfig:
        steps: int = 10
        grader: str = "v3"
        tags: list[str] = dataclasses.field(default_factory=lambda: ["a"])

    Config = launchpad_config("Config", RunConfig, module=__name__, rename={"grader": "reward_grader"},
                              push=(bool, False))
    assert set(Config.model_fields) == {"steps", "reward_grader", "tags", "push"}
    config = Config(steps=3, reward_grader="v2")
    assert run_config_of(config, RunConfig, rename={"grader": "reward_grader"}) == \
        {"steps": 3, "grader": "v2", "tags": ["a"]}
