"""Benchmarks measure what ships through the core's public API: no script imports a private name
of `rhythm_core` or patches the core at run time, and each one writes its figures to a result file."""

import ast
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted(p for p in BENCHMARKS.glob("*.py") if p.name != "results_file.py")


def _problems(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rhythm_core"):
            if any(part.startswith("_") for part in node.module.split(".")):
                found.append(f"line {node.lineno}: imports the private module {node.module}")
            found += [f"line {node.lineno}: imports the private name {alias.name} from {node.module}"
                      for alias in node.names if alias.name.startswith("_")]
        elif isinstance(node, ast.Import):
            found += [f"line {node.lineno}: imports {alias.name}" for alias in node.names
                      if alias.name.startswith("rhythm_core") and any(p.startswith("_") for p in alias.name.split("."))]
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            found.append(f"line {node.lineno}: reaches into a private attribute .{node.attr}")
        elif isinstance(node, ast.Name) and node.id in ("mock", "monkeypatch"):
            found.append(f"line {node.lineno}: patches at run time ({node.id})")
        elif isinstance(node, ast.ImportFrom) and node.module == "unittest":
            found.append(f"line {node.lineno}: imports unittest (mock)")
    return found


def test_benchmarks_use_only_public_core_names_and_patch_nothing():
    problems = {p.name: _problems(p) for p in SCRIPTS}
    assert not {k: v for k, v in problems.items() if v}


def test_the_check_sees_a_private_import_and_a_patch(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from unittest import mock\nfrom rhythm_core.teacher.offline import _step_record\n"
                   "import rhythm_core.training.grpo as grpo\nmock.patch.object(grpo, 'action_prefix', None)\n"
                   "grpo._stack([])\n")
    problems = "\n".join(_problems(bad))
    assert "_step_record" in problems and "unittest" in problems and ".\u005fstack" in problems


def test_every_benchmark_writes_a_result_file():
    assert 0 < len(SCRIPTS) <= 14, [p.name for p in SCRIPTS]
    assert not [p.name for p in SCRIPTS if "write_result(" not in p.read_text()]
