"""docs/results.md and the README's results table are what the committed result files give, so a
figure cannot drift from its source: `make results` rewrites them, and this test fails when either
is stale."""

import importlib.util
import json
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _page_module():
    spec = importlib.util.spec_from_file_location("results_page", REPO / "docs" / "results_page.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_results_page_and_the_readme_table_are_up_to_date():
    assert _page_module().main(["--check"]) == 0, "run `make results` and commit docs/results.md and README.md"


def test_a_changed_result_file_makes_both_stale_and_make_results_rewrites_them(tmp_path, monkeypatch):
    module = _page_module()
    results = tmp_path / "benchmarks" / "results"
    shutil.copytree(REPO / "benchmarks" / "results", results)
    (tmp_path / "docs").mkdir()
    for name in ("docs/results.md", "README.md"):
        shutil.copy(REPO / name, tmp_path / name)
    monkeypatch.setattr(module, "RESULTS", results)
    monkeypatch.setattr(module, "PAGE", tmp_path / "docs" / "results.md")
    monkeypatch.setattr(module, "README", tmp_path / "README.md")
    monkeypatch.setattr(module, "REPO", tmp_path)
    assert module.main(["--check"]) == 0

    demo = json.loads((results / "demo.json").read_text())
    run = next(r for r in demo["figures"]["runs"] if r["kernels"] == "avx2" and r["seed"] == 0)
    run["players"]["ood"]["student_sft"]["v3"] = 0.123456
    (results / "demo.json").write_text(json.dumps(demo))
    assert module.main(["--check"]) == 1
    assert module.main([]) == 0
    assert "0.123" in (tmp_path / "README.md").read_text() and "0.123" in (tmp_path / "docs" / "results.md").read_text()
    assert module.main(["--check"]) == 0


def test_the_results_page_is_a_short_reference():
    # figures live in the result files, history in git: the page shows each benchmark's main figures
    assert len((REPO / "docs" / "results.md").read_text()) < 15_000
