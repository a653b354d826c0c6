"""Asset code versions come from the code: a change to what a computation runs changes them, a comment
or docstring does not, and the grader belongs to the grading assets alone. Each case loads the
definitions from an edited copy of the packages in a fresh process, as a user's checkout would."""

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
UPSTREAM_OF_TRAINING = {"teacher_trajectories", "reeval_report", "sft_dataset"}


def clone(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    for package in ("rhythm_core", "rhythm_pipeline"):
        shutil.copytree(REPO / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "envs" / "rhythm_env", root / "rhythm_env",  # the environment, as its wheel lays it out
                    ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")  # the dg project config the defs folder loads by
    return root


def versions(root: Path) -> dict[str, str]:
    code = ("import json; from rhythm_pipeline.definitions import defs; g = defs.resolve_asset_graph(); "
            "print(json.dumps({k.to_user_string(): g.get(k).code_version for k in g.get_all_asset_keys()}))")
    env = {**os.environ, "PYTHONPATH": str(root), "RHYTHM_GRADER": "v3"}
    done = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def edit_function(path: Path, name: str, statement: str) -> None:
    """Insert `statement` before the last statement of function `name`."""
    source = path.read_text()
    node = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == name)
    last = node.body[-1]
    lines = source.splitlines(keepends=True)
    lines.insert(last.lineno - 1, " " * last.col_offset + statement + "\n")
    path.write_text("".join(lines))


def changed(before: dict, after: dict) -> set[str]:
    assert before.keys() == after.keys()
    return {k for k in before if before[k] != after[k]}


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    root = clone(tmp_path_factory.mktemp("baseline"))
    return versions(root)


def test_versions_are_computed_and_name_the_grader(baseline):
    assert set(baseline) == {"teacher_trajectories", "reeval_report", "sft_dataset", "sft_checkpoint",
                             "grpo_checkpoint", "eval_rollouts", "eval_results", "registered_student"}
    assert baseline["sft_checkpoint"].startswith("sft-") and len(baseline["sft_checkpoint"]) == len("sft-") + 12
    assert "|grader=v3:" in baseline["eval_results"] and "|grader=v3:" in baseline["reeval_report"]
    assert "grader" not in baseline["sft_checkpoint"] + baseline["teacher_trajectories"]


def test_where_the_packages_are_installed_from_changes_no_version(baseline):
    # The checkout (rhythm_env from envs/rhythm_env, installed editable) against the clone (rhythm_env beside
    # rhythm_core, as the wheels lay them out): the same code, the same versions, the graders' included.
    assert versions(REPO) == baseline


def test_editing_a_training_function_changes_training_and_nothing_upstream(baseline, tmp_path):
    root = clone(tmp_path)
    edit_function(root / "rhythm_core" / "training" / "sft.py", "run_sft", "assert out is not None")
    moved = changed(baseline, versions(root))
    assert {"sft_checkpoint", "grpo_checkpoint"} <= moved
    assert not moved & UPSTREAM_OF_TRAINING
    assert "eval_rollouts" not in moved  # the students' play runs no SFT code


def test_editing_the_students_play_changes_the_evaluation(baseline, tmp_path):
    root = clone(tmp_path)
    edit_function(root / "rhythm_core" / "evaluation" / "entry.py", "play_students", "assert out is not None")
    assert changed(baseline, versions(root)) == {"eval_rollouts"}


def test_comments_docstrings_and_layout_change_nothing(baseline, tmp_path):
    root = clone(tmp_path)
    path = root / "rhythm_core" / "training" / "sft.py"
    source = path.read_text()
    tree = ast.parse(source)
    function = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "run_sft")
    docstring = function.body[0].value
    lines = source.splitlines(keepends=True)
    lines[docstring.lineno - 1] = lines[docstring.lineno - 1].replace('"""', '"""Reworded. ', 1)
    path.write_text("# a new comment at the top\n\n" + "".join(lines).replace("\n\n\n", "\n\n\n\n", 1)
                    + "\n# and one at the end\n")
    assert changed(baseline, versions(root)) == set()


def test_a_grader_edit_moves_the_grading_assets_and_the_teacher_that_plans_with_it(baseline, tmp_path):
    root = clone(tmp_path)
    v3 = root / "rhythm_env" / "graders" / "v3.py"
    function = next(n for n in ast.parse(v3.read_text()).body if isinstance(n, ast.FunctionDef | ast.ClassDef))
    if isinstance(function, ast.ClassDef):
        function = next(n for n in function.body if isinstance(n, ast.FunctionDef))
    edit_function(v3, function.name, "pass")
    # the grading assets, and the teacher, which plans with v3's own score (an active-grader switch
    # leaves it alone: tests/test_regrade.py)
    assert changed(baseline, versions(root)) == {"teacher_trajectories", "reeval_report", "eval_results"}
