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
import re
import statistics
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


# ---------------------------------------------------------------------------------------------
# figures in the prose of README.md, docs/ and benchmarks/README.md: each between
# `<!-- fig NAME -->` and `<!-- /fig -->`, written by FIGURES[NAME] from its result file
FIG_START = re.compile(r"<!-- fig ([a-z0-9_]+) -->")
FIG_END = "<!-- /fig -->"


def _need(name: str) -> dict:
    record = load(name)
    if record is None:
        raise SystemExit(f"{RESULTS / (name + '.json')} is missing: a page cites it between `<!-- fig … -->` markers")
    return record


def _transcribed(record: dict) -> str:
    return f"transcribed from {record['transcribed_from']}"


def _span(values, fmt: str) -> str:
    low, high = min(values), max(values)
    return fmt.format(low) if fmt.format(low) == fmt.format(high) else f"{fmt.format(low)} to {fmt.format(high)}"


def demo_seconds(record: dict, run: dict) -> tuple[dict, float, list]:
    """Each stage's median seconds and the median wall time over the record's runs on `run`'s kernels (the
    same lineage with other SFT seeds, one after the other on a shared machine: one run's time is noise),
    and every run's wall time."""
    runs = [r for r in record["figures"]["runs"] if r["kernels"] == run["kernels"]]
    stages = {name: statistics.median(t) if (t := [r["stage_s"][name] for r in runs
                                                   if r["stage_s"].get(name) is not None]) else None
              for name in run["stage_s"]}
    walls = sorted(r["wall_s"] for r in runs)
    return stages, statistics.median(walls), walls


def fig_demo_log() -> str:
    """The demo's output as a user sees it: its results from the demo's seed-0 run, each time the median of the
    record's runs (`demo_seconds`)."""
    record = _need("demo")
    run = demo_run(record)
    checks = run["checks"]
    s, wall, walls = demo_seconds(record, run)
    lines = [f"[{i}/{len(s)}] {name:<22}done in {seconds:.0f} s" for i, (name, seconds) in enumerate(s.items(), 1)]
    lines[3] += f": final loss {run['final_train_loss']:.3f}"
    lines[4] += f": vs SFT on validation {run['gate']:+.4f}, headline {run['headline']}"
    machine = record["machine"]
    return "\n".join([
        "```", f"$ make demo        # {machine.get('cores')}-core {machine.get('cpu')} (kernels pinned to "
        f"{run['kernels'].upper()}); times: medians of {len(walls)} runs",
        *([f"rhythm demo: one backfill of {len(s)} stages, teacher shard 1000-2999, evaluation window 0 "
           "(DAGSTER_HOME=…)", "full log: …/storage/logs/demo-….log",
           "backfill …: its runs start as the daemon launches them"] if "runs" in run else
          [f"rhythm demo: job rhythm_lineage, run …, {len(s)} stages (DAGSTER_HOME=…)",
           "full log: …/storage/logs/demo-….log"]), *lines, "",
        (f"backfill …: {'SUCCESS' if run['success'] else 'FAILURE'} in {wall:.0f} s ({run['runs']} runs)"
         if "runs" in run else f"run …: {'SUCCESS' if run['success'] else 'FAILURE'} in {wall:.0f} s")
        + (f"        # the {len(walls)} runs: {_span(walls, '{:.0f}')} s" if len(walls) > 1 else ""),
        f"…  the results table, every asset check ({sum(v == 'passed' for v in checks.values())} of {len(checks)} "
        "passed here, or FAILED with its severity and why),",
        "   the students' checkpoint folders and how to open the run (`rhythm lineage`, `make ui`)", "```"])


