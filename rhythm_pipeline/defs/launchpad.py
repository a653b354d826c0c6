"""Launchpad configs generated from rhythm_core's settings dataclasses: a knob is declared once, in
rhythm_core (its name, type and default), and Dagster's launchpad shows it from there. The training
assets' configs (`SFTRunConfig`, `GRPORunConfig`) and the teacher resource (`TeacherSettings`) are
made this way."""

import dataclasses
import typing

import dagster as dg
import pydantic


def launchpad_config(name: str, run_config: type, *, module: str, base: type = dg.Config,
                     rename: dict[str, str] | None = None, exclude: tuple[str, ...] = (), **extra) -> type:
    """A pydantic class on `base` (a Dagster Config, or a ConfigurableResource) with every field of a
    rhythm_core dataclass but `exclude` (same names, types and defaults), plus `extra` fields given as
    `name=(type, default)`. `rename` maps a dataclass field to its launchpad name; `module` is the
    module the class is defined for (its `__module__`)."""
    rename = rename or {}
    hints = typing.get_type_hints(run_config)
    fields = {}
    for f in dataclasses.fields(run_config):
        if f.name in exclude:
            continue
        default = (pydantic.Field(default_factory=f.default_factory)
                   if f.default is dataclasses.MISSING else f.default)
        fields[rename.get(f.name, f.name)] = (hints[f.name], default)
    return pydantic.create_model(name, __base__=base, __module__=module, **fields, **extra)


def run_config_of(config: dg.Config, run_config: type, *, rename: dict[str, str] | None = None) -> dict:
    """The run-config fields of a launchpad config, under their rhythm_core names."""
    launchpad_name = {f: (rename or {}).get(f, f) for f in run_config.__dataclass_fields__}
    values = config.model_dump()
    return {f: values[name] for f, name in launchpad_name.items()}
