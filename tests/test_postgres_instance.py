"""deploy/postgres/dagster.yaml against a real PostgreSQL server: the data half materializes on an
instance stored in PostgreSQL, and a fresh instance (and plain SQL) reads the run and its events back.

The test starts its own throwaway server on 127.0.0.1 from Debian's `postgresql` package (CI installs
it). Without the server binaries it fails; RHYTHM_SKIP_POSTGRES=1 skips it instead.
"""

import glob
import json
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg
import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
DEPLOY_CONFIG = REPO / "deploy" / "postgres" / "dagster.yaml"
DATA_ASSETS = ("teacher_trajectories", "reeval_report", "sft_dataset")
PG_USER = "dagster"
PG_DB = "rhythm_dagster"


def _pg_bindir() -> Path:
    """The newest PostgreSQL server installation under /usr/lib/postgresql (Debian's layout)."""
    found = sorted((Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/initdb")),
                   key=lambda d: float(d.parent.name) if d.parent.name.replace(".", "").isdigit() else 0.0)
    if not found:
        pytest.fail("PostgreSQL server binaries not found under /usr/lib/postgresql/<version>/bin: run "
                    "`apt-get install postgresql` (CI does), or set RHYTHM_SKIP_POSTGRES=1 to skip this test")
    return found[-1]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Server:
    """One throwaway PostgreSQL cluster. As root it runs as the `postgres` OS user (the server refuses
    to run as root); as any other user it runs as that user."""

    def __init__(self):
        self.bindir = _pg_bindir()
        if os.geteuid() == 0:
            try:
                owner = pwd.getpwnam("postgres")
            except KeyError:
                pytest.fail("running as root but there is no `postgres` OS user to run the server as: "
                            "`apt-get install postgresql` creates it")
            runuser = shutil.which("runuser") or "/usr/sbin/runuser"
            self.prefix = [runuser, "-u", "postgres", "--"]
        else:
            owner, self.prefix = None, []
        # Not under pytest's tmp_path: that is private to the current user and the server must reach it.
        self.base = Path(tempfile.mkdtemp(prefix="rhythm-pg-"))
        self.base.chmod(0o755)
        self.data, self.sockdir = self.base / "data", self.base / "sock"
        self.sockdir.mkdir()
        self.password = secrets.token_hex(16)
        pwfile = self.base / "pwfile"
        pwfile.write_text(self.password + "\n")
        if owner is not None:
            for path in (self.base, self.sockdir, pwfile):
                os.chown(path, owner.pw_uid, owner.pw_gid)
        self.port = _free_port()
        self.log = self.base / "server.log"
        self.proc = None
        self.pwfile = pwfile

    def _run(self, tool: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run([*self.prefix, str(self.bindir / tool), *args], cwd=self.base, capture_output=True,
                              text=True, timeout=120, **kwargs)

    def _check(self, result: subprocess.CompletedProcess, what: str):
        assert result.returncode == 0, f"{what} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"

    def start(self):
        # Password (SCRAM) auth over TCP, so the password from DAGSTER_PG_PASSWORD is really used.
        self._check(self._run("initdb", "-D", str(self.data), "-U", PG_USER, f"--pwfile={self.pwfile}",
                              "--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8", "--no-sync"),
                    "initdb")
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [*self.prefix, str(self.bindir / "postgres"), "-D", str(self.data), "-k", str(self.sockdir),
                 "-p", str(self.port), "-h", "127.0.0.1", "-c", "fsync=off", "-c", "full_page_writes=off"],
                cwd=self.base, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"postgres exited with {self.proc.returncode}:\n{self.log.read_text()}")
            if self._run("pg_isready", "-h", "127.0.0.1", "-p", str(self.port), "-U", PG_USER).returncode == 0:
                break
            if time.monotonic() > deadline:
                pytest.fail(f"postgres did not become ready in 60 s:\n{self.log.read_text()}")
            time.sleep(0.2)
        self._check(self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", PG_USER, PG_DB,
                              env={**os.environ, "PGPASSWORD": self.password}), "createdb")

    def stop(self):
        try:
            if self.proc is not None and self.proc.poll() is None:
                self._run("pg_ctl", "-D", str(self.data), "stop", "-m", "fast", "-w")
                try:
                    self.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self.proc.kill()  # our own runuser/postgres process only
                    self.proc.wait(timeout=30)
        finally:
            shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture
def postgres_server(request):
    if os.environ.get("RHYTHM_SKIP_POSTGRES") == "1":
        pytest.skip("RHYTHM_SKIP_POSTGRES=1: PostgreSQL instance test skipped")
    server = _Server()
    request.addfinalizer(server.stop)  # registered before start, so a failed start still cleans up
    server.start()
    return server


