"""deploy/: the instance files and the Helm values hold to Dagster's and dagster-k8s's own config schemas (a
misspelt key or a wrong type fails here, not on a cluster); the executor is the one the run's config or
RHYTHM_EXECUTOR names when the run starts; every step that loads a model, and no other, asks for a GPU node
in op tags dagster-k8s accepts, and the pod it gets on the cluster is the one deploy/README.md describes."""

import copy
from pathlib import Path

import dagster as dg
import kubernetes
import pytest
import yaml
from dagster._config import validate_config
from dagster._core.definitions.reconstruct import ReconstructableRepository
from dagster._core.instance.config import dagster_instance_config
from dagster_k8s import K8sRunLauncher, k8s_job_executor
from dagster_k8s.container_context import K8sContainerContext
from dagster_k8s.job import UserDefinedDagsterK8sConfig, get_user_defined_k8s_config
from dagster_k8s.models import k8s_model_from_dict

from rhythm_pipeline.definitions import defs
from rhythm_pipeline.defs.executor import (
    EXECUTOR_NAME,
    GPU_NODE_SELECTOR,
    GPU_TOLERATION,
    K8S_CONFIG_TAG,
    MODEL_STEP_TAGS,
    executor_kind,
    k8s_gpu_tags,
    rhythm_multiprocess_executor,
)
from rhythm_pipeline.defs.pools import GPU_POOL, TEACHER_POOL

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy" / "k8s"
MODEL_STEPS = {"sft_checkpoint", "grpo_checkpoint", "play_continuous", "play_ood", "play_discrete3"}
TEACHER_STEPS = {"teacher_trajectories", "play_teacher"}


def values() -> dict:
    return yaml.safe_load((DEPLOY / "values.yaml").read_text())


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


def instance_settings(values: dict) -> dict:
    """The run_coordinator, concurrency and run_retries sections the chart writes into dagster.yaml from its
    values (templates/configmap-instance.yaml with helpers/instance/_run-coordinator.tpl and _concurrency.tpl:
    a field left null is left out; with `concurrency` enabled so is an unset max_concurrent_runs)."""
    daemon, concurrency = values["dagsterDaemon"], values.get("concurrency") or {}
    queued = daemon["runCoordinator"]["config"]["queuedRunCoordinator"] or {}
    coordinator = {snake: queued[camel] for camel, snake in (
        ("maxConcurrentRuns", "max_concurrent_runs"), ("tagConcurrencyLimits", "tag_concurrency_limits"),
        ("dequeueIntervalSeconds", "dequeue_interval_seconds"), ("dequeueUseThreads", "dequeue_use_threads"),
        ("dequeueNumWorkers", "dequeue_num_workers")) if queued.get(camel) is not None}
    if queued.get("blockOpConcurrencyLimitedRuns"):
        block = queued["blockOpConcurrencyLimitedRuns"]
        coordinator["block_op_concurrency_limited_runs"] = {
            "enabled": block["enabled"], "op_concurrency_slot_buffer": block["opConcurrencySlotBuffer"]}
    if not concurrency.get("enabled") and "max_concurrent_runs" not in coordinator:
        coordinator["max_concurrent_runs"] = -1
    settings = {"run_coordinator": {"module": "dagster.core.run_coordinator", "class": "QueuedRunCoordinator",
                                    **({"config": coordinator} if coordinator else {})}}
    if concurrency.get("enabled"):
        pools, runs = concurrency.get("pools") or {}, concurrency.get("runs") or {}
        settings["concurrency"] = {
            **({"pools": {snake: pools[camel] for camel, snake in (
                ("defaultLimit", "default_limit"), ("granularity", "granularity"),
                ("opGranularityRunBuffer", "op_granularity_run_buffer")) if pools.get(camel) is not None}}
               if pools else {}),
            **({"runs": {snake: runs[camel] for camel, snake in (
                ("maxConcurrentRuns", "max_concurrent_runs"), ("tagConcurrencyLimits", "tag_concurrency_limits"))
                if runs.get(camel) not in (None, [])}} if runs else {})}
    retries = daemon["runRetries"]
    if retries["enabled"]:
        settings["run_retries"] = {"enabled": True, **({"max_retries": retries["maxRetries"]}
                                                       if retries.get("maxRetries") else {}),
                                   **({"retry_on_asset_or_op_failure": retries["retryOnAssetOrOpFailure"]}
                                      if retries.get("retryOnAssetOrOpFailure") is not None else {})}
    return settings


