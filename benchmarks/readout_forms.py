"""Other forms of the evidence chain, measured against the product's linear read-out: how close a
student that followed each exactly would come to the person (the chain's final belief), and
optionally the demo's SFT student trained on one of them. Prints figures; asserts nothing.

    python benchmarks/readout_forms.py [--weeks 3000] [--windows 0,5,7] [--teacher bayes|search]
        [--train-student OUT [--preset demo|long] [--form innovation|innovation_1t] [--sft-seed 0]
         [--linear-student MODEL_DIR]]

Forms, each fitted on the offline teacher's weeks 1000.. (`--teacher`, the Bayesian one by default; 90% of
them, as a dataset does) and played with its actions:
- linear: the product's (`teacher/evidence.py`): each increment a fixed linear function of the
  anomaly row, by the action and slot that caused it, fitted on the teacher's final beliefs;
- linear_truth: the same fitted on the true profiles of the training weeks;
- linear_counts: the same with a constant per (action, slot) added to each increment;
- innovation: the increment also depends on the previous belief and the step t (anomaly, anomaly/t,
  belief-0.5, (belief-0.5)/t and a constant, by action and slot), fitted step by step on the teacher's
  own belief changes: the Kalman filter's innovation form with a gain that shrinks over the week;
- innovation_1t: the same without the (belief - 0.5) term: the previous belief enters only through
  (belief - 0.5) / t: the product's `readout_form: innovation` (`teacher/evidence.fit_innovation_readout`,
  the long preset's) since 2026-11-27; the form with the plain term lost (benchmarks/README.md) and
  lives only here.
`--train-student` builds the preset's dataset (demo: the Bayesian teacher's 2,000 weeks; long: the
search teacher's 3,000) with the innovation chain (`--form`) in the answers, trains the preset's SFT student on
it and plays it beside the linear chain's student of the same SFT seed on the windows; `python
benchmarks/distillation.py --preset long --reuse-sft-from OUT/FORM --grpo '{"seed": S}'` adds its
GRPO student, and `benchmarks/paired_students.py` plays both chains' students week by week.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from evidence_readout import play, teacher_weeks  # noqa: E402

from rhythm_core.env import VectorRhythmEnv  # noqa: E402
from rhythm_core.env.conditions import parse_seeds  # noqa: E402
from rhythm_core.env.spec import ACTIONS, BELIEF_DIMS, SLOTS  # noqa: E402
from rhythm_core.evaluation.rollouts import evaluation_window  # noqa: E402
from rhythm_core.teacher.evidence import (  # noqa: E402
    RIDGE,
    EvidenceReadout,
    _evidence,
    _features,
    fit_evidence_readout,
    fit_innovation_readout,
    stated_final_belief,
    walk_chain,
)

PAIRS = len(ACTIONS) * len(SLOTS)


def _ridge(x: np.ndarray, y: np.ndarray, ridge: float, free_last: bool = True) -> np.ndarray:
    penalty = ridge * np.eye(x.shape[1])
    if free_last:
        penalty[-1, -1] = 0.0
    return np.linalg.solve(x.T @ x + penalty, x.T @ y)


def _counts(observations, upto: int) -> np.ndarray:
    counts = np.zeros(PAIRS)
    for t in range(1, upto + 1):
        action, _ = _evidence(observations[t], t)
        counts[action * len(SLOTS) + (t - 1) % len(SLOTS)] += 1
    return counts


def fit_linear_variant(weeks, target: str) -> callable:
    """The final belief of the linear read-out fitted on the truth or with per-(action, slot) constants."""
    rows, targets = [], []
    for (record, observations), truth in weeks:
        t, stated = stated_final_belief(record)
        extra = _counts(observations, t) if target == "counts" else []
        rows.append(np.concatenate([_features(observations, t), extra, [1.0]]))
        targets.append(truth if target == "truth" else stated)
    x = np.asarray(rows)
    coef = _ridge(x, np.asarray(targets), RIDGE * len(x))

    def final(observations):
        upto = len(observations) - 1
        extra = _counts(observations, upto) if target == "counts" else []
        return np.clip(np.concatenate([_features(observations, upto), extra, [1.0]]) @ coef, 0.0, 1.0)
    return final


def _innovation_features(anomaly, belief, t: int) -> np.ndarray:
    return np.concatenate([anomaly, anomaly / t, belief - 0.5, (belief - 0.5) / t, [1.0]])


class InnovationReadout:
    """The innovation-form chain, with EvidenceReadout's interface (`chain`, `to_dict`, `fit`)."""

    def __init__(self, linear: EvidenceReadout, start, coefs):
        self.linear, self.start, self.coefs = linear, np.asarray(start), coefs
        self.fit = {**linear.fit, "form": "innovation with a plain belief term"}

    def chain(self, observations):
        def increment(t, action, anomaly, belief):
            coef = self.coefs[action * len(SLOTS) + (t - 1) % len(SLOTS)]
            return _innovation_features(anomaly, belief, t) @ coef if coef is not None else np.zeros(len(BELIEF_DIMS))
        return walk_chain(observations, self.start, increment)

    def to_dict(self) -> dict:  # the linear read-out's weights (what the stage's metadata reads) and the fit
        return {**self.linear.to_dict(), "fit": self.fit, "form": "innovation_plain"}


