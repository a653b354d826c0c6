"""The definitions are fixed when they load: the same assets, jobs, tags, pools, executor and resources
whatever the environment of the process that loads them (the executor, the artifact store and its
endpoint, the teacher, the compute backend, secrets set or not, the machine's cores), and they reach
Dagster through its public API only."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Everything a user or a deployment can see of the definitions, as plain values.
FINGERPRINT = r"""
import json
import dagster as dg
from rhythm_pipeline.definitions import defs

def plain(value):
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)

graph = defs.resolve_asset_graph()
out = {"assets": {}, "jobs": {}, "schedules": {}, "resources": {}, "checks": []}
for spec in defs.resolve_all_asset_specs():
    out["assets"][spec.key.to_user_string()] = {
        "code_version": spec.code_version, "partitions": repr(spec.partitions_def), "tags": dict(spec.tags),
        "group": spec.group_name, "deps": sorted(d.asset_key.to_user_string() for d in spec.deps),
        "automation": repr(spec.automation_condition)}
for checks in defs.asset_checks:
    out["checks"] += sorted(f"{s.key.to_user_string()}|{s.blocking}" for s in checks.check_specs)
for name in ("teacher_data", "data_half", "training", "reevaluate", "regrade", "rhythm_lineage_long",
             "rhythm_lineage_published", "__ASSET_JOB"):
    job = defs.resolve_job_def(name)
    ops = {}
    for node in job.graph.nodes:
        for op in node.definition.iterate_op_defs() if hasattr(node.definition, "iterate_op_defs") else [node.definition]:
            ops[op.name] = {"tags": dict(op.tags), "pool": op.pool, "retry": repr(op.retry_policy)}
    out["jobs"][name] = {"executor": job.executor_def.name, "executor_config": plain(job.executor_def.config_schema.as_field().default_value),
                         "tags": dict(job.tags), "partitions": repr(job.partitions_def), "ops": ops}
for schedule in defs.schedules or []:
    out["schedules"][schedule.name] = {"cron": schedule.cron_schedule, "job": schedule.job_name}
for name, resource in (defs.resources or {}).items():
    dump = resource.model_dump() if hasattr(resource, "model_dump") else {}
    out["resources"][name] = {"type": type(resource).__name__, "fields": {k: plain(v) for k, v in dump.items()}}
print(json.dumps(out, sort_keys=True))
"""

ENVIRONMENTS = {
    "bare": {},
    "cluster": {"RHYTHM_EXECUTOR": "k8s", "RHYTHM_ARTIFACTS": "s3://team-bucket/lineage",
                "RHYTHM_ARTIFACT_CACHE": "/tmp/rhythm-cache", "AWS_ENDPOINT_URL": "http://s3.internal:9000",
                "AWS_ACCESS_KEY_ID": "AKIATEST", "AWS_SECRET_ACCESS_KEY": "not-a-real-secret",
                "AWS_DEFAULT_REGION": "eu-west-1", "RHYTHM_TRAIN_PROCESSES": "4", "RHYTHM_COMPUTE": "hf_jobs",
                "HF_TOKEN": "hf_not_real", "RHYTHM_HUB_NAMESPACE": "team", "RHYTHM_TEACHER_BACKEND": "openai",
                "RHYTHM_TEACHER_MODEL": "gpt-5.4", "OPENAI_API_KEY": "sk-not-real", "RHYTHM_CPU_CORES": "1"},
    "big machine": {"RHYTHM_CPU_CORES": "32", "RHYTHM_EXECUTOR": "multiprocess"},
}
VARIABLES = {name for env in ENVIRONMENTS.values() for name in env}


def test_the_definitions_are_the_same_under_any_environment():
    base = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    children = {name: subprocess.Popen([sys.executable, "-c", FINGERPRINT], cwd=REPO, env={**base, **extra},
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for name, extra in ENVIRONMENTS.items()}
    prints = {}
    for name, child in children.items():
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err[-3000:]
        prints[name] = json.loads(out.strip().splitlines()[-1])
    bare = prints.pop("bare")
    for name, fingerprint in prints.items():
        assert fingerprint == bare, f"the definitions differ under the {name!r} environment"
    # and they hold what the environment would otherwise have had to say
    assert bare["jobs"]["training"]["executor"] == "rhythm_multiprocess"
    training_op = bare["jobs"]["training"]["ops"]["sft_checkpoint"]
    assert training_op["pool"] == "gpu" and "dagster-k8s/config" in training_op["tags"]
    play = bare["jobs"]["reevaluate"]["ops"]["play_ood"]
    assert play["pool"] == "gpu" and "nvidia.com/gpu" in play["tags"]["dagster-k8s/config"]
    assert bare["jobs"]["teacher_data"]["ops"]["teacher_trajectories"]["pool"] == "teacher_api"
    assert "not-a-real-secret" not in json.dumps(bare) and "sk-not-real" not in json.dumps(prints)


def test_rhythm_pipeline_imports_nothing_private_of_dagster():
    """Every import of Dagster in the orchestration package is of its public API (no `dagster._…`)."""
    private = []
    for path in sorted((REPO / "rhythm_pipeline").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            private += [f"{path.relative_to(REPO)}:{node.lineno} {n}" for n in names
                        if n.split(".")[0] in ("dagster", "dagster_graphql", "dagster_k8s")
                        and any(part.startswith("_") for part in n.split(".")[1:])]
    assert not private, "private Dagster imports:\n" + "\n".join(private)
