"""The distilled teacher's inference as a running sum a small student can follow: the "evidence"
reasoning.

A teacher's belief after a week is close to a fixed linear function of the week's anomalies, summed
by the action and slot that produced each (for the Bayesian teacher, whose posterior is a Kalman
filter, its error from the true profile is near the teacher's own and far below a constant's:
benchmarks/README.md, D6). Written
step by step that read-out is a chain a student can follow: each step's increment is an exact linear
function of the anomaly row the same user turn shows (the weights chosen by the last action and its
slot), and the belief is the previous one plus the increment. The teacher's own per-step change is
not such a function (its gain depends on the whole history), and a student trained to copy it
learned nothing (benchmarks/README.md, D5).

The read-out is fitted on the records being distilled — the anomalies each teacher saw and the
belief it stated at the end of the week — so the student learns *its* teacher's inference, whether
that teacher is the offline Bayesian one or a model behind an API. `fit_evidence_readout` fits it
(ridge least squares; deterministic) and reports how close it stays to the teacher's own stated
beliefs on held-out weeks; `EvidenceReadout.chain` turns an episode's observations into the
increments and beliefs the answers carry, on the 2-decimal grid they are written in, so the stated
belief is exactly the previous one plus the stated increment.

Two forms of the chain (`READOUT_FORMS`, a dataset's `readout_form`): "linear" (above; the demo's) and
"innovation" (`InnovationReadout`, the long preset's): the increment is a linear function, by action
and slot, of the shown anomaly, the anomaly / t, (the previous *stated* belief - 0.5) / t and a
constant, fitted step by step on the teacher's own belief changes — a Kalman filter's update with a
gain that shrinks over the week. Every number it uses is still on the page (the previous belief is
the previous answer's); its final belief stays nearer the person than the linear sum's, and the long
preset's students of it score above those of the linear chain (benchmarks/README.md, D7). A plain (belief - 0.5) term as well follows the teacher closer
but loses discrete3 weeks. At the demo's budget most SFT seeds do not learn this form: they
miss its large first step (benchmarks/README.md, D8).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rhythm_env.protocol.format import READOUT_FORMS
from rhythm_env.protocol.numbers import DECIMALS, add_increment
from rhythm_env.sim.profiles import sample_factors
from rhythm_env.sim.spec import ACTIONS, BELIEF_DIMS, METERS, SLOTS, true_belief

RIDGE = 1e-3  # keeps the weights of rare (action, slot) pairs near 0 instead of fitting noise
# Below this many weeks with a stated final belief the fit is flagged unreliable (in the dataset card
# and the asset metadata), since 600 weights are fitted from too little; from a few
# hundred weeks on, the chain's final-belief MAE hardly moves (benchmarks/README.md, D6).
MIN_FIT_EPISODES = 100


class ReadoutFitError(ValueError):
    """The records cannot support an evidence read-out (too few weeks, or no stated beliefs)."""


def _shown(anomaly) -> np.ndarray:
    """An anomaly row as the prompt shows it: 2 decimals."""
    return np.round(np.asarray(anomaly, dtype=np.float64), DECIMALS)


def _evidence(observation, t: int) -> tuple[int, np.ndarray]:
    """(action index, anomaly row) an observation after the first step shows: an `env.Observation`
    (full precision, as the prompt renders it) or its dict form (`to_dict`, 4 decimals)."""
    if isinstance(observation, dict):
        action, anomaly = observation.get("last_action"), observation.get("anomaly")
        anomaly = None if anomaly is None else [anomaly[m] for m in METERS]
    else:
        action, anomaly = observation.last_action, observation.anomaly
    if not action or anomaly is None:
        raise ValueError(f"step {t}: an observation after the first needs last_action and anomaly")
    return ACTIONS.index(action), _shown(anomaly)


def _features(observations: list, upto: int) -> np.ndarray:
    """(A*S*M,) sums of the displayed anomalies of observations 1..upto by the action and slot that
    caused them (observation t shows the anomaly of the action taken at step t-1)."""
    sums = np.zeros((len(ACTIONS), len(SLOTS), len(METERS)))
    for t in range(1, upto + 1):
        action, anomaly = _evidence(observations[t], t)
        sums[action, (t - 1) % len(SLOTS)] += anomaly
    return sums.reshape(-1)


def walk_chain(observations: list, start, increment) -> tuple[np.ndarray, np.ndarray]:
    """Increments and beliefs (T, 3) of a chain from `start`: at each step t > 0 the increment is
    `increment(t, action, anomaly, previous belief)` on the grid, and the belief the previous plus it,
    clipped to [0, 1], on the grid (`protocol.add_increment`: a stated belief is exactly the previous
    one plus the stated increment)."""
    increments = np.zeros((len(observations), len(BELIEF_DIMS)))
    beliefs = np.zeros_like(increments)
    belief = np.round(np.asarray(start, dtype=np.float64), DECIMALS)
    for t, obs in enumerate(observations):
        if t > 0:
            action, anomaly = _evidence(obs, t)
            increments[t] = np.round(increment(t, action, anomaly, belief), DECIMALS) + 0.0
            belief = add_increment(belief, increments[t])
        beliefs[t] = belief
    return increments, beliefs + 0.0


@dataclass(frozen=True)
class EvidenceReadout:
    """weights (A, S, M, 3) and intercept (3,) of the read-out, and the fit's figures."""

    weights: np.ndarray
    intercept: np.ndarray
    fit: dict = field(default_factory=dict)

    def increment(self, action: int, slot: int, anomaly) -> np.ndarray:
        """The belief increment (3,) the anomaly observed after `action` in `slot` carries, on the grid."""
        return np.round(_shown(anomaly) @ self.weights[action, slot], DECIMALS) + 0.0

    def chain(self, observations: list) -> tuple[np.ndarray, np.ndarray]:
        """Increments (T, 3) and beliefs (T, 3) for one episode's observations (step 0 first;
        `env.Observation`s as the prompt renders them, or their dicts). The first belief is the
        intercept; each later one is the previous plus the increment of the anomaly that step shows,
        clipped to [0, 1], on the grid."""
        return walk_chain(observations, self.intercept,
                          lambda t, action, anomaly, _belief: self.increment(action, (t - 1) % len(SLOTS), anomaly))

    def final_belief(self, observations: list[dict], upto: int) -> np.ndarray:
        """The read-out's (unrounded, clipped) belief after observations 1..upto."""
        return np.clip(self.intercept + _features(observations, upto) @ self.weights.reshape(-1, len(BELIEF_DIMS)),
                       0.0, 1.0)

    form = "linear"

    def to_dict(self) -> dict:
        return {"form": self.form, "weights": np.round(self.weights, 6).tolist(),
                "intercept": np.round(self.intercept, 6).tolist(), "fit": self.fit,
                "shape": "weights[action][slot][meter][belief_dim]"}

    @classmethod
    def from_dict(cls, data: dict) -> EvidenceReadout:
        return cls(np.asarray(data["weights"], dtype=np.float64), np.asarray(data["intercept"], dtype=np.float64),
                   dict(data.get("fit", {})))


