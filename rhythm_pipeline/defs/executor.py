"""The executor of every job, and the thread budget of the steps that run torch.

What the UI's "Materialize all", `dagster asset materialize` and the schedules use: Dagster's
multiprocess executor with two settings that fit this lineage.

- The steps that run a model side by side (the three evaluation conditions) carry the tag
  `rhythm/torch: parallel`, and the executor's tag concurrency limit lets `torch_steps_at_once`
  of them run together: as many as keep MIN_THREADS_PER_STEP threads each on the cores this
  process may use (1 on 2 cores, 3 on 6+). Every such step sizes torch to its share of the cores
  (`step_thread_budget`), so parallel steps never oversubscribe the machine.
- Steps start from a forkserver that has already imported the definitions (and with them torch,
  transformers and TRL) instead of a fresh interpreter each, which saves each step those imports.

Both are executor config, editable in the launchpad (`execution: config: ...`). Under the in-process
mode (`in_process: true`, `dg.materialize`) steps run one at a time and each gets every core. With
`kind: k8s` (or RHYTHM_EXECUTOR=k8s in the run's process, as on a cluster's run pods) the same executor
hands each step to dagster-k8s's k8s_job_executor, a pod per step with its pod's cores; the model steps'
op tags (`MODEL_STEP_TAGS`) ask for a GPU node there.
"""

from __future__ import annotations

import json
import os

import dagster as dg

from rhythm_core.compute.threads import available_cores, thread_budget, torch_steps_at_once

EXECUTOR_NAME = "rhythm_multiprocess"
DEFINITIONS_MODULE = "rhythm_pipeline.definitions"
TORCH_TAG = "rhythm/torch"
PARALLEL_TORCH_TAGS = {TORCH_TAG: "parallel"}


EXECUTOR_VAR = "RHYTHM_EXECUTOR"  # multiprocess (the default) | k8s: a Kubernetes pod per step
KINDS = ("multiprocess", "k8s")


def _k8s_config_field() -> dg.Field:
    """dagster-k8s's k8s_job_executor config, its defaults filled in by Dagster (free-form without dagster-k8s)."""
    try:
        from dagster_k8s import k8s_job_executor
    except ImportError:
        return dg.Field(dg.Permissive(), default_value={}, description="k8s_job_executor's config (needs dagster-k8s)")
    return dg.Field(k8s_job_executor.config_schema.config_type, default_value={},
                    description="k8s_job_executor's config: namespace, env, per-step pod config (kind k8s)")


def _multiprocess_config(config: dict) -> dict:
    """multi_or_in_process_executor's config, every field given (its creation reads them all)."""
    retries = {"enabled": {}}
    if config["in_process"]:
        return {"in_process": {"retries": retries, "marker_to_close": None, "step_dependency_config": None}}
    return {"multiprocess": {
        "max_concurrent": config["max_concurrent"], "retries": retries, "step_dependency_config": None,
        "tag_concurrency_limits": [{"key": TORCH_TAG, "value": "parallel", "limit": config["torch_steps_at_once"]}],
        # Dagster preloads the job's module only for module code pointers; name it so every entry
        # point (the UI's code server, `dagster asset materialize -m`, schedules) gets a warm server.
        "start_method": ({"forkserver": {"preload_modules": ["dagster", DEFINITIONS_MODULE]}} if config["forkserver"]
                         else {"spawn": {}}),
    }}


def executor_kind(config: dict, environ=None) -> str:
    """The executor a run uses: its config's `kind`, else RHYTHM_EXECUTOR in the run's own process (set on a
    cluster's run pods), else multiprocess; read when the run starts, never when the definitions load."""
    environ = os.environ if environ is None else environ
    kind = config.get("kind") or environ.get(EXECUTOR_VAR) or "multiprocess"
    if kind not in KINDS:
        raise ValueError(f"{EXECUTOR_VAR}={kind!r}: unknown executor; allowed: {', '.join(KINDS)}")
    return kind


