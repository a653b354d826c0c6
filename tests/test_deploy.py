"""deploy/k8s: the Helm values' run launcher and the run config's k8s_job_executor section hold to
dagster-k8s's own config schemas (a misspelt key or a wrong type fails here, not on a cluster), and
RHYTHM_EXECUTOR=k8s gives the code location that executor."""

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