def fig_readme_windows() -> str:
    run = demo_run(_need("demo"))
    paired = _need("paired_belief_sum")["figures"]
    gap = run["belief_gap"]["ood/student_sft"][0]
    by_seed = [n for n in paired["by_window"]["ood"]["all"] if n.startswith("sum_")]
    by_condition = {c: _span([paired["by_window"][c]["all"][n]["mean"] for n in paired["by_window"][c]["all"]
                              if n.startswith("sum_")], "{:+.3f}") for c in CONDITIONS}
    sum_gain = _span([paired["pairs"][c]["mean of the pairs"]["v3"]["mean"] for c in CONDITIONS], "{:+.3f}")
    return (f"its belief error is {gap:.3f} above the Bayesian teacher's on OOD weeks (the table's other conditions "
            f"above). Over {len(by_seed)} SFT seeds of the demo's recipe and windows {paired['windows']} of evaluation "
            f"seeds ({_need('paired_belief_sum')['machine']['cpu']}, {_need('paired_belief_sum')['date']}), "
            f"paired per week, its score minus the Bayesian teacher's is "
            + ", ".join(f"{by_condition[c]} ({c})" for c in CONDITIONS)
            + f"; the decoder's sum adds {sum_gain} on average. GRPO's gate is {run['gate']:+.4f} ± "
            f"{num(run['gate_se'], '{:.4f}')}, so the headline is `{run['headline']}`")


def fig_readme_long() -> str:
    record = _need("long_preset")
    means = record["figures"]["mean_over_windows"]
    product = {c.split(" ")[0]: v for c, v in means.items() if "the product" in c}
    return (f"scores {_span(product['continuous'], '{:+.3f}')} (continuous), {_span(product['ood'], '{:+.3f}')} (OOD) "
            f"and {_span(product['discrete3'], '{:+.3f}')} (discrete3) against the Bayesian teacher per SFT seed over "
            f"those windows, in {record['figures']['wall_s'] / 60:.0f} minutes a run ({_transcribed(record)})")


def fig_readme_gpu() -> str:
    record = _need("gpu_check_h200")
    stages = record["figures"]["stages"]
    done = all(s.get("status") == "ok" for s in stages.values())
    gpu = record["machine"]["gpu"].split(" (")[0]
    return (f"On {gpu} at commit {record['commit']} {'every stage finished' if done else 'a stage failed'}: "
            f"LoRA SFT {stages['lora_sft']['seconds']} s, GRPO {stages['grpo']['seconds']} s, the play "
            f"{stages['play']['seconds']} s ({_transcribed(record)})")


def fig_tracking_cost() -> str:
    record = _need("tracking_overhead")
    f = record["figures"]
    without, with_ = (statistics.median(f["process_wall_s"][k]) for k in ("none", "mlflow"))
    return (f"{f['median_difference']:+.0%} on a {f['steps']}-step SFT run ({without:.1f} s without, {with_:.1f} s with, "
            f"{f['repeats']} runs each, `tracking_overhead.json`)")


def fig_teacher_throughput() -> str:
    f = _need("teacher_throughput")["figures"]
    t, api, stages = f["bayes_teacher"], f["openai_backend"], f["data_stages"]
    return (f"{t['workers_2']['episodes']:,} Bayesian-teacher episodes in {t['workers_2']['wall_s']} s with two workers "
            f"against {t['workers_1']['wall_s']} s with one; against a local OpenAI-compatible server with "
            f"{api['latency_s'] * 1000:.0f} ms latency, concurrency 16 is {api['speed_up']}× the sequential throughput; "
            f"the demo's data stages on {stages['weeks']:,} weeks of the {stages['teacher']} teacher: teacher "
            f"{stages['teacher stage']} s, re-grade {stages['re-grade report']} s, dataset {stages['SFT dataset']} s "
            "(`teacher_throughput.json`)")


def fig_teacher_cost() -> str:
    c = _need("teacher_cost_table")["figures"]["cost"]
    p = c["prices_per_m"]
    return (f"{c['cached_fraction']:.0%} of prompt tokens cached and "
            f"${c['by_reasoning_tokens_per_request']['0']['usd_per_30_episodes']:.2f} per {c['episodes']} episodes at "
            f"${p['input']:.2f}/${p['cached_input']:.2f}/${p['output']:.0f} per M before reasoning tokens "
            "(`teacher_cost_table.json`)")


