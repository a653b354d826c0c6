"""env/ is the simulator alone: none of its modules imports another rhythm_core package (protocol, graders,
artifacts, training, text_env, ...), and the standalone OpenEnv package ships the packages the text front
ends need and nothing that pulls torch or Dagster."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ROOT / "envs" / "rhythm_env" / "rhythm_core"  # the environment package's folder holds them


def imported_packages(folder: Path) -> dict[str, set[str]]:
    """Per module of `folder`: the rhythm_core packages or modules it imports from outside `folder`."""
    found = {}
    for path in sorted(folder.glob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level >= 2:
                names.add((node.module or "").split(".")[0] or "rhythm_core")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rhythm_core."):
                names.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                names |= {a.name.split(".")[1] for a in node.names if a.name.startswith("rhythm_core.")}
        found[path.name] = names - {folder.name}
    return found


def test_env_imports_nothing_else_from_rhythm_core():
    outside = {name: names for name, names in imported_packages(LAYERS / "env").items() if names}
    assert outside == {}


def test_the_text_front_ends_import_only_the_layers_below_them():
    allowed = {"env", "protocol", "graders"}
    for name, names in imported_packages(LAYERS / "text_env").items():
        assert names <= allowed, (name, names - allowed)
    package = tomllib.loads((ROOT / "envs" / "rhythm_env" / "pyproject.toml").read_text())
    shipped = set(package["tool"]["setuptools"]["packages"])
    assert {"rhythm_core.env", "rhythm_core.protocol", "rhythm_core.graders", "rhythm_core.text_env"} <= shipped
    assert not any(dep.split(">")[0].split("=")[0] in ("torch", "dagster", "mlflow", "transformers", "trl")
                   for dep in package["project"]["dependencies"])


def test_the_env_docs_name_every_dependency_the_env_package_declares():
    package = tomllib.loads((ROOT / "envs" / "rhythm_env" / "pyproject.toml").read_text())
    names = [dep.split(">")[0].split("=")[0].split("[")[0].strip().lower() for dep in package["project"]["dependencies"]]
    for doc in (ROOT / "docs" / "environment.md", ROOT / "envs" / "rhythm_env" / "README.md"):
        text = doc.read_text().lower()
        assert [name for name in names if name not in text] == [], doc
