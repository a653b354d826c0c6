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
    for name in ("docs/results.md", "README.md", "docs/lineage.md", "benchmarks/README.md"):
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
    tracking = json.loads((results / "tracking_overhead.json").read_text())
    tracking["figures"]["median_difference"] = -0.4321
    (results / "tracking_overhead.json").write_text(json.dumps(tracking))
    assert module.main(["--check"]) == 1
    assert module.main([]) == 0
    assert "0.123" in (tmp_path / "README.md").read_text() and "0.123" in (tmp_path / "docs" / "results.md").read_text()
    # a figure in prose, between its markers, follows its file too: in the docs page and the decision
    assert "-43%" in (tmp_path / "docs" / "lineage.md").read_text()
    assert "-43%" in (tmp_path / "benchmarks" / "README.md").read_text()
    assert module.main(["--check"]) == 0


def test_a_figure_marker_naming_no_figure_is_refused(tmp_path, monkeypatch):
    module = _page_module()
    page = tmp_path / "page.md"
    page.write_text("cost <!-- fig no_such_figure -->1.5×<!-- /fig -->")
    try:
        module.update_figures(page.read_text(), page)
    except SystemExit as refused:
        assert "no_such_figure" in str(refused) and "page.md" in str(refused)
    else:
        raise AssertionError("an unknown figure name was accepted")


def test_a_transcribed_figure_says_so_where_it_stands():
    # the README shows the H200's and the long preset's figures only beside the words that they were copied
    module = _page_module()
    assert "transcribed from" in module.fig_readme_gpu() and "not re-measured" in module.fig_readme_long()


def test_every_docs_page_is_a_short_reference():
    # figures live in the result files, history in git: each page is a reference a newcomer reads through
    # (benchmarks/README.md is the decision log, one entry per question, not a page read through)
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    too_long = {p.relative_to(REPO).as_posix(): len(p.read_text()) for p in pages if len(p.read_text()) > 15_000}
    assert not too_long, f"pages over 15,000 characters: {too_long}"


def test_decisions_cite_commits_not_tags():
    # tags do not travel with `main`; a decision's write-up is a commit every clone has
    text = (REPO / "benchmarks" / "README.md").read_text()
    assert "lab-journal" not in text and "a1600b8" in text


def test_a_test_suite_run_with_failures_is_refused_not_shown_as_the_suites_time(tmp_path, monkeypatch):
    module = _page_module()
    record = json.loads((REPO / "benchmarks" / "results" / "test_suite.json").read_text())
    stages = record["figures"]["stages"]
    stages["default"] = {"2": {"seconds": 190.0, "returncode": 1, "counts": {"failed": 2, "passed": 595}}}
    stages["slow"] = {"seconds": 870.0, "returncode": 0, "counts": {"passed": 37}}
    monkeypatch.setattr(module, "RESULTS", tmp_path)
    (tmp_path / "test_suite.json").write_text(json.dumps(record))
    page = tmp_path / "page.md"
    page.write_text("CI: <!-- fig test_suite --><!-- /fig -->")
    try:
        module.update_figures(page.read_text(), page)
    except SystemExit as refused:
        said = str(refused)
        assert "test_suite.json" in said and "default on 2 workers: 2 failed" in said and "\n" not in said
    else:
        raise AssertionError("a run with failing tests was rendered")

    stages["default"]["2"].update(returncode=0, counts={"passed": 597})
    (tmp_path / "test_suite.json").write_text(json.dumps(record))
    assert "the 597 default tests 190 s on 2 workers" in module.update_figures(page.read_text(), page)