def fig_executor_cost() -> str:
    paths = _need("executor_paths")["figures"]["paths"]
    multi = next(v for k, v in paths.items() if k.startswith("multiprocess"))
    return (f"{multi['wall_s'] / paths['in_process']['wall_s']:.2f}× the in-process run for the lineage "
            f"({multi['wall_s']:.0f} s against {paths['in_process']['wall_s']:.0f} s, `executor_paths.json`)")


def fig_kernel_isa() -> str:
    f = _need("kernel_isa")["figures"]
    rows = f["rows"]
    walls = {k: " / ".join(f"{r['sft_wall_s']:.1f}" for r in rows if r["kernels"] == k) for k in ("avx2", "native")}
    same = len({r["final_train_loss"] for r in rows}) == 1
    return (f"{f['sft_steps']} SFT steps {walls['avx2']} s pinned against {walls['native']} s native, "
            f"{'the same final loss' if same else 'different final losses'} (`kernel_isa.json`)")


def fig_sft_step() -> str:
    rows = _need("sft_step")["figures"]["rows"]

    def ratio(length, variant):
        return _span([r["s_per_step"][variant] / r["s_per_step"]["every position"] for r in rows
                      if r["max_length"] == length], "{:.2f}")
    return (f"{ratio(512, 'answers only')}× the s/step at 512 tokens, {ratio(4096, 'answers only')}× at 4,096, "
            f"losses {'the same' if all(r['losses_agree'] for r in rows) else 'different'} (`sft_step.json`)")


def fig_seed_spread() -> str:
    runs = _need("demo")["figures"]["runs"]
    recovery = [r["players"][c]["student_sft"]["recovery"] for r in runs for c in CONDITIONS]
    return (f"recovery {pct(min(recovery))} to {pct(max(recovery))} over {len(runs)} runs "
            f"(SFT seeds {', '.join(str(r['seed']) for r in runs)}; `demo.json`)")


def _rate(value: float) -> str:
    return f"{value:.0e}".replace("e-0", "e-")


def _pairs_table(record: dict) -> str:
    """A paired_students.py result file's paired differences b − a: a row per condition, a column per
    pair and the pairs' mean; v3 ± SE with the belief MAE difference in brackets."""
    pairs = record["figures"]["pairs"]
    labels = list(next(iter(pairs.values())))
    rows = [[condition, by_label[labels[0]]["v3"]["weeks"],
             *(f"{by_label[label]['v3']['mean']:+.4f} ± {by_label[label]['v3']['se']:.4f} "
               f"({by_label[label]['belief_mae']['mean']:+.4f})" for label in labels)]
            for condition, by_label in pairs.items()]
    return table(["condition", "weeks", *labels], rows)


def fig_grpo_week_decision() -> list[str]:
    """The decision's measurement (D37): whole-week against step-design GRPO on the same SFT starts."""
    record = load("paired_grpo_week_decision")
    if record is None:
        return []
    training = _need("grpo_week_training")
    arms = training["figures"]["arms"]
    checkpoints = training["figures"]["checkpoints"]
    seconds = {arm: [c["train_s"] for name, c in checkpoints.items() if name.startswith(f"grpo_{arm}_")] for arm in arms}
    week, step = arms["week"], arms["step"]
    lines = [f"The decision (`paired_grpo_week_decision.json`): whole-week GRPO ({week['max_steps']} steps at "
             f"{_rate(week['learning_rate'])}) minus the long preset's GRPO (the step design, {step['max_steps']} steps at "
             f"{_rate(step['learning_rate'])}) on the same demo SFT student, over evaluation windows "
             f"{record['figures']['windows']}; v3 difference b − a ± SE (belief MAE difference):", "",
             _pairs_table(record)]
    if sft := load("paired_grpo_week_vs_sft"):
        means = [f"{condition} {by_label[list(by_label)[-1]]['v3']['mean']:+.4f} ± {by_label[list(by_label)[-1]]['v3']['se']:.4f}"
                 for condition, by_label in sft["figures"]["pairs"].items()]
        lines += ["", f"Against its SFT start (`paired_grpo_week_vs_sft.json`), mean of the pairs: {', '.join(means)}."]
    lines += ["", "The GRPO stage's seconds per SFT seed (`grpo_week_training.json`, the shared 2-core machine as it "
              "was, not idle): " + "; ".join(f"{arm} {', '.join(str(s) for s in seconds[arm])}" for arm in arms) + "."]
    return lines


