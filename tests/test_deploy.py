"""deploy/k8s: the Helm values' run launcher and the run config's k8s_job_executor section hold to
dagster-k8s's own config schemas (a misspelt key or a wrong type fails here, not on a cluster), and
RHYTHM_EXECUTOR=k8s gives the code location that executor."""

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._config import validate_config
from dagster_k8s import K8sRunLauncher, k8s_job_executor

from rhythm_pipeline.defs.executor import chosen_executor, rhythm_multiprocess_executor

DEPLOY = Path(__file__).resolve().parents[1] / "deploy" / "k8s"


def run_launcher_config(values: dict, release: str = "dagster") -> dict:
    """The `run_launcher.config` the chart writes into dagster.yaml from its values (the chart's
    helpers/instance/_run-launcher.tpl, camelCase to snake_case)."""
    launcher = values["runLauncher"]["config"]["k8sRunLauncher"]
    config = {"load_incluster_config": launcher["loadInclusterConfig"],
              "job_namespace": launcher.get("jobNamespace") or "default",
              "image_pull_policy": launcher["imagePullPolicy"], "service_account_name": release,
              "dagster_home": values["global"]["dagsterHome"], "instance_config_map": f"{release}-instance",
              "postgres_password_secret": values["global"]["postgresqlSecretName"]}
    config.update({snake: launcher[camel] for camel, snake in (
        ("envVars", "env_vars"), ("volumeMounts", "volume_mounts"), ("volumes", "volumes"), ("labels", "labels"),
        ("resources", "resources"), ("schedulerName", "scheduler_name"), ("securityContext", "security_context"))
        if launcher.get(camel)})
    for camel, snake in (("envConfigMaps", "env_config_maps"), ("envSecrets", "env_secrets")):
        if launcher.get(camel):
            config[snake] = [item["name"] for item in launcher[camel]]
    if launcher.get("runK8sConfig"):
        names = {"containerConfig": "container_config", "podSpecConfig": "pod_spec_config",
                 "podTemplateSpecMetadata": "pod_template_spec_metadata", "jobSpecConfig": "job_spec_config",
                 "jobMetadata": "job_metadata"}
        config["run_k8s_config"] = {names[k]: v for k, v in launcher["runK8sConfig"].items()}
    return config


def _errors(config_type, config: dict) -> list[str]:
    result = validate_config(config_type, config)
    return [] if result.success else [error.message for error in result.errors]


def test_the_helm_values_run_launcher_validates_and_a_mistake_does_not():
    values = yaml.safe_load((DEPLOY / "values.yaml").read_text())
    config = run_launcher_config(values)
    assert _errors(K8sRunLauncher.config_type(), config) == []
    assert "rhythm-s3" in config["env_secrets"] and config["job_namespace"] == "rhythm"
    wrong = {**config, "load_incluster_config": "yes", "job_namspace": "rhythm"}
    errors = " ".join(_errors(K8sRunLauncher.config_type(), wrong))
    assert "job_namspace" in errors and "load_incluster_config" in errors


def test_the_run_configs_k8s_job_executor_section_validates_and_a_mistake_does_not():
    execution = yaml.safe_load((DEPLOY / "run_config.yaml").read_text())["execution"]["config"]
    schema = k8s_job_executor.config_schema.config_type
    assert _errors(schema, execution) == []
    assert set(execution["per_step_k8s_config"]) == {"sft_checkpoint", "grpo_checkpoint"}
    assert _errors(schema, {**execution, "max_concurent": 2}) != []


def test_rhythm_executor_picks_the_code_locations_executor(monkeypatch):
    assert chosen_executor("") is rhythm_multiprocess_executor
    assert chosen_executor("k8s") is k8s_job_executor
    with pytest.raises(ValueError, match="RHYTHM_EXECUTOR='docker': unknown executor"):
        chosen_executor("docker")
    monkeypatch.setenv("RHYTHM_EXECUTOR", "k8s")
    assert isinstance(chosen_executor(), dg.ExecutorDefinition) and chosen_executor().name == "k8s"


def test_a_training_step_asks_for_its_gpus_in_op_tags_that_dagster_k8s_accepts():
    import kubernetes
    from dagster_k8s.container_context import K8sContainerContext
    from dagster_k8s.job import UserDefinedDagsterK8sConfig, get_user_defined_k8s_config
    from dagster_k8s.models import k8s_model_from_dict

    from rhythm_pipeline.defs.executor import k8s_gpu_tags, training_op_tags

    assert training_op_tags({}) == {} and training_op_tags({"RHYTHM_TRAIN_PROCESSES": "4"}) == {}  # not on k8s
    tags = training_op_tags({"RHYTHM_EXECUTOR": "k8s", "RHYTHM_TRAIN_PROCESSES": "4"})
    step = get_user_defined_k8s_config(tags)  # dagster-k8s validates the tag against its schema, or raises
    # merged as k8s_job_executor merges a step's pod: step_k8s_config, the op tags, per_step_k8s_config
    execution = yaml.safe_load((DEPLOY / "run_config.yaml").read_text())["execution"]["config"]
    merged = K8sContainerContext(run_k8s_config=UserDefinedDagsterK8sConfig.from_dict(execution["step_k8s_config"]))
    for config in (step, UserDefinedDagsterK8sConfig.from_dict(execution["per_step_k8s_config"]["sft_checkpoint"])):
        merged = merged.merge(K8sContainerContext(run_k8s_config=config))
    container = merged.run_k8s_config.container_config
    assert container["resources"] == {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"nvidia.com/gpu": "4"}}
    assert container["env"] == [{"name": "RHYTHM_TRAIN_PROCESSES", "value": "4"}]
    assert merged.run_k8s_config.pod_spec_config == {"node_selector": {"pool": "gpu"}}
    k8s_model_from_dict(kubernetes.client.V1Container, {"name": "step", "image": "rhythm", **container})
    assert training_op_tags({"RHYTHM_EXECUTOR": "k8s"}) == k8s_gpu_tags(1)
    with pytest.raises(ValueError, match="RHYTHM_TRAIN_PROCESSES='two': expected the number of GPUs"):
        training_op_tags({"RHYTHM_EXECUTOR": "k8s", "RHYTHM_TRAIN_PROCESSES": "two"})
    with pytest.raises(ValueError, match="RHYTHM_TRAIN_PROCESSES: .* at least 1, got 0"):
        k8s_gpu_tags(0)
    with pytest.raises(dg.DagsterInvalidConfigError):
        get_user_defined_k8s_config({"dagster-k8s/config": '{"container_confg": {}}'})


def test_the_training_assets_carry_the_gpu_tags_on_k8s_only():
    show = ("import json; from rhythm_pipeline.defs.assets.training import sft_checkpoint, grpo_checkpoint; "
            "print(json.dumps([a.op.tags.get('dagster-k8s/config') for a in (sft_checkpoint, grpo_checkpoint)]))")

    def tags(**env) -> list:
        base = {k: v for k, v in os.environ.items() if k not in ("RHYTHM_EXECUTOR", "RHYTHM_TRAIN_PROCESSES")}
        out = subprocess.run([sys.executable, "-c", show], env={**base, **env}, capture_output=True, text=True, check=True)
        return json.loads(out.stdout.splitlines()[-1])

    assert tags() == [None, None]  # the demo's steps: no tag
    on_k8s = [json.loads(tag) for tag in tags(RHYTHM_EXECUTOR="k8s", RHYTHM_TRAIN_PROCESSES="2")]
    assert [t["container_config"]["resources"]["limits"] for t in on_k8s] == [{"nvidia.com/gpu": "2"}] * 2
