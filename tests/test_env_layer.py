"""The environment package's layers stand on each other in one order: sim/ is the simulator alone (none of
its modules imports another package: protocol, graders, text, nor anything of rhythm_core), protocol/ and
graders/ stand on sim/ only, and the text front ends on those three; the package (envs/rhythm_env, installed
alone) ships its layers and nothing that pulls torch or Dagster."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = ROOT / "envs" / "rhythm_env"  # the package rhythm_env
LAYERS = ("sim", "protocol", "graders", "text")


def imported_packages(folder: Path) -> dict[str, set[str]]:
    """Per module of `folder` (a layer of rhythm_env): the layers (or other top-level packages: rhythm_core)
    it imports from outside `folder`."""
    found = {}
    for path in sorted(folder.glob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level >= 2:
                names.add((node.module or "").split(".")[0] or "rhythm_env")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rhythm_env."):
                names.add(node.module.split(".")[1])
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "rhythm_core":
                names.add("rhythm_core")
            elif isinstance(node, ast.Import):
                names |= {a.name.split(".")[1] for a in node.names if a.name.startswith("rhythm_env.")}
                names |= {"rhythm_core" for a in node.names if a.name.split(".")[0] == "rhythm_core"}
        found[path.name] = names - {folder.name}
    return found


def test_sim_imports_nothing_else():
    outside = {name: names for name, names in imported_packages(ENV / "sim").items() if names}
    assert outside == {}


def test_each_layer_imports_only_the_layers_below_it():
    for at, layer in enumerate(LAYERS):
        allowed = {"sim"} if layer in ("protocol", "graders") else set(LAYERS[:at])
        for name, names in imported_packages(ENV / layer).items():
            assert names <= allowed, (layer, name, names - allowed)


def test_importing_the_simulator_loads_neither_the_client_nor_rhythm_core():
    # rhythm_env's own names (RhythmEnv, RhythmAction, ...) load the OpenEnv client when first asked for.
    code = ("import json, sys, rhythm_env.sim; loaded = {m.split('.')[0] for m in sys.modules}; import rhythm_env; "
            "print(json.dumps([sorted(loaded), rhythm_env.RhythmEnv.__name__, 'openenv' in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded, client, openenv_now = json.loads(done.stdout)
    assert not {"openenv", "fastapi", "rhythm_core", "torch"} & set(loaded), loaded
    assert (client, openenv_now) == ("RhythmEnvClient", True)


def test_the_package_ships_its_layers_without_torch_or_dagster():
    package = tomllib.loads((ENV / "pyproject.toml").read_text())
    shipped = set(package["tool"]["setuptools"]["packages"])
    assert {f"rhythm_env.{layer}" for layer in LAYERS} <= shipped
    assert not any(dep.split(">")[0].split("=")[0] in ("torch", "dagster", "mlflow", "transformers", "trl")
                   for dep in package["project"]["dependencies"])


def test_the_env_docs_name_every_dependency_the_env_package_declares():
    package = tomllib.loads((ROOT / "envs" / "rhythm_env" / "pyproject.toml").read_text())
    names = [dep.split(">")[0].split("=")[0].split("[")[0].strip().lower() for dep in package["project"]["dependencies"]]
    for doc in (ROOT / "docs" / "environment.md", ROOT / "envs" / "rhythm_env" / "README.md"):
        text = doc.read_text().lower()
        assert [name for name in names if name not in text] == [], doc
