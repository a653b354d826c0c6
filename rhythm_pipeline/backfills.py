"""Asset backfills through Dagster's GraphQL API (what the UI's "Materialize" dialog sends): the whole
lineage over its three partitionings is one backfill, whose runs the daemon launches in dependency order."""

from __future__ import annotations

from rhythm_pipeline.dev_server import DevServer

LAUNCH = """
mutation Launch($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on InvalidSubsetError { message }
    ... on PythonError { message }
    ... on Error { message }
  }
}"""
STATUS = """
query Status($id: String!) {
  partitionBackfillOrError(backfillId: $id) { __typename ... on PartitionBackfill { status } ... on Error { message } }
}"""
CANCEL = """
mutation Cancel($id: String!) {
  cancelPartitionBackfill(backfillId: $id) { __typename ... on Error { message } }
}"""
# Where a backfill stops: every status but requested, canceling and failing (it is still winding down then).
FINISHED = {"COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED"}


def launch_asset_backfill(server: DevServer, partitions: dict[str, list[str] | None], *, run_config: dict | None = None,
                          title: str = "", tags: dict[str, str] | None = None) -> str:
    """One backfill of the assets named in `partitions` (asset -> the partition keys, None for an unpartitioned
    asset); every run gets `run_config` and `tags`. Returns its id; a RuntimeError naming why it was refused."""
    selectors = [{"assetKey": {"path": [asset]},
                  "partitions": None if keys is None else {"ranges": [{"start": k, "end": k} for k in keys]}}
                 for asset, keys in partitions.items()]
    params = {"partitionsByAssets": selectors, "runConfigData": run_config or {}, "title": title,
              "tags": [{"key": k, "value": v} for k, v in (tags or {}).items()]}
    answer = server.graphql(LAUNCH, {"params": params})["launchPartitionBackfill"]
    if answer["__typename"] != "LaunchBackfillSuccess":
        raise RuntimeError(f"the backfill was refused ({answer['__typename']}): {answer.get('message', '')}")
    return answer["backfillId"]


def backfill_status(server: DevServer, backfill_id: str) -> str:
    answer = server.graphql(STATUS, {"id": backfill_id})["partitionBackfillOrError"]
    if answer["__typename"] != "PartitionBackfill":
        raise RuntimeError(f"backfill {backfill_id}: {answer.get('message', answer['__typename'])}")
    return answer["status"]


def cancel_backfill(server: DevServer, backfill_id: str) -> None:
    server.graphql(CANCEL, {"id": backfill_id})
