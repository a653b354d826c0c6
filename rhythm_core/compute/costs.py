"""What a Hugging Face job may cost before it is submitted, and what it cost after.

Jobs bill per minute while Starting or Running, at the flavor's price; a job stops at its timeout.
So the most a job can cost is the price per hour × the timeout. Before submitting, `job_budget` gives
that cap and refuses a job above `max_usd`; after the job, `billed` turns its running seconds into
billed minutes and dollars. A stage's timeout follows from its size (`default_timeout_s`), not a
fixed two hours, so a small job cannot run (and bill) for hours.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..errors import UserError

# USD per hour of each Hugging Face Jobs flavor: the Hub's "Jobs: Pricing and Billing" page
# (huggingface.co/docs/hub/jobs-pricing) and `hf jobs hardware`, read 2026-11-26. The Hub's own
# price list (HfApi.list_jobs_hardware) wins whenever the endpoint answers it.
FLAVOR_USD_PER_HOUR = {
    "cpu-basic": 0.01, "cpu-upgrade": 0.03,
    "t4-small": 0.40, "t4-medium": 0.60,
    "l4x1": 0.80, "l4x4": 3.80,
    "l40sx1": 1.80, "l40sx4": 8.30, "l40sx8": 23.50,
    "a10g-small": 1.00, "a10g-large": 1.50, "a10g-largex2": 3.00, "a10g-largex4": 5.00,
    "a100-large": 2.50, "a100x4": 10.00, "a100x8": 20.00,
    "h200": 5.00, "h200x2": 10.00, "h200x4": 20.00, "h200x8": 40.00,
}
PRICE_SOURCE = "huggingface.co/docs/hub/jobs-pricing (read 2026-11-26)"
# A flavor's GPUs are in its name, as the Hub names them: cpu-* none, <gpu>x<N> N, any other one
# (`hf jobs hardware` lists them as the accelerator's quantity). A training job runs one process per GPU.
_GPU_COUNT = re.compile(r"x(\d+)$")

# A stage's timeout: a fixed allowance for the job to start, install the wheel and load the model,
# plus a generous time per unit of work (an SFT or GRPO step, a week played by one student), times a
# safety factor. These per-unit times are caps for a 3B model with LoRA on an A10G, set with room to
# spare rather than taken from a run on one: a job that needs longer says it hit its timeout, and
# ComputeResource.hf_timeout overrides the rule.
SETUP_S = 20 * 60
SECONDS_PER_UNIT = {"sft": 6.0, "grpo": 60.0, "play": 2.0}
SAFETY = 2.0


class CostRefused(UserError, ValueError):
    """A job whose cost cap is above the configured maximum; it is not submitted."""


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def parse_timeout(value) -> int:
    """Seconds from a job timeout: a number of seconds, or "90s", "30m", "2h", "1d"."""
    match = _DURATION.match(str(value))
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"job timeout {value!r}: expected seconds or a duration like 30m, 2h, 1d")
    return int(math.ceil(float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]))


def stage_units(stage: str, config: dict) -> int:
    """The units of work a stage does: SFT and GRPO steps, or weeks × students played."""
    if stage == "sft":
        return int(config.get("max_steps", 0)) + int(config.get("short_context_steps") or 0)
    if stage == "grpo":
        return int(config.get("max_steps", 0))
    if stage == "play":
        from rhythm_env.sim.conditions import eval_seed_list

        return len(eval_seed_list(config["condition"], config["seeds"])) * max(1, len(config.get("players", {})))
    raise ValueError(f"unknown stage {stage!r}")


def default_timeout_s(stage: str, config: dict) -> int:
    """The timeout a stage's job gets unless one is configured, rounded up to 5 minutes."""
    seconds = SETUP_S + SAFETY * SECONDS_PER_UNIT[stage] * stage_units(stage, config)
    return int(math.ceil(seconds / 300) * 300)


def _hub_hardware(flavor: str, api, token: str | None):
    """The Hub's own entry for `flavor` (HfApi.list_jobs_hardware), or None (no `api`, no answer, not listed)."""
    if api is None:
        return None
    try:
        return next((hardware for hardware in api.list_jobs_hardware(token=token) if hardware.name == flavor), None)
    except Exception:  # noqa: BLE001 - an endpoint without the hardware list: the tables here
        return None