def _stated_belief(step: dict) -> np.ndarray | None:
    """The belief a step states, or None (a fallback step, or no valid belief)."""
    parsed = step.get("parsed") or {}
    if step.get("invalid") or not parsed.get("valid") or parsed.get("belief") is None:
        return None
    return np.array([float(parsed["belief"][d]) for d in BELIEF_DIMS])


def stated_final_belief(record: dict) -> tuple[int, np.ndarray] | None:
    """(step, belief) of the last step where the teacher stated a valid belief, or None."""
    for t in range(len(record["steps"]) - 1, -1, -1):
        belief = _stated_belief(record["steps"][t])
        if belief is not None:
            return t, belief
    return None


def _no_stated_belief(form: str, weeks: int) -> ReadoutFitError:
    return ReadoutFitError(
        f"the {form} read-out is fitted on the teacher's own stated beliefs, and none of the {weeks} training "
        "weeks states a valid belief; use a teacher that states its belief, or build the dataset with reasoning 'none'")


def _reliability(weeks: int) -> dict:
    """The fit's `reliable` flag, with a `warning` under MIN_FIT_EPISODES weeks."""
    if weeks >= MIN_FIT_EPISODES:
        return {"reliable": True}
    return {"reliable": False, "warning": f"fitted on {weeks} weeks with a stated belief, fewer than the "
                                          f"{MIN_FIT_EPISODES} a reliable read-out needs: play more teacher weeks"}


