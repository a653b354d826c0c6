"""What a Hugging Face job may cost before it runs, and what it was billed after."""

import datetime
from types import SimpleNamespace

import pytest

from rhythm_core.compute.costs import (
    FLAVOR_USD_PER_HOUR,
    CostRefused,
    billed,
    cost_figures,
    default_timeout_s,
    flavor_price,
    job_budget,
    parse_timeout,
    total_cost,
)


def test_timeouts_parse_and_follow_the_stage_size():
    assert [parse_timeout(v) for v in ("90", "90s", "30m", "2h", "1d", 45)] == [90, 90, 1800, 7200, 86400, 45]
    for bad in ("soon", "-1h", "0"):
        with pytest.raises(ValueError, match="job timeout"):
            parse_timeout(bad)
    small, large = default_timeout_s("sft", {"max_steps": 10}), default_timeout_s("sft", {"max_steps": 2000})
    assert small < large and small % 300 == 0 and large % 300 == 0
    assert default_timeout_s("sft", {"max_steps": 240, "short_context_steps": 600}) > default_timeout_s(
        "sft", {"max_steps": 240})
    play = {"condition": "continuous", "seeds": "0-99", "players": {"student_sft": "a", "student_grpo": "b"}}
    assert default_timeout_s("play", play) > default_timeout_s("play", {**play, "seeds": "0-9"})


def test_the_cap_is_the_price_times_the_timeout_and_refuses_above_max_usd():
    budget = job_budget("a10g-large", 7200, max_usd=None)
    assert budget.max_cost_usd == pytest.approx(3.0) and budget.usd_per_hour == FLAVOR_USD_PER_HOUR["a10g-large"]
    assert "a10g-large at $1.50/h" in budget.describe() and "at most $3.00" in budget.describe()
    with pytest.raises(CostRefused, match=r"may cost up to \$3.00 .* above max_usd \$2.00"):
        job_budget("a10g-large", 7200, max_usd=2.0)
    with pytest.raises(ValueError, match="unknown Hugging Face Jobs flavor 'a10g-huge'"):
        job_budget("a10g-huge", 60, max_usd=None)


def test_the_hubs_own_price_list_wins_and_a_failing_one_falls_back_to_the_table():
    class Api:
        def list_jobs_hardware(self, token=None):
            return [SimpleNamespace(name="a10g-large", unit_cost_usd=0.03, unit_label="minute")]

    assert flavor_price("a10g-large", Api()) == (pytest.approx(1.8), "HfApi.list_jobs_hardware")

    class Down:
        def list_jobs_hardware(self, token=None):
            raise ConnectionError("no route")

    price, source = flavor_price("a10g-large", Down())
    assert price == 1.5 and "jobs-pricing" in source


def test_billing_is_by_the_started_minute_of_running_time():
    info = SimpleNamespace(durations=SimpleNamespace(running_secs=61))
    assert billed(info, 1.5) == {"running_s": 61.0, "billed_minutes": 2, "cost_usd": 0.05}
    start = datetime.datetime(2026, 11, 26, 8, 0, tzinfo=datetime.UTC)
    info = SimpleNamespace(durations=None, started_at=start, finished_at=start + datetime.timedelta(minutes=30))
    assert billed(info, 2.5)["cost_usd"] == pytest.approx(1.25)


def test_several_jobs_costs_add_up_and_a_job_without_one_counts_zero():
    jobs = [{"cost": {"max_cost_usd": 0.875, "billed_minutes": 3, "cost_usd": 0.075}},
            {"cost": {"max_cost_usd": 0.75, "billed_minutes": 2, "cost_usd": 0.05}}, {"job_id": "x"}]
    assert total_cost(jobs) == {"max_cost_usd": 1.625, "billed_minutes": 5, "cost_usd": 0.125}
    # one set of names for the asset metadata and the MLflow metrics; nothing without a cost
    assert cost_figures({"cost": total_cost(jobs)}) == {"hf_job_max_cost_usd": 1.625, "hf_job_billed_minutes": 5,
                                                        "hf_job_cost_usd": 0.125}
    assert cost_figures({"job_id": "x"}) == {} and cost_figures(None) == {}


def test_every_priced_flavor_has_its_gpu_count_and_a_multi_gpu_flavor_is_priced_whole():
    from rhythm_core.compute.costs import flavor_gpus

    assert all(flavor_gpus(f) >= 0 for f in FLAVOR_USD_PER_HOUR)  # every priced flavor has its count
    assert [flavor_gpus(f) for f in ("cpu-basic", "a10g-small", "a10g-largex2", "l4x4", "a100x8", "h200x2", "l4x1", "a100-large", "h200")] == [0, 1, 2, 4, 8, 2, 1, 1, 1]
    assert job_budget("a10g-largex2", 3600, max_usd=None).max_cost_usd == pytest.approx(3.0)  # both GPUs' hour
    with pytest.raises(ValueError, match="flavor 'a10g-huge': its GPU count is unknown"):
        flavor_gpus("a10g-huge")

    class Api:  # the Hub's list wins: a flavor the table does not know
        def list_jobs_hardware(self, token=None):
            return [SimpleNamespace(name="rtx-pro-6000x4", accelerator=SimpleNamespace(quantity="4"))]

    assert flavor_gpus("rtx-pro-6000x4", Api()) == 4
