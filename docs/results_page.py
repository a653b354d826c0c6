"""docs/results.md and the README's results table, written from the committed result files under
benchmarks/results/ (`make results`); `--check` exits 1 where either is not what the files give.

    python docs/results_page.py           # rewrite docs/results.md and the README's table
    python docs/results_page.py --check   # what the tests run

Every table names the command that made its figures, the machine and the date; nothing here
measures anything.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
PAGE = REPO / "docs" / "results.md"
README = REPO / "README.md"
README_START = "<!-- results table: written by `make results` from benchmarks/results/demo.json -->"
README_END = "<!-- end of results table -->"
CONDITIONS = ("continuous", "ood", "discrete3")
REFERENCES = ("random", "heuristic", "heuristic_const_belief", "fallback", "bayes", "bayes_v3", "search", "oracle")


def load(name: str) -> dict | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def source(record: dict) -> str:
    """The line under a table: its command, machine, date and commit (and where a figure was copied from)."""
    machine = record.get("machine", {})
    where = machine.get("cpu") or machine.get("gpu") or "unknown machine"
    if machine.get("cores"):
        where = f"{machine['cores']}-core {where}"
    line = f"`{record['command']}` — {where}, {record['date']}, code at `{record['commit']}`"
    if record.get("transcribed_from"):
        line += f"; figures copied from {record['transcribed_from']}"
    return f"<sub>{line}.</sub>"


def pct(value) -> str:
    return "–" if value is None else f"{value:.0%}"


def num(value, fmt: str = "{:.3f}") -> str:
    return "–" if value is None else fmt.format(value)


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def demo_run(record: dict, kernels: str = "avx2", seed: int = 0) -> dict:
    return next((r for r in record["figures"]["runs"] if r["kernels"] == kernels and r["seed"] == seed), None)


# ---------------------------------------------------------------------------------------------
# the README's table
def readme_table(demo: dict) -> str:
    run = demo_run(demo)
    p = run["players"]

    def row(label, cell):
        return [label, *[cell(c, p[c]) for c in CONDITIONS]]

    def student(name):
        return lambda c, a: (f"{a[name]['v3']:.3f} ({pct(a[name]['recovery'])} / {pct(a[name]['recovery_bayes'])})")

    rows = [
        row("fallback-only / heuristic / Bayesian teacher",
            lambda c, a: f"{a['fallback']['v3']:.3f} / {a['heuristic']['v3']:.3f} / {a['bayes']['v3']:.3f}"),
        row("the v3-planning / search teachers; oracle",
            lambda c, a: f"{a['bayes_v3']['v3']:.3f} / {a['search']['v3']:.3f}; {a['oracle']['v3']:.3f}"),
        row(f"SFT student{', the headline' if run['headline'] == 'student_sft' else ''} (recovery of the search / "
            "the Bayesian teacher's margin)", student("student_sft")),
        row(f"GRPO student{', the headline' if run['headline'] == 'student_grpo' else ''}", student("student_grpo")),
        row("belief MAE: SFT / GRPO (search / Bayesian teacher's; a constant's)",
            lambda c, a: (f"{a['student_sft']['belief_mae']:.3f} / {a['student_grpo']['belief_mae']:.3f} "
                          f"({a['search']['belief_mae']:.3f} / {a['bayes']['belief_mae']:.3f}; "
                          f"{a['heuristic_const_belief']['belief_mae']:.3f})")),
        row("SFT belief MAE without the decoder's sum (v3)",
            lambda c, a: (f"{run['sft_without_belief_sum'][c]['belief_mae']:.3f} "
                          f"({run['sft_without_belief_sum'][c]['v3']:.3f})")),
    ]
    checks = run["checks"]
    passed = sum(v == "passed" for v in checks.values())
    return "\n".join([
        README_START,
        table(["", *CONDITIONS], rows),
        "",
        "Greedy decoding writes each number as the median of the student's distribution, and **each belief after a "
        "week's first as the previous belief plus the increment the answer has just written** (the decoder forces "
        "the sum, `training/number_decoding.py`): the MAE above sums the student's own increments exactly; the last "
        "row is the same weights writing every belief themselves. "
        f"Checkpoints `{run['sft_version']}` (SFT) and `{run['grpo_version']}` (GRPO); {passed} of {len(checks)} "
        "asset checks passed.",
        "",
        source(demo),
        README_END,
    ])


def update_readme(text: str, demo: dict) -> str:
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < 0:
        raise SystemExit(f"{README}: the results table's markers are missing ({README_START!r} … {README_END!r})")
    return text[:start] + readme_table(demo) + text[end + len(README_END):]


# ---------------------------------------------------------------------------------------------
# docs/results.md
def section_baselines(record: dict) -> list[str]:
    conditions = record["figures"]["conditions"]
    rows = []
    for condition, block in conditions.items():
        for grader in ("v3",):  # v2's rows are in the result file
            agents = block["graders"][grader]
            rows.append([condition, block["seeds"], grader,
                         *[f"{agents[a]['final_score']:.3f} ± {(agents[a]['ci95'][1] - agents[a]['ci95'][0]) / 2:.3f}"
                           for a in REFERENCES if a in agents]])
    out = ["## Baselines", "",
           "Every reference on the first evaluation seeds (mean ± 95% CI half-width). `fallback`: a model that never "
           "answers validly (no belief); `bayes_v3`: the Bayesian teacher planning for v3; `search`: its inference "
           "acting by Monte-Carlo rollouts (the presets' teacher).", "",
           table(["condition", "seeds", "grader", *REFERENCES], rows), "",
           "Belief MAE and each teacher's ms a week are in the result file.", ""]
    teachers = record["figures"].get("teacher_stage") or {}
    if teachers:
        out += [table(["teacher stage", "weeks", "wall s", "weeks/s", "v3", "worker processes"],
                      [[b, t["weeks"], t["wall_s"], t["weeks_per_s"], t["v3"], t["workers"]] for b, t in teachers.items()]),
                ""]
    return out + [source(record), ""]


def section_demo(record: dict) -> list[str]:
    run = demo_run(record)
    players = run["players"]

    def cell(m):
        recovery = "" if m["recovery"] is None else f", {pct(m['recovery'])} / {pct(m['recovery_bayes'])}"
        mae = "" if m["belief_mae"] is None else f" (MAE {m['belief_mae']:.3f})"
        invalid = f", {m['invalid_rate']:.0%} invalid" if m["invalid_rate"] else ""
        return f"{m['v3']:.3f} ± {(m['ci95'][1] - m['ci95'][0]) / 2:.3f}{mae}{recovery}{invalid}"

    rows = [[agent, *[cell(players[c][agent]) for c in CONDITIONS]] for agent in players[CONDITIONS[0]]]
    stages = ", ".join(f"{k} {v:.0f} s" for k, v in run["stage_s"].items() if v is not None)
    without = run["sft_without_belief_sum"]
    return ["## What `make demo` trains", "",
            f"The `rhythm_lineage` job with the asset defaults (SFT seed {run['seed']}, torch's kernels pinned to "
            f"{run['kernels'].upper()}): {run['wall_s']:.0f} s ({stages}). Checkpoints `{run['sft_version']}` (SFT, final "
            f"loss {run['final_train_loss']}) and `{run['grpo_version']}` (GRPO; its gate {run['gate']:+.4f} ± "
            f"{num(run['gate_se'], '{:.4f}')} on held-out training weeks; headline `{run['headline']}`). Seeds: "
            + ", ".join(f"{c} {s}" for c, s in run["seeds"].items()) + ". Recovery is of the search / the Bayesian "
            "teacher's margin over the heuristic.", "",
            table(["agent: v3 ± 95% CI (belief MAE), recovery", *CONDITIONS], rows), "",
            "The students' beliefs are the decoder's sums of their own increments; the same SFT weights writing every "
            "belief themselves: belief MAE " + " / ".join(f"{without[c]['belief_mae']:.3f}" for c in CONDITIONS)
            + " (v3 " + " / ".join(f"{without[c]['v3']:.3f}" for c in CONDITIONS) + ").", "",
            f"Asset checks: {sum(v == 'passed' for v in run['checks'].values())} of {len(run['checks'])} passed"
            + "".join(f"; `{k}` {v}" for k, v in run["checks"].items() if v != "passed") + ".", "",
            source(record), ""]


def section_seeds_kernels(record: dict) -> list[str]:
    rows = []
    for run in record["figures"]["runs"]:
        cells = []
        for condition in CONDITIONS:
            sft, bayes = run["players"][condition]["student_sft"], run["players"][condition]["bayes"]
            cells.append(f"{pct(sft['recovery'])} / {pct(sft['recovery_bayes'])}, {sft['v3'] - bayes['v3']:+.3f}")
        maes = " / ".join(f"{run['players'][c]['student_sft']['belief_mae']:.3f}" for c in CONDITIONS)
        passed = sum(v == "passed" for v in run["checks"].values())
        rows.append([f"{run['kernels'].upper()}, {run['seed']} (`{run['sft_version']}`)", *cells,
                     maes, f"{run['gate']:+.4f} ± {num(run['gate_se'], '{:.4f}')}",
                     f"{passed} of {len(run['checks'])} pass"])
    return ["## Across SFT seeds", "",
            "The demo's lineage per SFT seed (and CPU kernels), each in a fresh instance, one after the other: the SFT "
            "student's recovery of the search / the Bayesian teacher's margin and its score minus the Bayesian "
            "teacher's, per condition, on the default evaluation seeds.", "",
            table(["kernels, SFT seed (checkpoint)", *CONDITIONS, "SFT belief MAE", "GRPO gate ± SE", "checks"],
                  rows), "", source(record), ""]


def section_paired(record: dict, title: str, text: str) -> list[str]:
    figures = record["figures"]
    out = [f"## {title}", "", text, ""]
    if figures.get("pairs"):
        rows = [[c, label, p["v3"]["weeks"], f"{p['v3']['mean']:+.4f} ± {p['v3']['se']:.4f}",
                 f"{p['belief_mae']['mean']:+.4f} ± {p['belief_mae']['se']:.4f}"]
                for c, pairs in figures["pairs"].items() for label, p in pairs.items()
                if label == "mean of the pairs" or len(pairs) == 1]  # each pair's own in the result file
        out += [table(["condition", "pair (b − a)", "weeks", "v3 difference", "belief MAE difference"], rows), ""]
    if figures.get("by_window"):
        students = [n for n in next(iter(next(iter(figures["by_window"].values())).values())) if n != "reference"]
        if figures.get("pairs"):  # the b side (the change); the a side's rows are in the result file
            b_side = {label.split(" − ")[0] for pairs in figures["pairs"].values() for label in pairs}
            students = [n for n in students if n in b_side]
        rows = []
        for student in students:
            cells = []
            for condition in CONDITIONS:
                pooled = figures["by_window"][condition]["all"][student]
                cells.append(f"{pooled['mean']:+.4f} ± {pooled['se']:.4f} ({pooled['belief_mae']:.3f})")
            rows.append([student, *cells])
        reference = [f"{figures['by_window'][c]['all']['reference']['v3']:.3f} "
                     f"({figures['by_window'][c]['all']['reference']['belief_mae']:.3f})" for c in CONDITIONS]
        out += [f"Each student against `{figures['reference']}`, pooled over windows {figures['windows']} (Δ v3 ± SE "
                "per week, final belief MAE in brackets; per window in the result file):", "",
                table(["student", *CONDITIONS], [[f"`{figures['reference']}` itself", *reference], *rows]), ""]
    return out + [source(record), ""]


def section_gpu(record: dict) -> list[str]:
    stages = record["figures"]["stages"]
    rows = []
    for name, s in stages.items():
        figures = "; ".join([s["what"]] * ("what" in s) + [f"{k.replace('_', ' ')}: {v}" for k, v in s.items()
                                                           if k not in ("status", "seconds", "peak", "what")])
        rows.append([f"{name} ({s.get('status', '–')})", num(s.get("seconds"), "{}"), s.get("peak", "–"), figures])
    out = ["## On a GPU", "", f"`rhythm gpu-check` on {record['machine'].get('gpu', 'a GPU')}: each stage's seconds, "
           "figures and peak memory.", "", table(["stage (status)", "seconds", "peak", "figures"], rows), ""]
    if record["figures"].get("play_variants"):
        out += ["The play's variants side by side (prompt cache off, cuDNN attention on) are in the result file.", ""]
    return out + [source(record), ""]


def section_long(record: dict) -> list[str]:
    figures = record["figures"]
    means = [[c, *[f"{v:+.3f}" for v in vals]] for c, vals in figures["mean_over_windows"].items()]
    return ["## The larger budget (`rhythm distill --preset long`)", "", figures["recipe"], "",
            f"The SFT student minus the Bayesian teacher (v3), mean over windows "
            f"{sorted({w['window'] for w in figures['windows']})}, per SFT seed (per window in the result file):", "",
            table(["condition", *[f"seed {s}" for s in figures["sft_seeds"]]], means), "",
            f"Wall time of one run: {figures['wall_s']} s ({figures['stage_s']}).", "", source(record), ""]


def _flat(value: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in value.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def section_flat(record: dict, title: str) -> list[str]:
    figures = dict(record["figures"])
    listed = figures.pop("rows", None)
    record = {**record, "figures": figures}
    rows, skipped = [], []

    def walk(prefix, value, depth=0):
        if isinstance(value, dict) and depth >= 3:
            skipped.append(prefix)  # finer detail (per step, per stage): the result file has it
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v, depth + 1)
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            skipped.append(prefix)  # per-round detail: the result file has it
        elif isinstance(value, str) and len(value) > 24:
            skipped.append(prefix)  # a description, not a figure
        else:
            rows.append([f"`{prefix}`", value if not isinstance(value, list) else ", ".join(map(str, value))])

    walk("", record["figures"])
    groups: dict[str, list[str]] = {}
    for name, value in rows:  # one line per top-level group, its figures by their names under it
        head, _, rest = name.strip("`").partition(".")
        shown = f"{value:.4g}" if isinstance(value, float) else value
        groups.setdefault(head if rest else "", []).append(f"{rest or head} {shown}")
    out = [f"## {title}", "",
           *[(f"- **{head}**: " if head else "- ") + ", ".join(items) for head, items in groups.items()], ""]
    if listed:
        flat = [_flat(row) for row in listed]
        columns = list(dict.fromkeys(k for row in flat for k in row))
        out += [table(columns, [[row.get(c, "–") for c in columns] for row in flat]), ""]
    return out + [source(record), ""]


PAIRED = {
    "paired_belief_sum": ("The demo's students over evaluation windows, with the decoder's sum and without",
                          "The demo's SFT students of seeds 0, 1 and 2 (the runs above) on the default evaluation "
                          "seeds (window 0) and windows 4-9, seeds used for nothing else, each playing twice: "
                          "writing every belief itself (`nosum_*`) and with each belief the sum of its increments "
                          "(`sum_*`, the product); paired week by week."),
}
FLAT = {
    "env_throughput": "Environment and agents' throughput",
    "teacher_throughput": "Teacher throughput and the data stages",
    "teacher_cost_table": "What a real teacher costs",
    "eval_batching": "Lockstep play and the prompt cache",
    "sft_step": "The SFT step's hooks",
    "kernel_isa": "Kernels pinned to AVX2",
    "tracking_overhead": "What MLflow tracking costs",
    "executor_paths": "The UI's multiprocess path against the in-process run",
    "artifact_store": "Artifacts on S3 against a local root",
}


def page() -> str:
    out = ["# Results", "",
           "[← README](../README.md) · written by `make results` from the result files in "
           "[`benchmarks/results/`](../benchmarks/results) (each benchmark writes one; "
           "[benchmarks/README.md](../benchmarks/README.md) says which script answers which question). "
           "Each section shows a benchmark's main figures; its result file holds all of them. "
           "Do not edit this page by hand: `tests/test_results_page.py` fails when it differs from what the files give.",
           ""]
    if demo := load("demo"):
        out += section_demo(demo)
    if record := load("baselines"):
        out += section_baselines(record)
    if demo and len(demo["figures"]["runs"]) > 1:
        out += section_seeds_kernels(demo)
    for name, (title, text) in PAIRED.items():
        if record := load(name):
            out += section_paired(record, title, text)
    if record := load("long_preset"):
        out += section_long(record)
    if record := load("gpu_check_h200"):
        out += section_gpu(record)
    for name, title in FLAT.items():
        if record := load(name):
            out += section_flat(record, title)
    return "\n".join(out).rstrip() + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 where a file is stale")
    args = parser.parse_args(argv)
    demo = load("demo")
    if demo is None:
        raise SystemExit(f"{RESULTS / 'demo.json'} is missing: run `python benchmarks/demo_checks.py` first")
    wanted = {PAGE: page(), README: update_readme(README.read_text(), demo)}
    stale = [path for path, text in wanted.items() if not path.exists() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"{path.relative_to(REPO)} is stale: run `make results`", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(wanted[path])
        print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
