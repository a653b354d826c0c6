"""What the env hands out: one episode's `Observation`, N lockstep episodes' `BatchObservation`
(with `arrays()`, its Gymnasium dict form), `EnvState` (a restorable, JSON-serializable snapshot)
and `render_ansi` (a text view of one observation). The hidden profile is never part of an
observation."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import orjson

from .spec import ACTIONS, DAYS, METERS, SLOTS, STEPS_PER_EPISODE


def _day(step: int) -> int:  # 1..7
    return min(step // len(SLOTS), DAYS - 1) + 1


@dataclass(frozen=True)
class Observation:
    """What the agent sees at one step. The hidden profile is never part of it."""

    step: int  # 0..27, steps already taken
    meters: np.ndarray  # (5,) in [0, 1], order of spec.METERS
    last_action: str | None
    last_delta: np.ndarray | None  # (5,) actual change caused by the last step
    anomaly: np.ndarray | None  # (5,) last_delta minus the neutral profile's change

    @property
    def day(self) -> int:  # 1..7
        return _day(self.step)

    @property
    def slot(self) -> str:
        return SLOTS[self.step % len(SLOTS)]

    def to_dict(self) -> dict:
        def named(values):
            return None if values is None else {m: round(float(v), 4) for m, v in zip(METERS, values)}

        return {
            "step": self.step,
            "day": self.day,
            "slot": self.slot,
            "meters": named(self.meters),
            "last_action": self.last_action,
            "last_delta": named(self.last_delta),
            "anomaly": named(self.anomaly),
        }


@dataclass
class BatchObservation:
    """Observations of N lockstep episodes; `.item(n)` gives the scalar `Observation` of episode n."""

    step: int
    meters: np.ndarray  # (N, 5)
    last_action: np.ndarray  # (N,) int, -1 before the first step
    last_delta: np.ndarray  # (N, 5), zeros before the first step
    anomaly: np.ndarray  # (N, 5)

    @property
    def slot(self) -> int:
        return self.step % len(SLOTS)

    def __len__(self) -> int:
        return self.meters.shape[0]

    def arrays(self) -> dict[str, np.ndarray]:
        """The Gymnasium form (obs_type="dict"): fresh (N, ...) arrays that lie in the vector env's
        `observation_space`; `arrays()[k][n]` is episode n's value of `RhythmEnv.observation_space[k]`."""
        n = len(self)
        return {
            "step": np.full(n, self.step, dtype=np.int64),
            "day": np.full(n, _day(self.step), dtype=np.int64),
            "slot": np.full(n, self.slot, dtype=np.int64),
            "meters": self.meters.copy(),
            "last_action": self.last_action.astype(np.int64),  # astype copies
            "last_delta": self.last_delta.copy(),
            "anomaly": self.anomaly.copy(),
        }

    def item(self, n: int) -> Observation:
        started = self.step > 0
        return Observation(
            step=self.step,
            meters=self.meters[n].copy(),
            last_action=ACTIONS[self.last_action[n]] if started else None,
            last_delta=self.last_delta[n].copy() if started else None,
            anomaly=self.anomaly[n].copy() if started else None,
        )


@dataclass
class EnvState:
    """A restorable snapshot of a vector env (or of a scalar env: N = 1). Serializable to a dict."""

    condition: str
    seeds: np.ndarray
    step: int
    meters: np.ndarray
    last_action: np.ndarray
    last_delta: np.ndarray
    anomaly: np.ndarray
    meters_history: np.ndarray  # (N, step + 1, 5)
    action_history: np.ndarray  # (N, step)

    def to_dict(self) -> dict:
        return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in self.__dict__.items()}

    def to_json(self) -> str:
        """Compact JSON with exact floats (the shortest text that reads back as the same float), keys
        sorted, for dataset columns. orjson writes the arrays directly: a dataset of 2,000 weeks holds
        56,000 of these, and the json module would take many times as long."""
        arrays = {}
        for name, value in self.__dict__.items():
            if isinstance(value, np.ndarray):
                if value.dtype.kind == "f" and not np.isfinite(value).all():
                    raise ValueError(f"EnvState.{name} holds NaN or infinity; JSON has no such number")
                value = np.ascontiguousarray(value)
            arrays[name] = value
        return orjson.dumps(arrays, option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY).decode()

    @classmethod
    def from_json(cls, text: str) -> EnvState:
        return cls.from_dict(json.loads(text))

    def observation(self, i: int = 0) -> Observation:
        """What episode i's agent saw at this snapshot (the hidden profile is not part of it)."""
        return BatchObservation(self.step, self.meters, self.last_action, self.last_delta, self.anomaly).item(i)

    def episode(self, i: int) -> EnvState:
        """Episode i of a batch snapshot, as a one-episode snapshot."""
        arrays = {name: getattr(self, name)[i : i + 1] for name in self.__dataclass_fields__
                  if name not in ("condition", "step")}
        return EnvState(condition=self.condition, step=self.step, **arrays)

    @classmethod
    def from_dict(cls, data: dict) -> EnvState:
        arrays = {"seeds": np.int64, "last_action": np.int64, "action_history": np.int64}
        kwargs = {}
        for name in cls.__dataclass_fields__:
            value = data[name]
            if name in ("condition", "step"):
                kwargs[name] = value
            else:
                kwargs[name] = np.asarray(value, dtype=arrays.get(name, np.float64))
        kwargs["action_history"] = kwargs["action_history"].reshape(len(kwargs["seeds"]), int(data["step"]))
        return cls(**kwargs)


def render_ansi(obs: Observation, condition: str = "", seed: int | None = None) -> str:
    """A text view of one episode's observation: where in the week it is, then the five meters."""
    when = f"day {obs.day}, {obs.slot}" if obs.step < STEPS_PER_EPISODE else f"day {DAYS}, the week is over"
    who = " ".join(part for part in (condition, "" if seed is None else f"seed {seed}") if part)
    lines = [f"{who}{': ' if who else ''}{when} (step {obs.step}/{STEPS_PER_EPISODE}); "
             f"last action {obs.last_action or '-'}"]
    for j, name in enumerate(METERS):
        value = float(obs.meters[j])
        filled = round(20 * value)
        change = "" if obs.last_delta is None else f" {obs.last_delta[j]:+.3f}"
        lines.append(f"  {name:<10} {value:.3f} [{'#' * filled}{'.' * (20 - filled)}]{change}")
    return "\n".join(lines) + "\n"
