"""Resources: where artifacts live (a local folder or an object store), the teacher (offline, or an
OpenAI-compatible API), the Hugging Face Hub and where models run.

The definitions are the same whatever the environment of the process that loads them: every setting an
environment variable may give (the artifact root, the endpoint and keys, the teacher, the compute backend,
the Hub's owner and token) is read when a run uses the resource, in that run's process, unless the launchpad
or a job's config sets it. Secrets come from the environment or through dg.EnvVar: the run config and event
log hold the variable's name, never its value.
"""


import hashlib
import json
import os
from pathlib import Path

import dagster as dg

from rhythm_core.store import ARTIFACTS_VAR, CACHE_VAR, open_store, split_url
from rhythm_core.teacher.settings import TeacherSettings
from rhythm_pipeline.defs.launchpad import launchpad_config


class ArtifactStoreResource(dg.ConfigurableResource):
    """Where artifacts live (RHYTHM_ARTIFACTS): a local folder (empty: the instance's
    `storage/rhythm`), or an object store `s3://bucket/prefix` that steps share and nothing else
    (rhythm_core/store/). With an object store each step keeps a local cache (`cache`,
    RHYTHM_ARTIFACT_CACHE; `{pid}` in it gives every process its own). The endpoint and the keys
    default to the standard AWS variables; the keys come in as dg.EnvVar, never as values."""

    root: str = ""
    cache: str = ""
    endpoint_url: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    region: str | None = None

    def storage_options(self) -> dict:
        """The object store's client options: a field set here, else its AWS variable as it is now."""
        def value(field, variable):  # an EnvVar is resolved at run time; a caller outside a run (the demo) resolves it here
            field = field.get_value() if isinstance(field, dg.EnvVar) else field
            return field or os.environ.get(variable) or None

        options = {"key": value(self.access_key_id, "AWS_ACCESS_KEY_ID"),
                   "secret": value(self.secret_access_key, "AWS_SECRET_ACCESS_KEY"),
                   "endpoint_url": value(self.endpoint_url, "AWS_ENDPOINT_URL")}
        options = {k: v for k, v in options.items() if v}
        region = value(self.region, "AWS_DEFAULT_REGION")
        if region:
            options["client_kwargs"] = {"region_name": region}
        return options

    def store(self, instance: dg.DagsterInstance):
        """The store for this process, its access checked before the first use. An empty `root` or
        `cache` reads its variable, then falls back to the instance's storage. A store opened before
        is reused only while the options and the AWS variables are what they were (rotated keys or
        another endpoint open a new one); the secrets enter that key as a hash, never as values."""
        root, cache = self.root or os.environ.get(ARTIFACTS_VAR, ""), self.cache or os.environ.get(CACHE_VAR, "")
        options = self.storage_options()
        settings = {"options": options, "env": {k: os.environ.get(k) for k in _AWS_VARS}}
        fingerprint = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()
        key = (root, cache, instance.storage_directory(), fingerprint)
        opened = _OPEN_STORES.get(key)
        if opened is None:
            opened = open_store(root, default_root=Path(instance.storage_directory()) / "rhythm",
                                cache=cache or None, storage_options=options)
            opened.check()
            _OPEN_STORES[key] = opened
        return opened


# What else decides which endpoint and identity an object store's client uses (botocore reads them).
_AWS_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL",
             "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE")
_OPEN_STORES: dict = {}


class _PickleOnStore(dg.UPathIOManager):
    def __init__(self, base_path, extension: str = ".pickle"):
        super().__init__(base_path=base_path)
        self.extension = extension

    def dump_to_path(self, context, obj, path) -> None:
        import pickle

        with path.open("wb") as fh:
            pickle.dump(obj, fh)

    def load_from_path(self, context, path):
        import pickle

        with path.open("rb") as fh:
            return pickle.load(fh)


class StoreIOManager(dg.ConfigurableIOManagerFactory):
    """The values steps hand each other (small dicts naming artifacts). With an object store they are
    pickled on it under `_dagster/io/`, so a step reads nothing from another step's disk; with a local
    root they are where Dagster's default filesystem IO manager keeps them (the instance's storage).
    Which of the two is decided when a run opens the store, not when the definitions load."""

    artifacts: ArtifactStoreResource

    def create_io_manager(self, context) -> dg.IOManager:
        from upath import UPath

        store = self.artifacts.store(context.instance)
        if split_url(store.url)[0] is None:
            return _PickleOnStore(base_path=UPath(context.instance.storage_directory()), extension="")
        return _PickleOnStore(base_path=UPath(f"{store.url}/_dagster/io", **store.storage_options_for_upath()))