# What the linear read-out's final belief is fitted to: the teacher's last stated belief (its inference,
# distilled), or the person's true profile, which the training weeks know (the posterior mean the features
# allow under the training prior).
READOUT_TARGETS = ("teacher", "profile")


def _true_belief(record: dict) -> np.ndarray:
    return np.asarray(true_belief(sample_factors(record["condition"], [int(record["seed"])]))[0], dtype=np.float64)


def fit_evidence_readout(fit_weeks: list[tuple[dict, list[dict]]],
                         held_out: list[tuple[dict, list[dict]]] = (), target: str = "teacher") -> EvidenceReadout:
    """Fit the read-out on `fit_weeks` — (trajectory record, its observations as the student sees
    them) — with each week's target the belief its teacher stated last (`target` "teacher") or the
    person's true profile ("profile"), and its features the anomalies seen before the teacher's last
    stated belief. `held_out` weeks (e.g. the dataset's validation split) measure the fit: the
    read-out's MAE against the teacher's own stated beliefs, per condition, beside a constant's (the
    fit weeks' mean belief), and with the profile target against the profile too. Raises
    ReadoutFitError when no week states a belief; fewer than MIN_FIT_EPISODES weeks give a fit flagged
    `reliable: False` with a `warning`."""
    if target not in READOUT_TARGETS:
        raise ValueError(f"unknown readout_target {target!r}; allowed: {', '.join(READOUT_TARGETS)}")

    def table(weeks):
        rows, targets, conditions = [], [], []
        for record, observations in weeks:
            stated = stated_final_belief(record)
            if stated is None:
                continue
            rows.append(_features(observations, stated[0]))
            targets.append(stated[1] if target == "teacher" else np.concatenate([stated[1], _true_belief(record)]))
            conditions.append(record["condition"])
        width = len(ACTIONS) * len(SLOTS) * len(METERS)
        columns = len(BELIEF_DIMS) * (1 if target == "teacher" else 2)
        return (np.asarray(rows).reshape(len(rows), width), np.asarray(targets).reshape(len(targets), columns),
                conditions)

    x, both, conditions = table(fit_weeks)
    if not len(x):
        raise _no_stated_belief("evidence", len(fit_weeks))
    dims = len(BELIEF_DIMS)
    y = both[:, :dims] if target == "teacher" else both[:, dims:]  # the fit's target
    design = np.concatenate([x, np.ones((len(x), 1))], axis=1)
    penalty = RIDGE * len(design) * np.eye(design.shape[1])
    penalty[-1, -1] = 0.0  # the intercept is not shrunk
    coef = np.linalg.solve(design.T @ design + penalty, design.T @ y)
    shape = (len(ACTIONS), len(SLOTS), len(METERS), len(BELIEF_DIMS))
    readout = EvidenceReadout(coef[:-1].reshape(shape), coef[-1])
    constant = y.mean(axis=0)

    def quality(xs, ys, conds) -> dict:
        out = {}
        for condition in sorted(set(conds)):
            rows = np.array([c == condition for c in conds])
            predicted = np.clip(xs[rows] @ coef[:-1] + coef[-1], 0.0, 1.0)
            teacher = ys[rows][:, :dims]
            out[condition] = {"weeks": int(rows.sum()),
                              "mae_vs_teacher": round(float(np.abs(predicted - teacher).mean()), 4),
                              "constant_mae_vs_teacher": round(float(np.abs(constant - teacher).mean()), 4)}
            if target == "profile":
                profile = ys[rows][:, dims:]
                out[condition].update({"mae_vs_profile": round(float(np.abs(predicted - profile).mean()), 4),
                                       "constant_mae_vs_profile": round(float(np.abs(constant - profile).mean()), 4)})
        return out

    hx, hy, hconditions = table(held_out)
    described = {"teacher": "the teacher's last stated belief of each week", "profile": "each week's true profile"}
    fit = {"form": "linear", "target": described[target], "fit_weeks": int(len(x)),
           **_reliability(len(x)),
           "weeks_without_belief": len(fit_weeks) - len(x), "ridge": RIDGE,
           "in_sample": quality(x, both, conditions), "held_out": quality(hx, hy, hconditions) if len(hx) else {}}
    return EvidenceReadout(readout.weights, readout.intercept, fit)