def fig_grpo_week() -> str:
    """D37: the decision's measurement, then one line on the earlier levers (transcribed)."""
    record = _need("grpo_week")
    f = record["figures"]
    ood = [float(lever["v3"][1].split()[0].replace("−", "-")) for lever in f["levers"]]
    lead = f["long_preset_lead"]
    earlier = (f"At the demo's budget, {len(ood)} variants moved OOD weeks by {min(ood):+.4f} to {max(ood):+.4f} "
               f"over their SFT start; the lead, {lead['steps']} steps at {lead['learning_rate']} on SFT seed "
               f"{lead['sft_seed']}, gave {' / '.join(lead['v3_over_sft_start'])} ({_transcribed(record)}; each "
               "variant in `grpo_week.json`).")
    decision = fig_grpo_week_decision()
    return "\n".join([*decision, "", earlier]) if decision else earlier


def fig_data_parallel() -> str:
    record = _need("data_parallel")
    f = record["figures"]
    gaps = f["relative_loss_difference_by_step"]
    parted = next((i for i, gap in enumerate(gaps) if gap > 1e-5), len(gaps))
    agreement = (f"per-step losses within {max(gaps[:parted]):.0e} relative for the first {parted} steps"
                 + (f", {gaps[parted]:.1e} at step {parted + 1} (the epoch's last, partial batch) and within "
                    f"{max(gaps[parted + 1:] or [0]):.0e} after" if parted < len(gaps) else ""))
    return (f"{f['steps']} SFT steps of the tiny student on {f['weeks']} weeks at a global batch of "
            f"{f['global_batch']}: 2 processes {f['ratio_2_over_1']:.2f}× the seconds per step of 1 on this "
            f"{record['machine']['cores']}-core CPU; {agreement}; the final weights within "
            f"{f['max_abs_weight_difference']:.0e} (`data_parallel.json`)")


def fig_eight_gpus() -> str:
    e = _need("data_parallel")["figures"]["eight_gpus"]
    return (f"LoRA r = 16 on the 3B student trains {e['trainable_parameters'] / 1e6:.1f} M parameters, "
            f"{e['gradient_mb']:.1f} MB of fp32 gradients a step; a ring all-reduce over 8 GPUs moves 7/4 of that per "
            f"GPU, {e['allreduce_ms']['NVLink']:.2f} ms on NVLink, {e['allreduce_ms']['PCIe Gen4']:.1f} ms on PCIe Gen4. "
            f"The published step (8 conversations, {e['one_gpu_step_s']} s on one H200, transcribed) leaves each of 8 GPUs "
            f"{e['conversations_per_gpu']} conversation, which alone takes {e['eight_gpu_step_s'][0]}-{e['eight_gpu_step_s'][1]} s: "
            f"about {e['speedup'][0]}-{e['speedup'][1]}× one GPU, not 8×, because one conversation at a time "
            f"leaves a GPU waiting on the host (`data_parallel.json`, arithmetic, not measured)")


def test_suite_failures(record: dict) -> list[str]:
    """Each stage of a benchmarks/test_suite.py run that did not pass, as `default on 2 workers: 2 failed`: a
    non-zero exit status, failed or erroring tests, or a pytest run with no summary line."""
    found = []
    for name, stage in record["figures"]["stages"].items():
        runs = stage.items() if name == "default" else [(None, stage)]
        for workers, run in runs:
            counts = run.get("counts") or {}
            bad = ", ".join(f"{n} {k}" for k, n in counts.items() if k in ("failed", "error", "errors") and n)
            unread = "counts" in run and not counts  # pytest printed no summary line: it did not finish
            if run["returncode"] or bad or unread:
                said = bad or ("no pytest summary" if unread else f"exit status {run['returncode']}")
                found.append(f"{name}{f' on {workers} worker' + 's' * (workers != '1') if workers else ''}: {said}")
    return found


