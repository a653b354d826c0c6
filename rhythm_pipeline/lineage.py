"""Lineage: what every materialization records about what produced it, and `rhythm lineage ASSET`,
which reads the Dagster instance and prints the chain from teacher data to scores."""

import base64
import json
import warnings
from pathlib import Path

import dagster as dg

from rhythm_env.sim.spec import ENV_VERSION

# `rhythm lineage`'s line in `rhythm --help` (read from this source without importing Dagster).
DESCRIPTION = "print the chain from teacher data to an asset (reads $DAGSTER_HOME)"

# Metadata keys worth showing when walking the chain, in this order.
_SHOWN = ("teacher", "teacher_backend", "teacher_model", "condition", "seeds", "episodes", "grader",
          "reward_grader", "base_model", "steps", "final_train_loss", "eval_loss", "valid_answer_rate_after",
          "final_reward", "filter", "examples_train", "hub_repo_id", "hub_revision", "hf_job_id", "mlflow_run_id",
          "decision", "model_version", "artifact_path")


def lineage_metadata(context: dg.AssetExecutionContext | dg.OpExecutionContext, upstream: dict[str, dict] | None = None,
                     config: dg.Config | dict | None = None, *, code_version: str | None = None) -> dict:
    """Provenance every asset reports: its code version, the env version, the data versions of the
    upstream artifacts it read, and the config it ran with. An op inside a graph asset passes the
    asset's `code_version` (and its config as a dict) itself."""
    if code_version is None:
        code_version = context.assets_def.code_versions_by_key.get(context.asset_key) or ""
    meta = {
        "code_version": code_version,
        "env_version": ENV_VERSION,
        "upstream_data_versions": dg.MetadataValue.json({k: v["version"] for k, v in (upstream or {}).items()}),
    }
    if config is not None:
        meta["config"] = dg.MetadataValue.json(config if isinstance(config, dict) else config.model_dump())
    return meta


JSON_DECIMALS = 4


def round_floats(value, decimals: int = JSON_DECIMALS):
    """`value` with every float inside it (dicts, lists) rounded to `decimals` places."""
    if isinstance(value, float):
        return round(value, decimals)
    if isinstance(value, dict):
        return {k: round_floats(v, decimals) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [round_floats(v, decimals) for v in value]
    return value


def tidy_metadata(metadata: dict) -> dict:
    """Metadata as the UI should show it: floats inside JSON values rounded to 4 decimals (full
    precision stays in the artifacts); everything else as it is."""
    return {key: dg.MetadataValue.json(round_floats(entry.data)) if isinstance(entry, dg.JsonMetadataValue) else entry
            for key, entry in metadata.items()}


def versioned_output(value: dict, metadata: dict, version: str | None = None) -> dg.Output:
    """The asset's output with its content-hash DataVersion (`value["version"]` by default), its
    metadata tidied (`tidy_metadata`) and the digest of its files' record (`files_digest`).

    Output(data_version=...) is a beta parameter we rely on on purpose; Dagster runs ops inside its
    own warning filters, so a module-level filter cannot silence the BetaWarning: do it here.
    """
    if value.get("files_digest"):  # what the files_unchanged check and every reader verify against
        metadata = {**metadata, "files_digest": value["files_digest"]}
    if value.get("adopted"):  # the version was published before with other files: that one was kept
        metadata = {**metadata, "kept_published": True, "adopted": value["adopted"]}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=dg.BetaWarning)
        return dg.Output(value, data_version=dg.DataVersion(version or value["version"]), metadata=tidy_metadata(metadata))


def png_metadata(path: str, alt: str) -> dg.MetadataValue:
    """A PNG file inlined as markdown, so the UI shows the plot in the materialization's metadata."""
    return dg.MetadataValue.md(f"![{alt}](data:image/png;base64,{base64.b64encode(Path(path).read_bytes()).decode()})")


def _value(entry) -> object:
    value = getattr(entry, "value", entry)
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return value