@dg.executor(
    name=EXECUTOR_NAME,
    config_schema={
        "kind": dg.Field(str, default_value="", description="multiprocess | k8s (a Kubernetes pod per step); empty: "
                                                            "RHYTHM_EXECUTOR of the run's process, else multiprocess."),
        "max_concurrent": dg.Field(int, default_value=0,
                                   description="Steps running at once; 0: as many as the machine has cores."),
        "torch_steps_at_once": dg.Field(int, default_value=0,
                                        description="Model-running steps (tag rhythm/torch=parallel) at once; "
                                                    "each gets the cores divided by this many torch threads. "
                                                    "0: the cores the run's process may use // 2."),
        "forkserver": dg.Field(bool, default_value=True,
                               description="Fork steps from a server that preloaded the definitions "
                                           "(False: spawn a fresh interpreter per step)."),
        "in_process": dg.Field(bool, default_value=False,
                               description="Run the steps one at a time in the run's own process, each with every "
                                           "core."),
        "k8s": _k8s_config_field(),
    },
    requirements=dg.multiple_process_executor_requirements(),
)
def rhythm_multiprocess_executor(init_context: dg.InitExecutorContext):
    """Dagster's multiprocess executor with a torch-step concurrency limit and per-step thread budgets, or
    on a cluster dagster-k8s's pod per step; which one, and the cores, are read when the run starts."""
    config = dict(init_context.executor_config)
    if executor_kind(config) == "k8s":
        try:
            from dagster_k8s import k8s_job_executor
        except ImportError as exc:
            raise ImportError(f"{EXECUTOR_VAR}=k8s needs dagster-k8s (pip install dagster-k8s==0.29.27, the "
                              f"release paired with this dagster): {exc}") from None
        executor_def, executor_config = k8s_job_executor, config["k8s"]
    else:
        config["torch_steps_at_once"] = config["torch_steps_at_once"] or torch_steps_at_once()
        executor_def, executor_config = dg.multi_or_in_process_executor, _multiprocess_config(config)
    return executor_def.executor_creation_fn(dg.InitExecutorContext(
        job=init_context.job, executor_def=executor_def, executor_config=executor_config,
        instance=init_context.instance))


def _executor_config(context) -> dict:
    return ((context.run_config or {}).get("execution") or {}).get("config") or {}


def step_thread_budget(context, parallel_steps: int = 1) -> int:
    """Torch threads for this step. `parallel_steps`: how many model-running steps of the same job
    could run beside it (the evaluation conditions); 1 for a step that runs alone (training)."""
    config = _executor_config(context)
    if (context.job_def.executor_def.name != EXECUTOR_NAME or parallel_steps <= 1 or config.get("in_process")
            or executor_kind(config) == "k8s"):
        # In-process: one step at a time. Other executors: a container per step. Either way, every core.
        return thread_budget(1)
    at_once = config.get("torch_steps_at_once") or torch_steps_at_once()
    cores = available_cores()
    max_concurrent = config.get("max_concurrent") or cores
    return thread_budget(min(at_once, max_concurrent, parallel_steps), cores=cores)


K8S_CONFIG_TAG = "dagster-k8s/config"  # dagster_k8s.job.USER_DEFINED_K8S_CONFIG_KEY
# The node label NVIDIA's GPU operator puts on every node with a GPU, and the taint GPU node pools carry.
GPU_NODE_SELECTOR = {"nvidia.com/gpu.present": "true"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def k8s_gpu_tags(gpus: int = 1) -> dict[str, str]:
    """Op tags that put a step's pod on a GPU node with `gpus` GPUs (its container's `nvidia.com/gpu` limit),
    under the k8s_job_executor (which merges them over step_k8s_config; per_step_k8s_config overrides them);
    inert under any other executor. Every step that loads a model carries them, whoever launches the run."""
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
        raise ValueError(f"a model step's GPUs must be a whole number of at least 1, got {gpus!r}")
    config = {"container_config": {"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}},
              "pod_spec_config": {"node_selector": GPU_NODE_SELECTOR, "tolerations": [GPU_TOLERATION]}}
    return {K8S_CONFIG_TAG: json.dumps(config, sort_keys=True)}


MODEL_STEP_TAGS = k8s_gpu_tags(1)


@dg.definitions
def executor() -> dg.Definitions:
    return dg.Definitions(executor=rhythm_multiprocess_executor)