def fig_test_suite() -> str:
    """What `make test` and CI's stages took, from benchmarks/test_suite.py's run; a run with a failing stage is
    refused, never shown as the suite's time."""
    record = _need("test_suite")
    if failures := test_suite_failures(record):
        raise SystemExit(f"{RESULTS / 'test_suite.json'} records a failing run ({'; '.join(failures)}): re-run "
                         "`python benchmarks/test_suite.py` on a passing suite; its time is not shown until then")
    stages = record["figures"]["stages"]
    default = stages["default"]
    workers = max(default, key=int)

    def took(seconds: float) -> str:
        return "under 1 s" if seconds < 1 else f"{seconds:.0f} s"

    parts = [f"install {took(stages['install']['seconds'])}"] if "install" in stages else []
    parts += [f"lint {took(stages['lint']['seconds'])}",
              f"the {default[workers]['counts']['passed']} default tests {took(default[workers]['seconds'])} on "
              f"{workers} workers" + (f" ({took(default['1']['seconds'])} on one)" if "1" in default and workers != "1"
                                      else "")]
    if "slow" in stages:
        parts.append(f"the {stages['slow']['counts']['passed']} slow tests {took(stages['slow']['seconds'])}")
    machine = record["machine"]
    return (f"On a {machine['cores']}-core {machine['cpu']} ({record['date']}, code at `{record['commit']}`): "
            + ", ".join(parts) + "; a shared machine's times vary from run to run (`benchmarks/test_suite.py`).")


def fig_readout_target() -> str:
    """Lever 2 of issue 87: each pair's and the pairs' mean paired difference, profile target − teacher target."""
    record = _need("paired_readout_target")
    pairs = record["figures"]["pairs"]

    def mean(condition: str, label: str = "mean of the pairs") -> str:
        v3 = pairs[condition][label]["v3"]
        return f"{v3['mean']:+.4f} ± {v3['se']:.4f}"

    per_seed = {c: _span([pairs[c][k]["v3"]["mean"] for k in pairs[c] if k != "mean of the pairs"], "{:+.3f}")
                for c in CONDITIONS}
    machine = record["machine"]
    return (f"profile − teacher target, v3 paired per week over windows {record['figures']['windows']} and "
            f"{len(pairs['ood']) - 1} SFT seeds: " + ", ".join(f"{mean(c)} ({c})" for c in CONDITIONS)
            + "; per seed " + ", ".join(f"{per_seed[c]} ({c})" for c in CONDITIONS)
            + f" (`paired_readout_target.json`, {machine['cores']}-core {machine['cpu']}, {record['date']})")


FIGURES = {
    "demo_log": fig_demo_log,
    "readme_windows": fig_readme_windows,
    "readme_long": fig_readme_long,
    "readme_gpu": fig_readme_gpu,
    "tracking_cost": fig_tracking_cost,
    "teacher_throughput": fig_teacher_throughput,
    "teacher_cost": fig_teacher_cost,
    "executor_cost": fig_executor_cost,
    "kernel_isa": fig_kernel_isa,
    "sft_step": fig_sft_step,
    "seed_spread": fig_seed_spread,
    "grpo_week": fig_grpo_week,
    "data_parallel": fig_data_parallel,
    "eight_gpus": fig_eight_gpus,
    "test_suite": fig_test_suite,
    "readout_target": fig_readout_target,
}


def update_figures(text: str, path: Path) -> str:
    """Every `<!-- fig NAME -->…<!-- /fig -->` span in a page rewritten from its result file."""
    out, at = [], 0
    for match in FIG_START.finditer(text):
        if match.start() < at:
            continue
        end = text.find(FIG_END, match.end())
        name = match.group(1)
        if end < 0 or name not in FIGURES:
            problem = "has no `<!-- /fig -->`" if end < 0 else f"names no figure in FIGURES ({', '.join(FIGURES)})"
            raise SystemExit(f"{path}: `<!-- fig {name} -->` {problem}")
        figure = FIGURES[name]()
        out += [text[at:match.end()], f"\n{figure}\n" if "\n" in figure else figure, FIG_END]
        at = end + len(FIG_END)
    return "".join(out) + text[at:]