def load_instance_config(folder: Path, settings: dict | None = None) -> dict:
    """dagster.yaml in `folder` (with `settings` written there first) as Dagster loads it: its instance schema
    and the checks it makes across sections (e.g. a max_concurrent_runs in two places)."""
    if settings is not None:
        (folder / "dagster.yaml").write_text(yaml.safe_dump(settings))
    return dagster_instance_config(str(folder))[0]


def _errors(config_type, config: dict) -> list[str]:
    result = validate_config(config_type, config)
    return [] if result.success else [error.message for error in result.errors]


def test_the_helm_values_run_launcher_validates_and_a_mistake_does_not():
    config = run_launcher_config(values())
    assert _errors(K8sRunLauncher.config_type(), config) == []
    assert "rhythm-s3" in config["env_secrets"] and config["job_namespace"] == "rhythm"
    wrong = {**config, "load_incluster_config": "yes", "job_namspace": "rhythm"}
    errors = " ".join(_errors(K8sRunLauncher.config_type(), wrong))
    assert "job_namspace" in errors and "load_incluster_config" in errors


def test_every_instance_has_the_pools_and_the_run_retries_and_dagster_accepts_it(tmp_path):
    """The embedded instance, deploy/postgres/dagster.yaml and what the chart writes from values.yaml: one slot
    per pool, a dead run retried once and a failed step never; each loads under Dagster's own checks, and the
    queue's limit is in `concurrency: runs:` (beside it, the coordinator's own is refused)."""
    embedded = load_instance_config(REPO / "dagster_home")
    postgres = load_instance_config(REPO / "deploy" / "postgres")
    (tmp_path / "chart").mkdir()
    chart = load_instance_config(tmp_path / "chart", instance_settings(values()))
    retries = {"enabled": True, "max_retries": 1, "retry_on_asset_or_op_failure": False}
    for name, config in (("embedded", embedded), ("postgres", postgres), ("chart", chart)):
        assert config["concurrency"]["pools"]["default_limit"] == 1, name
        assert config["run_retries"] == retries, name
        assert config["run_coordinator"]["class"] == "QueuedRunCoordinator", name
        assert "max_concurrent_runs" not in (config["run_coordinator"].get("config") or {}), name
    assert postgres["concurrency"]["runs"]["max_concurrent_runs"] == chart["concurrency"]["runs"]["max_concurrent_runs"]
    assert postgres["storage"]["postgres"]["postgres_db"]["password"] == {"env": "DAGSTER_PG_PASSWORD"}

    both = yaml.safe_load((REPO / "deploy" / "postgres" / "dagster.yaml").read_text())
    both["run_coordinator"]["config"] = {"max_concurrent_runs": 4}
    (tmp_path / "both").mkdir()
    with pytest.raises(dg.DagsterInvalidConfigError, match="max_concurrent_runs.*incompatible"):
        load_instance_config(tmp_path / "both", both)
    # the chart's own values with the queue's old limit back in place: the same refusal (the chart itself
    # fails the render, _concurrency.tpl)
    old = values()
    old["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]["maxConcurrentRuns"] = 4
    (tmp_path / "old").mkdir()
    with pytest.raises(dg.DagsterInvalidConfigError, match="incompatible"):
        load_instance_config(tmp_path / "old", instance_settings(old))


def test_the_executor_kind_is_the_runs_config_else_rhythm_executor_else_multiprocess():
    assert executor_kind({"kind": ""}, environ={}) == "multiprocess"
    assert executor_kind({}, environ={"RHYTHM_EXECUTOR": "k8s"}) == "k8s"
    assert executor_kind({"kind": ""}, environ={"RHYTHM_EXECUTOR": "k8s"}) == "k8s"
    assert executor_kind({"kind": "multiprocess"}, environ={"RHYTHM_EXECUTOR": "k8s"}) == "multiprocess"
    assert executor_kind({"kind": "k8s"}, environ={"RHYTHM_EXECUTOR": "multiprocess"}) == "k8s"
    with pytest.raises(ValueError, match="RHYTHM_EXECUTOR='docker': unknown executor; allowed: multiprocess, k8s"):
        executor_kind({"kind": ""}, environ={"RHYTHM_EXECUTOR": "docker"})
    with pytest.raises(ValueError, match="RHYTHM_EXECUTOR='celery'"):
        executor_kind({"kind": "celery"}, environ={})


def test_k8s_gpu_tags_ask_for_gpus_on_a_gpu_node_in_a_tag_dagster_k8s_accepts():
    for gpus in (1, 4):
        tags = k8s_gpu_tags(gpus)
        assert set(tags) == {K8S_CONFIG_TAG}
        step = get_user_defined_k8s_config(tags)  # dagster-k8s validates the tag against its schema, or raises
        assert step.container_config == {"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
        assert step.pod_spec_config == {"node_selector": GPU_NODE_SELECTOR, "tolerations": [GPU_TOLERATION]}
        k8s_model_from_dict(kubernetes.client.V1Container, {"name": "step", "image": "rhythm", **step.container_config})
        k8s_model_from_dict(kubernetes.client.V1PodSpec, {"containers": [{"name": "step"}], **step.pod_spec_config})
    assert MODEL_STEP_TAGS == k8s_gpu_tags(1)
    for wrong in (0, -2, 1.5, "2"):
        with pytest.raises(ValueError, match=r"a model step's GPUs must be a whole number of at least 1, got"):
            k8s_gpu_tags(wrong)
    with pytest.raises(dg.DagsterInvalidConfigError):
        get_user_defined_k8s_config({K8S_CONFIG_TAG: '{"container_confg": {}}'})


def test_every_model_loading_step_and_no_other_asks_for_a_gpu_node_and_takes_the_gpu_pool():
    steps = {}
    for job in defs.resolve_all_job_defs():
        for op in job.graph.iterate_op_defs():
            steps[op.name] = op
    assert MODEL_STEPS | TEACHER_STEPS <= set(steps)
    for name, op in steps.items():
        if name in MODEL_STEPS:
            assert op.tags[K8S_CONFIG_TAG] == MODEL_STEP_TAGS[K8S_CONFIG_TAG] and op.pool == GPU_POOL, name
        else:
            assert K8S_CONFIG_TAG not in op.tags and op.pool != GPU_POOL, name
    assert {name for name, op in steps.items() if op.pool == TEACHER_POOL} == TEACHER_STEPS


def run_config() -> dict:
    return yaml.safe_load((DEPLOY / "run_config.yaml").read_text())


def four_gpu_example() -> dict:
    """The commented example at the end of run_config.yaml, as YAML."""
    text = (DEPLOY / "run_config.yaml").read_text()
    lines = text[text.index("\n# execution:"):].strip().splitlines()
    assert all(line.startswith("#") for line in lines)
    return yaml.safe_load("\n".join(line[2:] for line in lines))


def merged(onto: dict, extra: dict) -> dict:
    out = copy.deepcopy(onto)
    for key, value in extra.items():
        out[key] = merged(out.get(key) or {}, value) if isinstance(value, dict) else value
    return out


def test_the_run_config_and_its_four_gpu_example_validate_against_the_training_job():
    training = defs.resolve_job_def("training")
    # the executor's `k8s` block is dagster-k8s's own k8s_job_executor config (not a free-form fallback)
    fields = rhythm_multiprocess_executor.config_schema.config_type.fields
    assert fields["k8s"].config_type is k8s_job_executor.config_schema.config_type
    config = run_config()
    assert set(config) == {"execution"} and config["execution"]["config"]["kind"] == "k8s"
    k8s = dg.validate_run_config(training, config)["execution"][EXECUTOR_NAME]["k8s"]
    assert k8s["job_namespace"] == "rhythm" and k8s["env_secrets"] == ["rhythm-s3", "rhythm-secrets"]
    assert k8s["per_step_k8s_config"] == {}  # the GPUs come from the steps' tags
    example = merged(config, four_gpu_example())
    resolved = dg.validate_run_config(training, example)
    assert resolved["resources"]["compute"]["config"]["processes"] == 4
    assert set(resolved["execution"][EXECUTOR_NAME]["k8s"]["per_step_k8s_config"]) == {"sft_checkpoint",
                                                                                       "grpo_checkpoint"}
    for wrong in ({"max_concurent": 2}, {"job_namespace": 3}):
        with pytest.raises(dg.DagsterInvalidConfigError):
            dg.validate_run_config(training, merged(config, {"execution": {"config": {"k8s": wrong}}}))


@pytest.fixture
def outside_a_cluster(monkeypatch):
    """dagster-k8s loads the cluster's credentials when its launcher or step handler is made: nothing to load."""
    monkeypatch.setattr(kubernetes.config, "load_incluster_config", lambda *args, **kwargs: None)


def executor_for(config: dict, instance):
    """What the rhythm executor creates when a training run starts with this run config."""
    job = defs.resolve_job_def("training")
    executor_config = dg.validate_run_config(job, config)["execution"][EXECUTOR_NAME]
    recon = ReconstructableRepository.for_module("rhythm_pipeline.definitions", "defs",
                                                 working_directory=str(REPO)).get_reconstructable_job("training")
    return rhythm_multiprocess_executor.executor_creation_fn(dg.InitExecutorContext(
        job=recon, executor_def=rhythm_multiprocess_executor, executor_config=executor_config, instance=instance))


def test_a_run_that_starts_with_kind_k8s_gets_a_pod_per_step(outside_a_cluster, monkeypatch):
    monkeypatch.delenv("RHYTHM_EXECUTOR", raising=False)
    with dg.instance_for_test() as instance:
        on_k8s = executor_for(run_config(), instance)
        assert type(on_k8s).__name__ == "StepDelegatingExecutor"
        assert type(on_k8s._step_handler).__name__ == "K8sStepHandler"
        assert type(executor_for({}, instance)).__name__ == "MultiprocessExecutor"
        monkeypatch.setenv("RHYTHM_EXECUTOR", "k8s")  # a cluster's run pod, whose run config names no kind
        assert type(executor_for({}, instance)._step_handler).__name__ == "K8sStepHandler"
        multiprocess = {"execution": {"config": {"kind": "multiprocess"}}}
        assert type(executor_for(multiprocess, instance)).__name__ == "MultiprocessExecutor"


def step_pod(launcher_config: dict, handler, op_name: str, op_tags: dict) -> tuple[dict, dict]:
    """The container and pod spec config of a step's pod, merged as dagster-k8s's K8sStepHandler merges them:
    the run launcher's config, the executor's, the step's op tags, then per_step_k8s_config."""
    launcher = K8sRunLauncher(**launcher_config)
    context = K8sContainerContext.create_for_run(dg.DagsterRun(job_name="training", run_id="r"), launcher,
                                                 include_run_tags=False)
    context = context.merge(handler._executor_container_context)
    context = context.merge(K8sContainerContext(run_k8s_config=get_user_defined_k8s_config(op_tags)))
    context = context.merge(K8sContainerContext(run_k8s_config=UserDefinedDagsterK8sConfig.from_dict(
        handler._per_step_k8s_config.get(op_name, {}))))
    container, pod = context.run_k8s_config.container_config, context.run_k8s_config.pod_spec_config
    k8s_model_from_dict(kubernetes.client.V1Container, {"name": op_name, "image": "rhythm", **container})
    k8s_model_from_dict(kubernetes.client.V1PodSpec, {"containers": [{"name": op_name}], **pod})
    return container, pod


def test_on_the_cluster_a_model_step_gets_one_gpu_node_and_the_other_steps_none(outside_a_cluster):
    launcher_config = run_launcher_config(values())
    assert "run_k8s_config" not in launcher_config  # no node selector that would stay in the GPU steps' pods
    with dg.instance_for_test() as instance:
        handler = executor_for(run_config(), instance)._step_handler
        container, pod = step_pod(launcher_config, handler, "sft_checkpoint", MODEL_STEP_TAGS)
        assert container["resources"] == {"requests": {"cpu": "2", "memory": "8Gi"},
                                          "limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}}
        assert pod["node_selector"] == GPU_NODE_SELECTOR and pod["tolerations"] == [GPU_TOLERATION]
        assert {"config_map_ref": {"name": "rhythm-env"}} in container["env_from"]
        container, pod = step_pod(launcher_config, handler, "sft_dataset", {})
        assert container["resources"]["limits"] == {"cpu": "4", "memory": "16Gi"}
        assert "node_selector" not in pod and "tolerations" not in pod

        # the 4-GPU example: the step's limit becomes 4, the tag's node selector and toleration stay
        four = executor_for(merged(run_config(), four_gpu_example()), instance)._step_handler
        container, pod = step_pod(launcher_config, four, "grpo_checkpoint", MODEL_STEP_TAGS)
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
        assert pod["node_selector"] == GPU_NODE_SELECTOR and pod["tolerations"] == [GPU_TOLERATION]

        # why values.yaml's launcher sets no node selector: dagster-k8s merges the tags DEEP over it
        with_selector = {**launcher_config, "run_k8s_config": {"pod_spec_config": {"node_selector": {"pool": "cpu"}}}}
        _, pod = step_pod(with_selector, handler, "sft_checkpoint", MODEL_STEP_TAGS)
        assert pod["node_selector"] == {"pool": "cpu", **GPU_NODE_SELECTOR}