def lineage_chain(asset: str, instance: dg.DagsterInstance, defs: dg.Definitions) -> list[dict]:
    """The latest materialization of `asset` and of everything upstream of it, upstream first."""
    graph = defs.resolve_asset_graph()
    key = dg.AssetKey(asset)
    if key not in graph.get_all_asset_keys():
        raise ValueError(f"unknown asset {asset!r}; assets: {', '.join(sorted(k.to_user_string() for k in graph.get_all_asset_keys()))}")
    order, seen = [], set()

    def visit(k):
        if k in seen:
            return
        seen.add(k)
        for parent in sorted(graph.get(k).parent_keys, key=lambda p: p.to_user_string()):
            visit(parent)
        order.append(k)

    visit(key)
    chain = []
    for k in order:
        event = instance.get_latest_materialization_event(k)
        if event is None:
            chain.append({"asset": k.to_user_string(), "materialized": False})
            continue
        materialization = event.asset_materialization
        meta = materialization.metadata
        chain.append({
            "asset": k.to_user_string(), "materialized": True, "run_id": event.run_id,
            "timestamp": event.timestamp, "data_version": materialization.tags.get("dagster/data_version"),
            "code_version": _value(meta["code_version"]) if "code_version" in meta else None,
            "upstream_data_versions": json.loads(_value(meta["upstream_data_versions"]))
            if "upstream_data_versions" in meta else {},
            "details": {name: _value(meta[name]) for name in _SHOWN if name in meta},
        })
    return chain


def format_chain(chain: list[dict]) -> str:
    import datetime

    lines = []
    for link in chain:
        if not link["materialized"]:
            lines.append(f"{link['asset']}: never materialized")
            continue
        when = datetime.datetime.fromtimestamp(link["timestamp"], datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        lines.append(f"{link['asset']}  data {link['data_version']}  code {link['code_version']}  run "
                     f"{link['run_id'][:8]}  {when}")
        for name, version in link["upstream_data_versions"].items():
            lines.append(f"    <- {name} {version}")
        for name, value in link["details"].items():
            lines.append(f"    {name}: {value}")
    return "\n".join(lines)


def main(asset: str) -> int:
    from rhythm_pipeline.definitions import defs

    keys = defs.resolve_asset_graph().get_all_asset_keys()
    if dg.AssetKey(asset) not in keys:  # before opening the instance, which may create files
        raise ValueError(f"unknown asset {asset!r}; assets: {', '.join(sorted(k.to_user_string() for k in keys))}")
    print(format_chain(lineage_chain(asset, dg.DagsterInstance.get(), defs)))
    return 0


def _check_dagster_home() -> None:
    import os

    home = os.environ.get("DAGSTER_HOME")
    if not home:
        raise ValueError("DAGSTER_HOME is not set: point it at the Dagster instance folder whose runs to read "
                         "(the demo's is ./dagster_home)")
    if not Path(home).is_dir():
        raise ValueError(f"DAGSTER_HOME {home}: no such folder (the demo's instance is ./dagster_home)")


def cli(argv: list[str]) -> int:
    """`rhythm lineage ASSET` (entry point "rhythm.commands": lineage, so rhythm_core.cli offers it
    without importing Dagster). A mistake (no instance, an unknown asset) is one line and exit 2."""
    import os
    import sys

    from rhythm_core.cli.parsing import OneLineParser

    parser = OneLineParser(prog="rhythm lineage", description=DESCRIPTION)
    parser.add_argument("asset", help="asset key, e.g. eval_results")
    parser.add_argument("--debug", action="store_true", help="show the traceback of a mistake too (also RHYTHM_DEBUG=1)")
    args = parser.parse_args(argv)
    try:
        _check_dagster_home()
        return main(args.asset)
    except ValueError as exc:
        if args.debug or os.environ.get("RHYTHM_DEBUG", "") not in ("", "0"):
            raise
        print(f"rhythm lineage: error: {exc}", file=sys.stderr)
        return 2
