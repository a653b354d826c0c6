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
executor (`make demo`, `dg.materialize`) steps run one at a time and each gets every core; under an
executor that gives each step its own container (Kubernetes, Docker) each gets its container's cores.
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


def _multiprocess_config(config: dict) -> dict:
    if config["in_process"]:
        return {"in_process": {}}
    return {"multiprocess": {
        "max_concurrent": config["max_concurrent"],
        "tag_concurrency_limits": [{"key": TORCH_TAG, "value": "parallel", "limit": config["torch_steps_at_once"]}],
        # Dagster preloads the job's module only for module code pointers; name it so every entry
        # point (the UI's code server, `dagster asset materialize -m`, schedules) gets a warm server.
        "start_method": ({"forkserver": {"preload_modules": ["dagster", DEFINITIONS_MODULE]}} if config["forkserver"]
                         else {"spawn": {}}),
    }}


rhythm_multiprocess_executor = dg.multi_or_in_process_executor.configured(
    _multiprocess_config,
    name=EXECUTOR_NAME,
    config_schema={
        "max_concurrent": dg.Field(int, default_value=0,
                                   description="Steps running at once; 0: as many as the machine has cores."),
        "torch_steps_at_once": dg.Field(int, default_value=torch_steps_at_once(),
                                        description="Model-running steps (tag rhythm/torch=parallel) at once; "
                                                    "each gets the cores divided by this many torch threads. "
                                                    "Default: the cores this process may use // 2."),
        "forkserver": dg.Field(bool, default_value=True,
                               description="Fork steps from a server that preloaded the definitions "
                                           "(False: spawn a fresh interpreter per step)."),
        "in_process": dg.Field(bool, default_value=False,
                               description="Run the steps one at a time in the run's own process, each with every "
                                           "core (what `make demo` runs; its runs re-execute the same way)."),
    },
    description="Dagster's multiprocess executor with a torch-step concurrency limit and per-step thread budgets.",
)


def _executor_config(context) -> dict:
    return ((context.run_config or {}).get("execution") or {}).get("config") or {}


def step_thread_budget(context, parallel_steps: int = 1) -> int:
    """Torch threads for this step. `parallel_steps`: how many model-running steps of the same job
    could run beside it (the evaluation conditions); 1 for a step that runs alone (training)."""
    if (context.job_def.executor_def.name != EXECUTOR_NAME or parallel_steps <= 1
            or _executor_config(context).get("in_process")):
        # In-process: one step at a time. Other executors: a container per step. Either way, every core.
        return thread_budget(1)
    config = _executor_config(context)
    at_once = config.get("torch_steps_at_once") or torch_steps_at_once()
    cores = available_cores()
    max_concurrent = config.get("max_concurrent") or cores
    return thread_budget(min(at_once, max_concurrent, parallel_steps), cores=cores)


EXECUTOR_VAR = "RHYTHM_EXECUTOR"  # multiprocess (the default) | k8s: a Kubernetes pod per step


def chosen_executor(name: str | None = None) -> dg.ExecutorDefinition:
    """The executor RHYTHM_EXECUTOR names. `k8s`: dagster-k8s's k8s_job_executor, a pod per step, for
    clusters whose steps share nothing but PostgreSQL and the artifact store (deploy/README.md)."""
    name = name if name is not None else os.environ.get(EXECUTOR_VAR, "multiprocess")
    if name in ("", "multiprocess"):
        return rhythm_multiprocess_executor
    if name == "k8s":
        try:
            from dagster_k8s import k8s_job_executor
        except ImportError as exc:
            raise ImportError(f"{EXECUTOR_VAR}=k8s needs dagster-k8s (pip install dagster-k8s==0.29.27, the "
                              f"release paired with this dagster): {exc}") from None
        return k8s_job_executor
    raise ValueError(f"{EXECUTOR_VAR}={name!r}: unknown executor; allowed: multiprocess, k8s")


TRAIN_PROCESSES_VAR = "RHYTHM_TRAIN_PROCESSES"  # a training step's processes: one per GPU of its pod
K8S_CONFIG_TAG = "dagster-k8s/config"  # dagster_k8s.job.USER_DEFINED_K8S_CONFIG_KEY


def k8s_gpu_tags(processes: int) -> dict[str, str]:
    """Op tags that give a training step's pod `processes` GPUs (its container's `nvidia.com/gpu`
    limit) and tell the launcher in it how many processes to start (TRAIN_PROCESSES_VAR). The
    k8s_job_executor merges them over step_k8s_config, under per_step_k8s_config."""
    if not isinstance(processes, int) or processes < 1:
        raise ValueError(f"{TRAIN_PROCESSES_VAR}: a training step's processes must be a whole number of at least 1, "
                         f"got {processes!r}")
    container = {"resources": {"limits": {"nvidia.com/gpu": str(processes)}},
                 "env": [{"name": TRAIN_PROCESSES_VAR, "value": str(processes)}]}
    return {K8S_CONFIG_TAG: json.dumps({"container_config": container}, sort_keys=True)}


def training_op_tags(environ=None) -> dict[str, str]:
    """The training assets' op tags: under RHYTHM_EXECUTOR=k8s, `k8s_gpu_tags` for RHYTHM_TRAIN_PROCESSES
    (default 1); under any other executor none."""
    environ = os.environ if environ is None else environ
    if environ.get(EXECUTOR_VAR) != "k8s":
        return {}
    return k8s_gpu_tags(train_processes(environ))


def train_processes(environ=None) -> int:
    """RHYTHM_TRAIN_PROCESSES (default 1): the training processes ComputeResource starts by default,
    and under k8s the GPUs a training step's pod asks for."""
    value = (os.environ if environ is None else environ).get(TRAIN_PROCESSES_VAR, "1").strip()
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{TRAIN_PROCESSES_VAR}={value!r}: expected the number of GPUs (processes) of a training step")
    return int(value)


@dg.definitions
def executor() -> dg.Definitions:
    return dg.Definitions(executor=chosen_executor())