# What an innovation increment is a linear function of, by (action, slot): the shown anomaly, it / t,
# (the previous belief - 0.5) / t, and a constant.
INNOVATION_TERMS = ("anomaly", "anomaly/t", "(belief-0.5)/t", "constant")
INNOVATION_RIDGE = 1e-2  # per (action, slot) pair, not scaled by its rows: a pair seen once or twice stays near 0


def _innovation_features(anomaly: np.ndarray, belief: np.ndarray, t: int) -> np.ndarray:
    return np.concatenate([anomaly, anomaly / t, (belief - 0.5) / t, [1.0]])


@dataclass(frozen=True)
class InnovationReadout:
    """start (3,), coefs (A, S, F, 3) over `INNOVATION_TERMS` (F = 2 M + 3 + 1), and the fit's figures."""

    start: np.ndarray
    coefs: np.ndarray
    fit: dict = field(default_factory=dict)
    form = "innovation"

    def increment(self, t: int, action: int, anomaly, belief) -> np.ndarray:
        """The increment (3,) the anomaly shown at step t after `action` carries from `belief`, on the grid."""
        coef = self.coefs[action, (t - 1) % len(SLOTS)]
        return np.round(_innovation_features(_shown(anomaly), np.asarray(belief, dtype=np.float64), t) @ coef,
                        DECIMALS) + 0.0

    def chain(self, observations: list) -> tuple[np.ndarray, np.ndarray]:
        """Increments and beliefs (T, 3), as `EvidenceReadout.chain`, from `start`."""
        return walk_chain(observations, self.start, self.increment)

    def to_dict(self) -> dict:  # full precision: the stored read-out rewrites the dataset's answers exactly
        return {"form": self.form, "start": self.start.tolist(), "coefs": self.coefs.tolist(), "fit": self.fit,
                "shape": "coefs[action][slot][term][belief_dim]", "terms": list(INNOVATION_TERMS)}

    @classmethod
    def from_dict(cls, data: dict) -> InnovationReadout:
        return cls(np.asarray(data["start"], dtype=np.float64), np.asarray(data["coefs"], dtype=np.float64),
                   dict(data.get("fit", {})))