def flavor_price(flavor: str, api=None, token: str | None = None) -> tuple[float, str]:
    """(USD per hour, where that price came from): the Hub's own list when `api` answers, else the table."""
    hardware = _hub_hardware(flavor, api, token)
    if hardware is not None and hardware.unit_cost_usd is not None:
        per_unit = float(hardware.unit_cost_usd)
        per_hour = per_unit * {"minute": 60, "hour": 1, "second": 3600}.get(hardware.unit_label, 60)
        return round(per_hour, 6), "HfApi.list_jobs_hardware"
    if flavor not in FLAVOR_USD_PER_HOUR:
        raise ValueError(f"unknown Hugging Face Jobs flavor {flavor!r}; known: {', '.join(FLAVOR_USD_PER_HOUR)}")
    return FLAVOR_USD_PER_HOUR[flavor], PRICE_SOURCE


def flavor_gpus(flavor: str, api=None, token: str | None = None) -> int:
    """How many GPUs `flavor` has (0 for a CPU flavor): the Hub's own list when `api` answers, else its name
    (a priced flavor)."""
    hardware = _hub_hardware(flavor, api, token)
    accelerator = getattr(hardware, "accelerator", None)
    if hardware is not None:
        quantity = str(getattr(accelerator, "quantity", 0) or 0)
        if quantity.isdigit():
            return int(quantity)
    if flavor not in FLAVOR_USD_PER_HOUR:
        raise ValueError(f"Hugging Face Jobs flavor {flavor!r}: its GPU count is unknown; known: {', '.join(FLAVOR_USD_PER_HOUR)}")
    count = _GPU_COUNT.search(flavor)
    return 0 if flavor.startswith("cpu-") else int(count.group(1)) if count else 1


@dataclass
class JobBudget:
    flavor: str
    usd_per_hour: float
    price_source: str
    timeout_s: int
    max_cost_usd: float  # the price per hour × the timeout: what the job can cost at most

    def describe(self) -> str:
        return (f"{self.flavor} at ${self.usd_per_hour:.2f}/h ({self.price_source}) × timeout "
                f"{self.timeout_s / 3600:.2f} h = at most ${self.max_cost_usd:.2f}")

    def as_dict(self) -> dict:
        return {"flavor": self.flavor, "usd_per_hour": self.usd_per_hour, "price_source": self.price_source,
                "timeout_s": self.timeout_s, "max_cost_usd": self.max_cost_usd}


def job_budget(flavor: str, timeout_s: int, *, max_usd: float | None, api=None, token: str | None = None) -> JobBudget:
    """The job's cost cap; raises CostRefused when it is above `max_usd` (None: no limit)."""
    price, source = flavor_price(flavor, api, token)
    budget = JobBudget(flavor, price, source, int(timeout_s), round(price * timeout_s / 3600, 4))
    if max_usd is not None and budget.max_cost_usd > max_usd:
        raise CostRefused(f"the job may cost up to ${budget.max_cost_usd:.2f} ({budget.describe()}), above "
                          f"max_usd ${max_usd:.2f}: raise max_usd, pick a cheaper flavor or a shorter timeout")
    return budget


def billed(info, usd_per_hour: float) -> dict:
    """Billed minutes and dollars of a finished job (JobInfo): its running seconds, by the minute."""
    durations = getattr(info, "durations", None)
    running = getattr(durations, "running_secs", None)
    if running is None:
        started, finished = getattr(info, "started_at", None), getattr(info, "finished_at", None)
        running = (finished - started).total_seconds() if started and finished else 0
    minutes = int(math.ceil(max(0.0, float(running)) / 60))
    return {"running_s": float(running), "billed_minutes": minutes, "cost_usd": round(minutes * usd_per_hour / 60, 4)}


COST_FIGURES = ("max_cost_usd", "billed_minutes", "cost_usd")


def cost_figures(job: dict | None) -> dict:
    """A job record's cost cap, billed minutes and dollars as `hf_job_<figure>` (the names the asset
    metadata and the MLflow metrics share); empty without a cost."""
    cost = (job or {}).get("cost") or {}
    return {f"hf_job_{k}": cost[k] for k in COST_FIGURES if k in cost}


def total_cost(jobs) -> dict:
    """Several jobs' cost caps, billed minutes and dollars, summed (jobs without a cost count 0)."""
    costs = [(job or {}).get("cost") or {} for job in jobs]
    return {k: round(sum(c.get(k, 0) for c in costs), 4) for k in COST_FIGURES}