@pytest.fixture
def postgres_home(postgres_server, tmp_path, monkeypatch):
    """A DAGSTER_HOME holding deploy/postgres/dagster.yaml itself, its env vars pointed at the server."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(DEPLOY_CONFIG, home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("DAGSTER_PG_USERNAME", PG_USER)
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", postgres_server.password)
    monkeypatch.setenv("DAGSTER_PG_HOST", "127.0.0.1")
    monkeypatch.setenv("DAGSTER_PG_PORT", str(postgres_server.port))
    monkeypatch.setenv("DAGSTER_PG_DB", PG_DB)
    monkeypatch.setenv("RHYTHM_ARTIFACTS", str(tmp_path / "artifacts"))
    return home


def test_data_half_on_postgres_instance(postgres_server, postgres_home, tmp_path):
    import psycopg2
    from dagster._core.run_coordinator import QueuedRunCoordinator
    from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage

    from rhythm_pipeline.definitions import defs

    assert postgres_server.password not in (postgres_home / "dagster.yaml").read_text()

    with dg.DagsterInstance.from_config(str(postgres_home)) as instance:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        assert isinstance(instance.event_log_storage, PostgresEventLogStorage)
        assert isinstance(instance.run_coordinator, QueuedRunCoordinator)
        instance.add_dynamic_partitions("teacher_shards", ["1000-1007"])
        result = defs.resolve_job_def("data_half").execute_in_process(instance=instance, partition_key="1000-1007")
        assert result.success
        run_id = result.run_id

    # A new instance object, found through DAGSTER_HOME, reads everything back from the database.
    with dg.DagsterInstance.get() as fresh:
        assert fresh is not instance and isinstance(fresh.event_log_storage, PostgresEventLogStorage)
        run = fresh.get_run_by_id(run_id)
        assert run is not None and run.status == dg.DagsterRunStatus.SUCCESS and run.job_name == "data_half"
        for name in DATA_ASSETS:
            event = fresh.get_latest_materialization_event(dg.AssetKey(name))
            assert event is not None and event.run_id == run_id, name
        meta = fresh.get_latest_materialization_event(dg.AssetKey("sft_dataset")).asset_materialization.metadata
        assert meta["examples_train"].value > 0
        traj = fresh.get_latest_materialization_event(dg.AssetKey("teacher_trajectories")).asset_materialization
        assert traj.metadata["episodes"].value == 8
        artifact = Path(traj.metadata["artifact_path"].value)
        assert (tmp_path / "artifacts") in artifact.parents and artifact.exists()  # RHYTHM_ARTIFACTS, not the repo
        checks = [r.event_log_entry.dagster_event.event_specific_data for r in fresh.get_records_for_run(
            run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION).records]
        assert checks and all(c.passed for c in checks)

    # And the rows are really in PostgreSQL.
    with psycopg2.connect(host="127.0.0.1", port=postgres_server.port, user=PG_USER,
                          password=postgres_server.password, dbname=PG_DB) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM runs WHERE run_id = %s AND status = 'SUCCESS'", (run_id,))
        assert cur.fetchone()[0] == 1
        cur.execute("SELECT count(*) FROM event_logs WHERE run_id = %s", (run_id,))
        assert cur.fetchone()[0] > 0
        cur.execute("SELECT count(*) FROM event_logs WHERE run_id = %s AND dagster_event_type = "
                    "'ASSET_MATERIALIZATION'", (run_id,))
        assert cur.fetchone()[0] == len(DATA_ASSETS)
    conn.close()

    # Two runs on this instance that both want the GPU pool (one slot, deploy/postgres/dagster.yaml): one SFT
    # step each, started together from two processes; the second waits for the first's slot. The pool's limit
    # is set first, as deploy/README.md says to (Dagster creates it on a first claim otherwise, and two first
    # claims in the same instant race there).
    dagster = Path(sys.executable).parent / "dagster"
    subprocess.run([str(dagster), "instance", "concurrency", "set", "gpu", "1"], check=True, capture_output=True,
                   timeout=120)
    runs = [subprocess.Popen([sys.executable, "-c", ONE_SFT_STEP, str(seed)], cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow-{seed}.db"})
            for seed in (1, 2)]
    outcomes = []
    for run in runs:
        out, err = run.communicate(timeout=900)
        assert run.returncode == 0, err[-3000:]
        outcomes.append(json.loads(out.strip().splitlines()[-1]))
    assert all(o["success"] for o in outcomes)
    spans, blocked = [], []
    with dg.DagsterInstance.get() as instance:
        for outcome in outcomes:
            logs = [e for e in instance.all_logs(outcome["run_id"]) if e.step_key == "sft_checkpoint"]
            kinds = {e.dagster_event.event_type_value: e.timestamp for e in logs if e.dagster_event}
            spans.append((kinds["STEP_START"], kinds["STEP_SUCCESS"]))
            blocked += [e for e in logs if "blocked by limit for pool gpu" in (e.user_message or "")]
    first, second = sorted(spans)
    assert first[1] <= second[0], f"both runs held the gpu pool at once: {spans}"
    assert blocked  # one run waited for the other's slot


ONE_SFT_STEP = r"""
import json, sys, dagster as dg
from rhythm_pipeline.definitions import defs
config = {"ops": {"sft_checkpoint": {"config": {"max_steps": 1, "short_context_steps": 0, "report_to": "none",
                                                "seed": int(sys.argv[1])}}}}
result = defs.resolve_job_def("training").execute_in_process(
    instance=dg.DagsterInstance.get(), run_config=config, asset_selection=[dg.AssetKey("sft_checkpoint")])
print(json.dumps({"run_id": result.run_id, "success": result.success}))
"""