def prose_pages() -> list[Path]:
    pages = [README, REPO / "benchmarks" / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    return [p for p in pages if p.exists() and p != PAGE]


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
    medians, wall, walls = demo_seconds(record, run)
    stages = ", ".join(f"{k} {v:.0f} s" for k, v in medians.items() if v is not None)
    took = (f"{wall:.0f} s, the median of {len(walls)} runs, {_span(walls, '{:.0f}')} s (the stages' medians: "
            f"{stages})" if len(walls) > 1 else f"{wall:.0f} s ({stages})")
    without = run["sft_without_belief_sum"]
    return ["## What `make demo` trains", "",
            ("The lineage as one backfill (`make demo`)" if "runs" in run else "The `rhythm_lineage` job")
            + f" with the asset defaults (SFT seed {run['seed']}, kernels pinned to "
            f"{run['kernels'].upper()}): {took}. Checkpoints `{run['sft_version']}` (SFT, final "
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


def readable(key: str) -> str:
    """A result file's key as a reader says it: `steps_per_s_stepping` → `steps/s stepping`, `wall_s` → `wall (s)`."""
    parts = []
    for part in str(key).split("."):
        part = re.sub(r"_per_s(?=_|$)", "/s", part)
        part = re.sub(r"_(s|usd|gib|kb)$", lambda m: f" ({ {'s': 's', 'usd': '$', 'gib': 'GiB', 'kb': 'kB'}[m.group(1)]})", part)
        parts.append(part.replace("_", " "))
    return " › ".join(parts)


def shown(value) -> str:
    """A figure at the precision it was measured to: 4 significant digits, thousands separated."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{float(f'{value:.4g}'):g}"
    return str(value)


def section_flat(record: dict, title: str, note: str = "") -> list[str]:
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
            rows.append([f"`{prefix}`", value if not isinstance(value, list) else " / ".join(map(shown, value))])

    walk("", record["figures"])
    groups: dict[str, list[str]] = {}
    for name, value in rows:  # one line per top-level group, its figures by their names under it
        head, _, rest = name.strip("`").partition(".")
        groups.setdefault(head if rest else "", []).append(f"{readable(rest or head)} {shown(value)}")
    out = [f"## {title}", "", *([note, ""] if note else []),
           *[(f"- **{readable(head)}**: " if head else "- ") + "; ".join(items) for head, items in groups.items()], ""]
    if listed:
        flat = [_flat(row) for row in listed]
        columns = list(dict.fromkeys(k for row in flat for k in row))
        out += [table([readable(c) for c in columns], [[shown(row.get(c, "–")) for c in columns] for row in flat]), ""]
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

# what a section's figures are where the result file does not say it
FLAT_NOTES = {
    "env_throughput": "The env, text-week and server rates: each the fastest of the script's repeats (`best_of`).",
}


def page() -> str:
    out = ["# Results", "",
           "[← README](../README.md) · written by `make results` from the result files in "
           "[`benchmarks/results/`](../benchmarks/results), one a benchmark "
           "([benchmarks/README.md](../benchmarks/README.md): which script answers which question); "
           "each section shows its main figures. Do not edit by hand: a test fails when the page is stale.",
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
            out += section_flat(record, title, FLAT_NOTES.get(name, ""))
    return "\n".join(out).rstrip() + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 where a file is stale")
    args = parser.parse_args(argv)
    demo = load("demo")
    if demo is None:
        raise SystemExit(f"{RESULTS / 'demo.json'} is missing: run `python benchmarks/demo_checks.py` first")
    wanted = {path: update_figures(path.read_text(), path) for path in prose_pages()}
    wanted[README] = update_readme(wanted[README], demo)
    wanted[PAGE] = page()
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