def fit_innovation(fit_weeks, held_out=(), ridge: float = 1e-2) -> InnovationReadout:
    """Per (action, slot), least squares of the teacher's belief change on _innovation_features of
    the anomaly, its previous belief and the step."""
    rows, targets, starts = [[] for _ in range(PAIRS)], [[] for _ in range(PAIRS)], []
    for record, observations in fit_weeks:
        beliefs = np.array([[s["parsed"]["belief"][d] for d in BELIEF_DIMS] for s in record["steps"]])
        starts.append(beliefs[0])
        for t in range(1, len(observations)):
            action, anomaly = _evidence(observations[t], t)
            k = action * len(SLOTS) + (t - 1) % len(SLOTS)
            rows[k].append(_innovation_features(anomaly, beliefs[t - 1], t))
            targets[k].append(beliefs[t] - beliefs[t - 1])
    coefs = [_ridge(np.asarray(x), np.asarray(y), ridge, free_last=False) if x else None
             for x, y in zip(rows, targets)]
    return InnovationReadout(fit_evidence_readout(fit_weeks, held_out), np.mean(starts, axis=0), coefs)


def ceilings(n_weeks: int, windows: list[int], teacher: str = "bayes") -> None:
    weeks = teacher_weeks(range(1000, 1000 + n_weeks), teacher)
    cut = int(0.9 * n_weeks)
    env = VectorRhythmEnv("continuous")
    env.reset(np.arange(1000, 1000 + n_weeks))
    with_truth = list(zip(weeks[:cut], env.true_belief[:cut]))
    linear = fit_evidence_readout(weeks[:cut])
    forms = {"linear": lambda h: linear.chain(h)[1][-1],
             "linear_truth": fit_linear_variant(with_truth, "truth"),
             "linear_counts": fit_linear_variant(with_truth, "counts"),
             "innovation": (lambda r: lambda h: r.chain(h)[1][-1])(fit_innovation(weeks[:cut])),
             "innovation_1t": (lambda r: lambda h: r.chain(h)[1][-1])(fit_innovation_readout(weeks[:cut]))}
    print("| window | condition | teacher | " + " | ".join(forms) + " |")
    print("|---|---|---|" + "---|" * len(forms))
    for window in windows:
        for condition, spec in evaluation_window(window).items():
            histories, teacher_final, truth = play(condition, np.asarray(parse_seeds(spec)), "teacher", teacher)
            cells = [f"{np.abs(np.array([f(h) for h in histories]) - truth).mean():.3f}" for f in forms.values()]
            print(f"| {window} | {condition} | {np.abs(teacher_final - truth).mean():.3f} | " + " | ".join(cells) + " |",
                  flush=True)


def train_student(out: Path, sft_seed: int, windows: list[int], linear_student: str | None,
                  preset: str = "demo", form: str = "innovation") -> None:
    """The preset's SFT student of the innovation chain beside the linear chain's (trained here, or
    given): "demo" from the Bayesian teacher's demo weeks, "long" from the long preset's teacher and
    steps (its linear student must be given)."""
    from beyond_teacher import train, window_table

    import rhythm_core.data.sft_dataset as sft_dataset
    from rhythm_core.distill import PRESETS, run_distillation

    if preset == "long" and not linear_student:
        raise SystemExit("--preset long needs --linear-student (a long run's SFT model dir)")
    linear = linear_student or train("bayes", [], out / "linear", print, sft_seed)["bayes:sft"]
    # the dataset's answers carry the chain of `form`: the product's innovation read-out, or the lost one
    # with a plain belief term (benchmark-only), in place of whatever form the preset names
    fit = fit_innovation_readout if form == "innovation_1t" else fit_innovation
    sft_dataset.fit_readout = lambda _form, weeks, held_out=(): fit(weeks, held_out)
    if preset == "demo":
        innovation = train("bayes", [], out / form, print, sft_seed)["bayes:sft"]
    else:
        spec = {**PRESETS[preset], "sft": {**PRESETS[preset]["sft"], "seed": sft_seed}}
        run_distillation(out / form, spec, with_grpo=False, log=lambda m: print(m) if "done in" in m else None)
        innovation = str(next((out / form / "sft_checkpoint").glob("*/model")))
    rows = window_table({"linear:sft": linear, "innovation:sft": innovation}, windows, log=print)
    (out / "table.json").write_text(json.dumps(rows, indent=1) + "\n")
    print("| window | condition | player | v3 | Δ vs bayes | belief MAE |\n|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(str(v) for v in row.values()) + " |")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--weeks", type=int, default=3000)
    p.add_argument("--windows", default="0,5,7")
    p.add_argument("--teacher", default="bayes", choices=["bayes", "search"], help="the offline teacher fitted and "
                   "played (the ceilings' table)")
    p.add_argument("--train-student", type=Path, help="output folder: train and play the preset's student on it")
    p.add_argument("--sft-seed", type=int, default=0)
    p.add_argument("--preset", choices=["demo", "long"], default="demo", help="the student's budget and teacher")
    p.add_argument("--form", choices=["innovation", "innovation_1t"], default="innovation",
                   help="the chain the student learns (innovation_1t: the previous belief only through (belief - 0.5) / t)")
    p.add_argument("--linear-student", help="the linear chain's student of the same SFT seed, already trained (a "
                   "model dir, e.g. the demo's): skips training it")
    args = p.parse_args(argv)
    windows = [int(w) for w in args.windows.split(",") if w]
    if args.train_student:
        train_student(args.train_student, args.sft_seed, windows, args.linear_student, args.preset, args.form)
    else:
        ceilings(args.weeks, windows, args.teacher)


if __name__ == "__main__":
    main()