def artifact_store_from_env() -> ArtifactStoreResource:
    """The resource the definitions register: every field empty, so each is read from its variable
    (RHYTHM_ARTIFACTS, RHYTHM_ARTIFACT_CACHE, the AWS variables) when a run opens the store."""
    return ArtifactStoreResource()


# The resource's fields are TeacherSettings' (names, types, defaults), generated so that a teacher knob
# is declared once; the retry backoff stays a library setting, not a launchpad one.
_TeacherFields = launchpad_config("_TeacherFields", TeacherSettings, module=__name__, base=dg.ConfigurableResource,
                                  exclude=("backoff_base_s", "backoff_cap_s"),
                                  backfill_max_cost_usd=(float | None, None))

# The variables a run reads for the teacher's fields the launchpad leaves at their defaults.
TEACHER_VARS = {"backend": "RHYTHM_TEACHER_BACKEND", "model": "RHYTHM_TEACHER_MODEL",
                "base_url": "RHYTHM_TEACHER_BASE_URL", "reasoning_effort": "RHYTHM_TEACHER_REASONING_EFFORT"}


class TeacherResource(_TeacherFields):
    """Who plays the teacher episodes. backend: search (default), bayes, bayes_v3 (offline, free) | openai | azure.
    Fields and defaults are TeacherSettings' (rhythm_core.teacher.settings says what each means); see
    rhythm_core.teacher.openai_client for how reasoning models (GPT-5.x, o-series) are handled. A field left
    at its default takes its variable (`TEACHER_VARS`) when a run starts, and the API key its `api_key_env`
    variable; `max_cost_usd` caps each shard, `backfill_max_cost_usd` all the shards of one backfill."""

    def settings(self) -> TeacherSettings:
        values = {name: getattr(self, name) for name in TeacherSettings.__dataclass_fields__
                  if name in type(self).model_fields}
        defaults = TeacherSettings()
        for name, variable in TEACHER_VARS.items():
            if values[name] == getattr(defaults, name) and os.environ.get(variable):
                values[name] = os.environ[variable]
        if not values["api_key"]:
            values["api_key"] = os.environ.get(values["api_key_env"]) or None
        return TeacherSettings(**values)


class HubResource(dg.ConfigurableResource):
    """The Hugging Face Hub: token from an EnvVar (else HF_TOKEN when a run uses it), repos under `namespace`
    (else RHYTHM_HUB_NAMESPACE), private by default."""

    token: str | None = None
    namespace: str | None = None
    private: bool = True
    endpoint: str | None = None

    def api(self):
        from huggingface_hub import HfApi

        return HfApi(token=self.token or os.environ.get("HF_TOKEN") or None, endpoint=self.endpoint)

    def repo_id(self, name: str) -> str:
        namespace = self.namespace or os.environ.get("RHYTHM_HUB_NAMESPACE")
        if not namespace:
            raise ValueError("HubResource.namespace is not set (nor RHYTHM_HUB_NAMESPACE): name the user or "
                             "organisation to push to")
        return f"{namespace}/{name}"

    def push(self, upload, path, name: str) -> tuple[dict, dict]:
        """Upload `path` to <namespace>/<name> with a rhythm_core uploader (`push_to_hub` for datasets,
        `push_checkpoint` for models); returns the upload's result and the metadata naming the revision."""
        pushed = upload(path, self.repo_id(name), api=self.api(), private=self.private)
        return pushed, {"hub_repo_id": pushed["repo_id"], "hub_revision": pushed["revision"],
                        "hub_url": dg.MetadataValue.url(pushed["url"])}


