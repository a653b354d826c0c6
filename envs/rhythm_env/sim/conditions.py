"""The three evaluation conditions, their disjoint seed ranges, the seeds reserved for evaluation and
for tuning, and the seed-range parser."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Condition:
    name: str
    first_seed: int
    last_seed: int  # inclusive
    description: str

    def contains(self, seed: int) -> bool:
        return self.first_seed <= seed <= self.last_seed


CONDITIONS: dict[str, Condition] = {
    "continuous": Condition("continuous", 0, 9_999, "in-distribution profiles (correlated factors)"),
    "ood": Condition("ood", 10_000, 19_999, "shifted profiles: more extreme, less correlated factors"),
    "discrete3": Condition("discrete3", 20_000, 29_999, "legacy fixed profiles: introvert, extrovert, workaholic"),
}

# Seeds reserved for evaluation. Training data (teacher rollouts) must come from TRAINING_SEEDS only,
# outside TUNING_SEEDS.
EVAL_SEEDS: dict[str, range] = {
    "continuous": range(0, 1_000),
    "ood": range(10_000, 20_000),
    "discrete3": range(20_000, 30_000),
}
TRAINING_SEEDS: dict[str, range] = {"continuous": range(1_000, 10_000)}
# Training seeds reserved as a tuning set: benchmarks compare recipes on these held-out weeks, so no
# training data comes from them (teacher rollouts, SFT datasets, the Gymnasium env's drawn episodes).
TUNING_SEEDS: dict[str, range] = {"continuous": range(9_500, 9_700)}


def check_training_seeds(condition: str, seeds) -> None:
    """Every seed must be a training seed of `condition`: never an evaluation seed, nor a tuning seed."""
    seeds = list(seeds)
    allowed = TRAINING_SEEDS.get(condition)
    if allowed is None:
        raise ValueError(f"condition {condition!r} is evaluation-only; teacher training data comes from: "
                         + ", ".join(f"{c} {r.start}-{r.stop - 1}" for c, r in TRAINING_SEEDS.items()))
    outside = [s for s in seeds if s not in allowed]
    if outside:
        raise ValueError(f"seed {outside[0]} is not a training seed ({len(outside)} such); {condition} training "
                         f"seeds are {allowed.start}-{allowed.stop - 1} (the rest are reserved for evaluation)")
    tuning = TUNING_SEEDS.get(condition, range(0))
    reserved = [s for s in seeds if s in tuning]
    if reserved:
        raise ValueError(f"seed {reserved[0]} is a tuning seed ({len(reserved)} such); {condition} seeds "
                         f"{tuning.start}-{tuning.stop - 1} are reserved for tuning and never become training data")


def get_condition(name: str) -> Condition:
    try:
        return CONDITIONS[name]
    except KeyError:
        raise ValueError(f"unknown condition {name!r}; allowed: {', '.join(CONDITIONS)}") from None


def _describe_ranges() -> str:
    return ", ".join(f"{c.name} {c.first_seed}-{c.last_seed}" for c in CONDITIONS.values())


def check_seed(condition: str, seed: int) -> int:
    """Return the seed as int, or raise a ValueError naming the value and the allowed range."""
    cond = get_condition(condition)
    if isinstance(seed, bool) or int(seed) != seed:
        raise ValueError(f"seed {seed!r} is not an integer")
    seed = int(seed)
    if not cond.contains(seed):
        raise ValueError(
            f"seed {seed} is outside the {cond.name} range {cond.first_seed}-{cond.last_seed} "
            f"(seed ranges: {_describe_ranges()})"
        )
    return seed


def parse_seeds(spec: str) -> list[int]:
    """Parse "0-199", "5", "1,2,10-12" into a sorted list of unique seeds."""
    seeds: set[int] = set()
    for part in str(spec).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part[1:]:
                lo_s, hi_s = part.split("-", 1) if not part.startswith("-") else (part, "")
                lo, hi = int(lo_s), int(hi_s)
                if hi < lo:
                    raise ValueError
                seeds.update(range(lo, hi + 1))
            else:
                seeds.add(int(part))
        except ValueError:
            raise ValueError(f"bad seed range {part!r}; expected forms like 0-199, 7 or 1,2,10-12") from None
    if not seeds:
        raise ValueError(f"seed spec {spec!r} names no seeds")
    return sorted(seeds)


def check_eval_seeds(condition: str, seeds) -> list[int]:
    """Every seed must be an evaluation seed of `condition`; returns them as ints."""
    allowed = EVAL_SEEDS[get_condition(condition).name]
    seeds = [check_seed(condition, seed) for seed in seeds]
    for seed in seeds:
        if seed not in allowed:
            raise ValueError(f"seed {seed} is not an evaluation seed of {condition} "
                             f"({allowed.start}-{allowed.stop - 1}); training data may use it")
    return seeds


def check_purpose_seeds(condition: str, seeds, purpose: str) -> list[int]:
    """The seeds of weeks played for `purpose`: "training" (`check_training_seeds`) or "evaluation"
    (`check_eval_seeds`); returns them as ints."""
    if purpose == "evaluation":
        return check_eval_seeds(condition, seeds)
    if purpose != "training":
        raise ValueError(f"unknown purpose {purpose!r}; allowed: training, evaluation")
    seeds = [check_seed(condition, seed) for seed in seeds] if condition in TRAINING_SEEDS else list(seeds)
    check_training_seeds(condition, seeds)
    return seeds


def eval_seed_list(condition: str, spec: str) -> list[int]:
    """Parse a seed spec and insist every seed is an evaluation seed of `condition`."""
    return check_eval_seeds(condition, parse_seeds(spec))
