"""The lineage in the tests' own processes, cut as a run must cut it: one run per teacher shard, one for the
unpartitioned assets between, one for the evaluation window (with what follows it): what `make demo`'s backfill
and `rhythm_pipeline.ops lineage` run, through `dg.materialize` on the assets a test gives."""

from __future__ import annotations

import dagster as dg

from tests.conftest import add_shards


class LineageResult:
    """The runs of one lineage read as one result (success, outputs, events, materializations, checks)."""

    def __init__(self, results: list):
        self.results = results

    @property
    def success(self) -> bool:
        return all(r.success for r in self.results)

    @property
    def run_id(self) -> str:
        """The last run's: the one that made the lineage's last assets."""
        return self.results[-1].run_id

    @property
    def run_ids(self) -> list[str]:
        return [r.run_id for r in self.results]

    @property
    def all_events(self) -> list:
        return [e for r in self.results for e in r.all_events]

    def output_for_node(self, name: str):
        for result in reversed(self.results):
            if any(e.step_key and e.step_key.split(".")[0] == name and e.is_successful_output for e in result.all_events):
                return result.output_for_node(name)
        raise KeyError(f"no run of this lineage output {name}")

    def asset_materializations_for_node(self, name: str) -> list:
        return [m for r in self.results for m in r.asset_materializations_for_node(name)]

    def get_asset_materialization_events(self) -> list:
        return [e for r in self.results for e in r.get_asset_materialization_events()]

    def get_asset_check_evaluations(self) -> list:
        return [e for r in self.results for e in r.get_asset_check_evaluations()]


def materialize_lineage(assets: list, instance, *, shards=("1000-1015",), window: str = "0", run_config=None,
                        resources=None, raise_on_error: bool = True) -> LineageResult:
    """`assets` (definitions and checks) materialized as the lineage's runs: each of `shards` (added to the
    instance first), the unpartitioned assets upstream of the evaluation, then `window` and what follows it.
    Stops at the first run that fails."""
    keys = {key: a.partitions_def for a in assets if isinstance(a, dg.AssetsDefinition) for key in a.keys}
    children: dict = {}
    for asset in assets:
        if isinstance(asset, dg.AssetsDefinition):
            for key in asset.keys:
                for parent in asset.asset_deps[key]:
                    children.setdefault(parent, set()).add(key)
    shard_keys = [k for k, p in keys.items() if isinstance(p, dg.DynamicPartitionsDefinition)]
    window_keys = [k for k, p in keys.items() if isinstance(p, dg.StaticPartitionsDefinition)]
    after_window, frontier = set(), set(window_keys)
    while frontier:
        frontier = {c for k in frontier for c in children.get(k, ())} - after_window
        after_window |= frontier
    after_window -= set(window_keys)
    between = [k for k, p in keys.items() if p is None and k not in after_window]
    pieces = [(shard_keys, shard) for shard in shards] if shard_keys else []
    pieces += [(between, None)] if between else []
    pieces += [(window_keys + sorted(after_window & set(keys), key=lambda k: k.to_user_string()), window)] \
        if window_keys else []
    if shard_keys:
        add_shards(instance, *shards)
    results = []
    for selection, partition in pieces:
        names = {k.to_user_string() for k in selection}
        config = {**(run_config or {}), "ops": {op: value for op, value in ((run_config or {}).get("ops") or {}).items()
                                                 if op in names}}
        result = dg.materialize(assets, instance=instance, selection=selection, partition_key=partition,
                                run_config=config, resources=resources, raise_on_error=raise_on_error)
        results.append(result)
        if not result.success:
            break
    return LineageResult(results)


def execute_lineage_cli(env: dict, *, shards=("1000-1015",), window: str = "0", run_config: dict | None = None,
                        execution: dict | None = None, cwd=None, timeout: int = 1800) -> None:
    """The lineage through the CLI a user types, each piece a run of `dagster job execute` (the multiprocess
    executor: a process per step) on the instance `env` names: `rhythm shards add`, then each teacher shard,
    the training half and the evaluation window. `run_config`'s ops go to the run of their asset's piece."""
    import json
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    bin_dir = Path(sys.executable).parent
    ops = (run_config or {}).get("ops") or {}
    extra = {"execution": execution} if execution else {}

    def run(command: list[str]) -> None:
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-4000:]

    for shard in shards:
        run([str(bin_dir / "rhythm"), "shards", "add", shard])
    pieces = [("teacher_data", shard, ("teacher_trajectories",)) for shard in shards]
    pieces += [("training", None, ("reeval_report", "sft_dataset", "sft_checkpoint", "grpo_checkpoint")),
               ("reevaluate", window, ("eval_rollouts", "eval_results", "registered_student"))]
    for job, partition, assets in pieces:
        config = {**extra, "ops": {k: v for k, v in ops.items() if k in assets}}
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as file:  # YAML holds JSON
            file.write(json.dumps(config))
        command = [str(bin_dir / "dagster"), "job", "execute", "-m", "rhythm_pipeline.definitions", "-j", job,
                   "-c", file.name]
        if partition is not None:
            command += ["--tags", json.dumps({"dagster/partition": partition})]
        run(command)