def fit_innovation_readout(fit_weeks: list[tuple[dict, list[dict]]],
                           held_out: list[tuple[dict, list[dict]]] = ()) -> InnovationReadout:
    """Fit the innovation form on `fit_weeks` (as `fit_evidence_readout`): per (action, slot), ridge least
    squares of each step's change of the teacher's stated belief on the features of the shown anomaly,
    the previous stated belief and the step (a step whose belief or predecessor's is missing is left
    out); the start is the mean first belief (0.5 where no week states one). Its figures, as the linear
    fit's: the chain's final belief against the teacher's last stated one, per condition, beside a
    constant's."""
    width = 2 * len(METERS) + len(BELIEF_DIMS) + 1
    rows = [[[] for _ in SLOTS] for _ in ACTIONS]
    targets = [[[] for _ in SLOTS] for _ in ACTIONS]
    starts, finals = [], []
    for record, observations in fit_weeks:
        beliefs = [_stated_belief(step) for step in record["steps"]]
        if beliefs[0] is not None:
            starts.append(beliefs[0])
        for t in range(1, min(len(observations), len(beliefs))):
            if beliefs[t] is None or beliefs[t - 1] is None:
                continue
            action, anomaly = _evidence(observations[t], t)
            rows[action][(t - 1) % len(SLOTS)].append(_innovation_features(anomaly, beliefs[t - 1], t))
            targets[action][(t - 1) % len(SLOTS)].append(beliefs[t] - beliefs[t - 1])
        stated = [b for b in beliefs if b is not None]
        if stated:
            finals.append(stated[-1])  # the week's last stated belief, as stated_final_belief finds it
    if not finals:
        raise _no_stated_belief("innovation", len(fit_weeks))
    coefs = np.zeros((len(ACTIONS), len(SLOTS), width, len(BELIEF_DIMS)))
    steps = 0
    for a, s in np.ndindex(len(ACTIONS), len(SLOTS)):
        if rows[a][s]:
            x, y = np.asarray(rows[a][s]), np.asarray(targets[a][s])
            coefs[a, s] = np.linalg.solve(x.T @ x + INNOVATION_RIDGE * np.eye(width), x.T @ y)
            steps += len(x)
    readout = InnovationReadout(np.mean(starts, axis=0) if starts else np.full(len(BELIEF_DIMS), 0.5), coefs)
    constant = np.mean(finals, axis=0)

    def quality(weeks) -> dict:
        errors: dict[str, tuple[list, list]] = {}
        for record, observations in weeks:
            stated = stated_final_belief(record)
            if stated is None:
                continue
            chained = readout.chain(observations[: stated[0] + 1])[1][-1]
            own, const = errors.setdefault(record["condition"], ([], []))
            own.append(np.abs(chained - stated[1]).mean())
            const.append(np.abs(constant - stated[1]).mean())
        return {c: {"weeks": len(own), "mae_vs_teacher": round(float(np.mean(own)), 4),
                    "constant_mae_vs_teacher": round(float(np.mean(const)), 4)}
                for c, (own, const) in sorted(errors.items())}

    fit = {"form": "innovation", "target": "each step's change of the teacher's stated belief",
           "fit_weeks": len(finals), "fit_steps": steps, **_reliability(len(finals)),
           "weeks_without_belief": len(fit_weeks) - len(finals), "ridge": INNOVATION_RIDGE,
           "terms": list(INNOVATION_TERMS), "in_sample": quality(fit_weeks),
           "held_out": quality(held_out) if held_out else {}}
    return InnovationReadout(readout.start, readout.coefs, fit)


def fit_readout(form: str, fit_weeks, held_out=(), target: str = "teacher") -> EvidenceReadout | InnovationReadout:
    """The read-out of `form` (READOUT_FORMS) fitted on the weeks, to `target` (READOUT_TARGETS; the
    innovation form follows the teacher's own belief changes, so it takes the teacher's target only)."""
    if form not in READOUT_FORMS:
        raise ValueError(f"unknown readout_form {form!r}; allowed: {', '.join(READOUT_FORMS)}")
    if form == "innovation":
        if target != "teacher":
            raise ValueError(f"readout_target {target!r} needs readout_form 'linear': the innovation chain is fitted "
                             "on the teacher's own belief changes")
        return fit_innovation_readout(fit_weeks, held_out)
    return fit_evidence_readout(fit_weeks, held_out, target)


def readout_from_dict(data: dict) -> EvidenceReadout | InnovationReadout:
    """A stored read-out (`to_dict`) of either form; one written before forms were recorded is linear."""
    return (InnovationReadout if data.get("form") == "innovation" else EvidenceReadout).from_dict(data)