class ComputeResource(dg.ConfigurableResource):
    """Where models run: training (`train`) and the students' evaluation play (`play`). backend:
    local (a subprocess on this machine's CPU or CUDA, through Dagster Pipes) | hf_jobs (Hugging Face
    Jobs running the same rhythm_core code version). No Dagster process loads a model."""

    backend: str = ""  # local | hf_jobs; empty: RHYTHM_COMPUTE when a run starts, else local
    # Training processes, data-parallel (torchrun; gloo on CPU, NCCL on CUDA, one GPU each): the global
    # batch stays the config's, so this changes where the work runs, not what is learned. Not part of
    # any version.
    processes: int = 1
    # "full_shard" (FSDP, for a student one device cannot hold; with processes > 1), else plain DDP.
    sharding: str = ""
    hf_flavor: str = "a10g-small"
    hf_timeout: str | None = None  # "2h", "45m"; None: from each stage's size (rhythm_core.compute.costs)
    hf_max_usd: float | None = None  # refuse a job whose cost cap (flavor price per hour × timeout) is above this
    hf_namespace: str | None = None  # None: RHYTHM_HUB_NAMESPACE when a run starts
    hf_token: str | None = None  # None: HF_TOKEN when a run starts
    hf_image: str | None = None
    hf_endpoint: str | None = None  # the Hub's URL (default: huggingface.co, or HF_ENDPOINT)
    # Local backend: processes that play one condition's evaluation seeds side by side, each a run of the
    # seeds (one GPU each on CUDA; threads shared out on the CPU), merged into one worker's files
    # (rhythm_core.evaluation.shards). 1: one process, as before. A Hugging Face job plays on one.
    play_workers: int = 1

    @property
    def kind(self) -> str:
        """The backend a run uses: the field, else RHYTHM_COMPUTE as the run's process sees it, else local."""
        return self.backend or os.environ.get("RHYTHM_COMPUTE") or "local"

    @property
    def token(self) -> str | None:
        return self.hf_token or os.environ.get("HF_TOKEN") or None

    def train(self, context, *, stage: str, config: dict, dataset_dir: str, out_dir: str,
              init_dir: str | None = None, provenance: dict | None = None, env: dict | None = None) -> None:
        """Run one training stage into `out_dir`, which then holds result.json and model/. `env`: extra
        environment of a local training process (the MLflow run to log into)."""
        if self.kind == "local":
            return self._train_local(context, stage, config, dataset_dir, out_dir, init_dir, provenance, env)
        if self.kind == "hf_jobs":
            return self._train_hf_jobs(context, stage, config, dataset_dir, out_dir, init_dir, provenance)
        raise ValueError(f"unknown compute backend {self.kind!r}; allowed: local, hf_jobs")

    def _train_local(self, context, stage, config, dataset_dir, out_dir, init_dir, provenance, env=None) -> None:

        import tempfile

        from rhythm_core.compute.launch import ERROR_FILE_VAR, launch_command
        from rhythm_core.compute.threads import thread_env
        from rhythm_core.processes import child_env
        from rhythm_core.training.distributed import SHARDING_VAR, check_sharding
        from rhythm_pipeline.defs.executor import step_thread_budget

        extras = {"stage": stage, "config": config, "dataset": dataset_dir, "out": out_dir, "init": init_dir,
                  "provenance": provenance or {}}
        check_sharding(self.sharding, self.processes)
        # Training runs alone in its run (sft -> grpo -> evaluation is a chain): every core this step
        # may use, passed as OMP_NUM_THREADS & co, which torch reads when it starts, split over the ranks.
        threads = max(1, step_thread_budget(context) // self.processes)
        context.log.info(f"training {stage} on {self.processes} process(es) with {threads} torch thread(s) each")
        with tempfile.TemporaryDirectory(prefix="rhythm-launch-") as scratch:
            error_file = Path(scratch) / "error.txt"
            launch = {ERROR_FILE_VAR: str(error_file), **({SHARDING_VAR: self.sharding} if self.sharding else {})}
            try:
                dg.PipesSubprocessClient(env={**thread_env(threads), **child_env(), **launch}).run(
                    context=context, command=launch_command("rhythm_pipeline.train_entry", [], self.processes),
                    extras=extras, env=env or {},
                )
            except Exception as exc:  # Pipes' execution error: the launcher failed
                if error_file.exists():  # a rank failed: its error, in one line
                    raise dg.Failure(f"training {stage} failed: {error_file.read_text().strip()}") from exc
                raise

    def play(self, context, *, config: dict, checkpoints: dict[str, str], out_dir: str, threads: int) -> dict:
        """Play the students (name -> model folder) on one condition's evaluation seeds (`config`:
        condition, seeds, sampling) into `out_dir`; returns {"files": their manifest entries, "hf_job":
        the job's summary with its cost, or None}."""
        if self.kind == "local":
            return self._play_local(context, config, checkpoints, out_dir, threads)
        if self.kind == "hf_jobs":
            return self._play_hf_jobs(context, config, checkpoints, out_dir, threads)
        raise ValueError(f"unknown compute backend {self.kind!r}; allowed: local, hf_jobs")

    def _play_local(self, context, config, checkpoints, out_dir, threads) -> dict:
        import sys

        from rhythm_core.compute.threads import thread_env
        from rhythm_core.processes import child_env

        if self.play_workers < 1:
            raise ValueError(f"ComputeResource.play_workers must be at least 1, got {self.play_workers}")
        if self.play_workers > 1:
            return self._play_sharded(context, config, checkpoints, out_dir, threads)
        extras = {"config": config, "checkpoints": checkpoints, "out": out_dir, "threads": threads}
        invocation = dg.PipesSubprocessClient(env={**thread_env(threads), **child_env()}).run(
            context=context, command=[sys.executable, "-m", "rhythm_pipeline.play_entry"], extras=extras)
        return {"files": _played_files(invocation.get_custom_messages(),
                                       f"the evaluation subprocess for {config['condition']}"), "hf_job": None}

    def _play_sharded(self, context, config, checkpoints, out_dir, threads) -> dict:
        """The condition's seeds split over play_workers subprocesses, their files merged into `out_dir`."""
        import sys
        import tempfile

        from rhythm_core.evaluation.shards import merge_played, shard_configs, visible_gpus, worker_resources
        from rhythm_core.processes import child_env
        from rhythm_pipeline.defs.pipes_workers import PipesWorker, run_pipes_workers

        shards = shard_configs(config, self.play_workers)
        resources = worker_resources(len(shards), threads, visible_gpus())
        with tempfile.TemporaryDirectory(prefix=f"rhythm-play-{config['condition']}-") as tmp:
            folders = [str(Path(tmp) / f"worker-{index}") for index in range(len(shards))]
            workers = []
            for index, (shard, resource, folder) in enumerate(zip(shards, resources, folders)):
                name = f"play worker {index + 1}/{len(shards)} ({config['condition']} seeds {shard['seeds']})"
                workers.append(PipesWorker(name, env={**resource["env"], **child_env()}, extras={
                    "config": shard, "checkpoints": checkpoints, "out": folder, "threads": resource["threads"],
                    "worker": name}))
            context.log.info(f"playing {config['condition']} on {len(workers)} workers: "
                             + "; ".join(f"{w.name}, {w.extras['threads']} thread(s)" for w in workers))
            messages = run_pipes_workers(context, [sys.executable, "-m", "rhythm_pipeline.play_entry"], workers)
            played = [_played_files(m, worker.name) for m, worker in zip(messages, workers)]
            files = merge_played(folders, played, out_dir)
        return {"files": files, "hf_job": None}

    def _play_hf_jobs(self, context, config, checkpoints, out_dir, threads) -> dict:
        from functools import partial

        if self.play_workers != 1:
            context.log.warning(f"play_workers={self.play_workers} applies to the local backend: the Hugging Face "
                                "job plays every seed of the condition in one process")

        from huggingface_hub import snapshot_download

        from rhythm_core.compute.hf_jobs import run_play_job

        return run_play_job(config, checkpoints, out_dir, threads=threads, run=partial(self._hf_job, context),
                            download=partial(snapshot_download, token=self.token, endpoint=self.hf_endpoint))

    def _hf_job(self, context, stage: str, config: dict, **inputs) -> dict:
        """Run one stage as a Hugging Face job (rhythm_core.compute.hf_jobs.run_job)."""
        from pathlib import Path

        from huggingface_hub import HfApi

        import rhythm_core
        from rhythm_core.compute.hf_jobs import HFJobSpec, run_job

        spec = HFJobSpec(flavor=self.hf_flavor, timeout=self.hf_timeout, max_usd=self.hf_max_usd,
                         namespace=self.hf_namespace or os.environ.get("RHYTHM_HUB_NAMESPACE") or None,
                         image=self.hf_image)
        job = run_job(stage, config, **inputs, api=HfApi(token=self.token, endpoint=self.hf_endpoint), spec=spec,
                      token=self.token, log=context.log.info, project_root=Path(rhythm_core.__file__).parents[1])
        context.log.info(f"HF job {job['job_id']} finished: {job['hub_repo_id']}@{job['hub_revision']}")
        return job

    def _train_hf_jobs(self, context, stage, config, dataset_dir, out_dir, init_dir, provenance) -> None:
        from functools import partial

        from huggingface_hub import snapshot_download

        from rhythm_core.compute.hf_jobs import fetch_training_result

        job = self._hf_job(context, stage, config, dataset_dir=dataset_dir, init_dir=init_dir, provenance=provenance)
        # The lineage keeps a local copy; the Hub repo and revision stay in the metadata.
        fetch_training_result(job, out_dir, download=partial(snapshot_download, token=self.token, endpoint=self.hf_endpoint))


def _played_files(messages, who: str) -> dict:
    """The files a play subprocess reported as its last custom message (a Failure naming `who` if none)."""
    if not messages or "files" not in messages[-1]:
        raise dg.Failure(f"{who} reported no files")
    return messages[-1]["files"]


@dg.definitions
def resources() -> dg.Definitions:
    # Configurable at launch: a job or the launchpad can switch the teacher and the compute backend. Nothing
    # here reads the environment: each resource reads its variables when a run uses it.
    artifacts = artifact_store_from_env()
    return dg.Definitions(
        resources={
            "artifacts": artifacts,
            "io_manager": StoreIOManager(artifacts=artifacts),
            "teacher": TeacherResource.configure_at_launch(),
            "hub": HubResource(),
            "compute": ComputeResource.configure_at_launch(),
        }
    )
