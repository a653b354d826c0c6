"""A real local Hugging Face Hub + Jobs server for tests (stdlib only), driven by the real `HfApi`.

    with serve() as server:                     # or the `hub_server` pytest fixture
        api = HfApi(endpoint=server.url, token=server.token)
        api.create_repo("alice/data", repo_type="dataset", private=True, exist_ok=True)
        commit = api.upload_folder(repo_id="alice/data", folder_path=folder, repo_type="dataset")
        snapshot_download("alice/data", repo_type="dataset", revision=commit.oid, local_dir=out,
                          token=server.token, endpoint=server.url)
        job = api.run_uv_job("job.py", script_args=["--x=1"], secrets={"HF_TOKEN": server.token},
                             namespace=server.user)
        for line in api.fetch_job_logs(job_id=job.id, namespace=server.user, follow=True): ...

It listens on 127.0.0.1 (a free port) and speaks the part of the Hub HTTP API that huggingface_hub
2.4.0 uses for the calls above; every URL, method, header and JSON shape below was read off that
client's source (hf_api.py, _commit_api.py, _upload_pipeline.py, _snapshot_download.py,
file_download.py, _jobs_api.py, utils/_http.py, utils/_xet.py) and off the Xet protocol spec the
bundled hf_xet 1.8.0 client speaks.

Endpoints (all /api routes need `Authorization: Bearer <token>`; a wrong token gets the Hub's 401
"Invalid credentials in Authorization header"):

    GET  /api/whoami-v2
    GET  /api/agent-harnesses                              huggingface_hub's agent-detection registry (empty)
    POST /api/repos/create                                 {"name", "organization", "type", "visibility"}
    DELETE /api/repos/delete
    GET  /api/{type}s/{ns}/{name}[/revision/{rev}]         repo info with siblings and sha
    GET  /api/{type}s/{ns}/{name}/tree/{rev}[/{path}]      ?recursive=&expand= (list_repo_files/tree)
    POST /api/{type}s/{ns}/{name}/preupload/{rev}          upload modes: "regular" (or "lfs", see lfs_threshold)
    POST /api/{type}s/{ns}/{name}/commit/{rev}             NDJSON: header, file, lfsFile, deletedFile, deletedFolder
    GET  /api/{type}s/{ns}/{name}/xet-{read|write}-token/{rev}
    HEAD|GET /[{type}s/]{ns}/{name}/resolve/{rev}/{path}   X-Repo-Commit, ETag, Content-Length, Range
    HEAD|GET /cdn/{sha256}                                 the "CDN" that redirect_downloads=True sends to
    POST /api/buckets/{ns}/{name}, GET /api/buckets/{ns}/{name}
    GET  /api/buckets/{ns}/{name}/xet-{read|write}-token
    POST /api/buckets/{ns}/{name}/batch                    NDJSON addFile / deleteFile (how run_uv_job ships scripts)
    GET  /cas/v1/chunks/{prefix}/{hash}                    global dedup: always 404 (nothing to dedup against)
    POST /cas/v1/xorb-grants/{prefix}/{hash}               404: hf_xet falls back to the direct upload below
    POST /cas/v1/xorbs/{prefix}/{hash}                     xorb: chunks (None / LZ4 frame / BG4+LZ4) are decoded
    POST /cas/v1/shards, /cas/v2/shards                    shard: file reconstructions (v2 answers NDJSON frames)
    POST /v1/telemetry                                     hf_xet's upload summary, accepted and dropped
    GET  /api/jobs/hardware
    POST /api/jobs/{ns}                                    the job spec run_job / run_uv_job send
    GET  /api/jobs/{ns}                                    ?stage=&label=k=v
    GET  /api/jobs/{ns}/{id}
    GET  /api/jobs/{ns}/{id}/logs                          SSE `data: {"data": line, "timestamp": ...}`, ?tail=
    GET  /api/jobs/{ns}/{id}/metrics                       406 (no metrics; the client tolerates it)
    POST /api/jobs/{ns}/{id}/cancel

How 2.4.0 ships a local uv script: `run_uv_job` creates the bucket `{ns}/jobs-artifacts`, uploads the
script (and any script argument naming a local file) into `{timestamp}-{hex}/` there with hf_xet, and
submits `["uv", "run", "--with", dep, "--python", v, "/data/<script>", *args]` with a bucket volume
mounted at /data. The server decodes the xorbs and shards hf_xet uploads, so it knows the script's
bytes, copies the volume into the job's folder and rewrites `/data/...` arguments to that folder.

A job runs as a LOCAL process: `<job python> <script> <args>` (no `uv`; `--with` dependencies are
recorded, not installed), in a fresh working directory, its stdout+stderr lines becoming its log.
Its environment is small and clean: PATH (without any directory holding `uv`), HOME/TMPDIR/HF_HOME in
the job folder, the job's env and secrets, HF_ENDPOINT=<server url> (HF_HUB_OFFLINE unset),
PYTHONUNBUFFERED=1, PIP_NO_DEPS=1, PIP_NO_INDEX=1, PIP_DISABLE_PIP_VERSION_CHECK=1. By default the job
python is a throwaway venv per job (`python -m venv --without-pip`, from the base interpreter) whose
site-packages holds a .pth naming this process's site-packages: every installed package (pip
included) imports, the editable install's finder is not activated, and `python -m pip install
x.whl` installs into the throwaway venv only. Exit 0 -> COMPLETED; non-zero -> ERROR "Job failed
with exit code: N"; past its timeout (timeoutSeconds, default 30 min as on the Hub) the process group
is killed -> ERROR "Job timeout"; cancel -> process group killed -> CANCELED.

Knobs (constructor arguments; also plain attributes, read when used):

    token, user, orgs          the one valid token, the user it belongs to, org namespaces it may use
    job_python                 None: a throwaway venv per job (above); a path: run jobs with that python
                               (then a job's `pip install` goes into that python's environment)
    schedule_delay=s           each job stays SCHEDULING this long before it starts
    job_timeout_s=s            every job's timeout, whatever it asked for (a quick timeout in tests)
    cancel_jobs_after_s=s      every job is canceled this long after it starts (as if from the Hub UI)
    break_log_stream_after=N   a log stream of a running job is cut (connection closed, no final chunk)
                               after N log lines; the first `break_log_stream_times` streams of each job
                               (None: all, and the client gives up after its 5 retries, ~25 s). The client
                               reconnects after ~1 s and resumes where it was...
    log_stream_error_status=c  ...unless this is set: log requests of a job whose stream was cut get
                               HTTP c (e.g. 503) while it runs, so fetch_job_logs(follow=True) raises.
                               Once the job has ended its whole log reads again.
    lfs_threshold=n            files of n bytes or more get upload mode "lfs" (uploaded with hf_xet,
                               committed as lfsFile); None: every file is "regular" (no LFS)
    redirect_downloads=True    /resolve answers 302 to /cdn/<sha256> on http://localhost:<port> (another
                               origin, like the Hub's CDN) with X-Linked-Etag / X-Linked-Size
    keepalive_s                seconds between ": keep-alive" comments of an idle log stream (Hub: 30)

Inspect: `server.requests` (RequestInfo: method, path, query, headers with the token masked, parsed
body with secret values masked, route name, status; `server.requests_to("commit")` filters by route),
`server.repos` ((type, id) -> Repo with its commits, each a full snapshot: `server.files(type, id,
revision)`), `server.buckets` (id -> files), `server.jobs` (id -> JobRecord: command, arguments, spec,
argv, env_keys, secret_keys (never values), stage, message, lines, exit_code, pid, exact durations),
`server.wait_job(id)` (until it ended, server side).

Not covered: pull requests / create_pr, branches and tags other than "main", copies (CommitOperationCopy),
the LFS batch API (only the hf_xet path of "lfs" files), xet downloads (files are always served over
plain HTTP: no X-Xet-Hash), pagination, gated repos, Spaces runtime, scheduled jobs, job metrics,
docker images (the image is recorded, the script runs on the local python), `uv run` of URLs or
commands, installing `--with` dependencies, GPU flavors' hardware (all run on this machine).
"""

from __future__ import annotations

import base64
import contextlib
import fnmatch
import hashlib
import json
import os
import re
import secrets as _secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

DEFAULT_TOKEN = "hf_" + "hubServerTestToken0123456789abcd"  # built, so no token-shaped literal is committed
DEFAULT_USER = "alice"
DEFAULT_JOB_TIMEOUT_S = 30 * 60  # the Hub's default when a job gives no timeout
INVALID_CREDENTIALS = "Invalid credentials in Authorization header"  # the Hub's 401 message
TIMEOUT_MESSAGE = "Job timeout"
DEFAULT_UV_IMAGE = "ghcr.io/astral-sh/uv:python3.12-bookworm"
TERMINAL = ("COMPLETED", "CANCELED", "ERROR", "DELETED")
REPO_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space", "kernels": "kernel"}
URL_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/", "kernel": "kernels/"}
_DISCONNECTS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)


def _flavor(name, pretty, cpu, ram, usd_per_hour, accelerator=None, storage=None) -> dict:
    # The Jobs API prices per minute: unitCostMicroUSD as the Hub gives it (cpu-basic: 167), unitCostUSD the
    # per-hour price / 60 unrounded (the Hub rounds it to the micro-dollar: 0.000167), so that
    # unitCostUSD * 60 gives back the published per-hour price.
    entry = {"name": name, "prettyName": pretty, "cpu": cpu, "ram": ram, "accelerator": accelerator,
             "unitCostMicroUSD": round(usd_per_hour / 60 * 1_000_000), "unitCostUSD": usd_per_hour / 60,
             "unitLabel": "minute"}
    if storage:
        entry["ephemeralStorage"] = storage
    return entry


def _gpu(model, quantity, vram):
    return {"type": "gpu", "model": model, "quantity": str(quantity), "vram": vram, "manufacturer": "Nvidia"}


# Prices: the Hub's per-hour prices (huggingface.co/docs/hub/jobs-pricing), divided by 60.
HARDWARE = [
    _flavor("cpu-basic", "CPU Basic", "2 vCPU", "16 GB", 0.01, storage="20 GB"),
    _flavor("cpu-upgrade", "CPU Upgrade", "8 vCPU", "32 GB", 0.03),
    _flavor("t4-small", "Nvidia T4 - small", "4 vCPU", "15 GB", 0.40, _gpu("T4", 1, "16 GB")),
    _flavor("t4-medium", "Nvidia T4 - medium", "8 vCPU", "30 GB", 0.60, _gpu("T4", 1, "16 GB")),
    _flavor("l4x1", "1x Nvidia L4", "8 vCPU", "30 GB", 0.80, _gpu("L4", 1, "24 GB")),
    _flavor("a10g-small", "Nvidia A10G - small", "4 vCPU", "15 GB", 1.00, _gpu("A10G", 1, "24 GB")),
    _flavor("a10g-large", "Nvidia A10G - large", "12 vCPU", "46 GB", 1.50, _gpu("A10G", 1, "24 GB")),
    _flavor("a10g-largex2", "2x Nvidia A10G - large", "24 vCPU", "92 GB", 3.00, _gpu("A10G", 2, "48 GB")),
    _flavor("a100-large", "Nvidia A100 - large", "12 vCPU", "142 GB", 2.50, _gpu("A100", 1, "80 GB")),
    _flavor("h200", "1x Nvidia H200", "23 vCPU", "256 GB", 5.00, _gpu("H200", 1, "141 GB")),
]

GITATTRIBUTES = "".join(f"{pattern} filter=lfs diff=lfs merge=lfs -text\n" for pattern in (
    "*.7z", "*.arrow", "*.bin", "*.bz2", "*.ckpt", "*.gz", "*.h5", "*.joblib", "*.model", "*.msgpack", "*.npy",
    "*.npz", "*.onnx", "*.parquet", "*.pb", "*.pickle", "*.pkl", "*.pt", "*.pth", "*.safetensors", "*.tar",
    "*.tflite", "*.wasm", "*.xz", "*.zip", "*.zst", "*tfevents*")).encode()


def git_blob_oid(data: bytes) -> str:
    """The git sha1 of a blob (what `huggingface_hub.utils.sha.git_hash` computes)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def iso(ts: float) -> str:
    """A Hub timestamp: 2025-07-22T16:06:25.079Z."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


# ---------------------------------------------------------------------------------------------
# Xet: the formats hf_xet uploads (https://huggingface.co/docs/xet: xorb.md, shard.md, api.md)


def xet_hash_hex(raw: bytes) -> str:
    """A Xet hash as the API writes it: each 8-byte group as a little-endian u64, in hex."""
    return "".join(raw[i:i + 8][::-1].hex() for i in range(0, 32, 8))


def _lz4_length(src: bytes, i: int, length: int) -> tuple[int, int]:
    """A token's 4-bit length, extended by the 255-runs that follow when it is 15: (length, next index)."""
    if length == 15:
        while True:
            extra = src[i]
            i += 1
            length += extra
            if extra != 255:
                break
    return length, i


def _lz4_block(src: bytes, out: bytearray) -> None:
    """Decode one LZ4 block (the block format), appending to `out` (which holds earlier history)."""
    i, n = 0, len(src)
    while i < n:
        token = src[i]
        length, i = _lz4_length(src, i + 1, token >> 4)
        out += src[i:i + length]
        i += length
        if i >= n:
            break
        offset = src[i] | src[i + 1] << 8
        length, i = _lz4_length(src, i + 2, token & 15)
        length += 4
        start = len(out) - offset
        if offset == 0 or start < 0:
            raise ValueError("LZ4: bad match offset")
        if offset >= length:
            out += out[start:start + length]
        else:  # overlapping match: the last `offset` bytes repeat
            pattern = bytes(out[start:])
            out += (pattern * (length // offset + 1))[:length]


def lz4_decompress(data: bytes) -> bytes:
    """LZ4: the frame format (what hf_xet's lz4_flex FrameEncoder writes) or a bare block."""
    if data[:4] != b"\x04\x22\x4d\x18":
        out = bytearray()
        _lz4_block(data, out)
        return bytes(out)
    out, pos = bytearray(), 0
    while pos + 4 <= len(data):
        magic = int.from_bytes(data[pos:pos + 4], "little")
        if 0x184D2A50 <= magic <= 0x184D2A5F:  # skippable frame
            pos += 8 + int.from_bytes(data[pos + 4:pos + 8], "little")
            continue
        if magic != 0x184D2204:
            raise ValueError("LZ4: bad frame magic")
        flags = data[pos + 4]
        pos += 6 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0) + 1  # FLG BD [size] [dict] HC
        while True:
            size = int.from_bytes(data[pos:pos + 4], "little")
            pos += 4
            if size == 0:
                break
            raw, size = size & 0x80000000, size & 0x7FFFFFFF
            block = data[pos:pos + size]
            pos += size
            if raw:
                out += block
            else:
                _lz4_block(block, out)
            if flags & 0x10:  # block checksum
                pos += 4
        if flags & 0x04:  # content checksum
            pos += 4
    return bytes(out)


def _bg4_ungroup(grouped: bytes) -> bytes:
    n = len(grouped)
    out, pos = bytearray(n), 0
    for k in range(4):
        size = len(range(k, n, 4))
        out[k::4] = grouped[pos:pos + size]
        pos += size
    return bytes(out)


def _xorb_chunks(data: bytes, end: int) -> list[bytes] | None:
    chunks, pos = [], 0
    while pos < end:
        if end - pos < 8:
            return None
        version, scheme = data[pos], data[pos + 4]
        csize = int.from_bytes(data[pos + 1:pos + 4], "little")
        usize = int.from_bytes(data[pos + 5:pos + 8], "little")
        if version != 0 or scheme not in (0, 1, 2) or pos + 8 + csize > end:
            return None
        payload = data[pos + 8:pos + 8 + csize]
        pos += 8 + csize
        try:
            chunk = payload if scheme == 0 else lz4_decompress(payload)
        except (ValueError, IndexError):
            return None
        if scheme == 2:
            chunk = _bg4_ungroup(chunk)
        if len(chunk) != usize:
            return None
        chunks.append(chunk)
    return chunks


def parse_xorb(data: bytes) -> list[bytes]:
    """The decompressed chunks of a serialized xorb (with or without its XorbObjectInfo footer)."""
    chunks = _xorb_chunks(data, len(data))
    if chunks is None and len(data) >= 4:
        end = len(data) - 4 - int.from_bytes(data[-4:], "little")
        chunks = _xorb_chunks(data, end) if end >= 0 else None
    if chunks is None:
        raise ValueError("not a serialized xorb")
    return chunks


def parse_shard(data: bytes) -> list[tuple[str, list[tuple[str, int, int, int]]]]:
    """The file reconstructions of an uploaded shard: [(file hash, [(xorb hash, start, end, bytes)])]."""
    if len(data) < 48 or struct.unpack_from("<Q", data, 32)[0] != 2:
        raise ValueError("not a version 2 shard")
    files, pos = [], 48
    while True:
        file_hash = data[pos:pos + 32]
        if len(file_hash) < 32:
            raise ValueError("shard: no file info bookend")
        flags, count = struct.unpack_from("<II", data, pos + 32)
        pos += 48
        if file_hash == b"\xff" * 32:
            return files
        terms = []
        for _ in range(count):
            _cas_flags, size, start, end = struct.unpack_from("<IIII", data, pos + 32)
            terms.append((xet_hash_hex(data[pos:pos + 32]), start, end, size))
            pos += 48
        if flags & 0x80000000:  # verification entries
            pos += 48 * count
        if flags & 0x40000000:  # metadata extension (sha256)
            pos += 48
        files.append((xet_hash_hex(file_hash), terms))


# ---------------------------------------------------------------------------------------------
# State


@dataclass
class RequestInfo:
    """One request as the server saw it (the token masked, secret values masked)."""

    index: int
    time: float
    method: str
    path: str  # without the query, still percent-encoded
    query: dict[str, list[str]]
    headers: dict[str, str]  # names lower-cased
    body: object  # JSON, a list of NDJSON objects, or {"bytes": n} for binary bodies; None if empty
    route: str | None = None
    status: int | None = None


@dataclass
class Commit:
    oid: str
    parent: str | None
    message: str
    description: str
    files: dict[str, bytes]  # the full snapshot of the repo at this commit
    lfs: frozenset[str] = frozenset()  # paths stored as LFS
    time: float = field(default_factory=time.time)


@dataclass
class Repo:
    repo_type: str
    repo_id: str
    private: bool
    commits: list[Commit] = field(default_factory=list)
    created_at: float = field(default_factory=time.time)

    @property
    def head(self) -> Commit:
        return self.commits[-1]

    def commit(self, revision: str | None) -> Commit | None:
        """The commit a revision names: "main" (or None), a full oid or an oid prefix of 7+ hex."""
        if revision in (None, "", "main", "refs/heads/main"):
            return self.head
        matches = [c for c in self.commits if c.oid == revision
                   or (len(revision) >= 7 and re.fullmatch(r"[0-9a-f]+", revision) and c.oid.startswith(revision))]
        return matches[-1] if matches else None

    def files(self, revision: str | None = None) -> dict[str, bytes]:
        commit = self.commit(revision)
        if commit is None:
            raise KeyError(f"{self.repo_type} {self.repo_id} has no revision {revision!r}")
        return dict(commit.files)


@dataclass
class LogLine:
    time: float
    text: str

    @property
    def timestamp(self) -> str:
        return iso(self.time)


@dataclass
class JobRecord:
    """A submitted job: what was asked, how it ran and what it printed."""

    id: str
    namespace: str
    spec: dict  # the submitted job spec, secret values masked
    command: list[str]
    arguments: list[str]
    environment: dict[str, str]
    secret_keys: list[str]
    flavor: str
    labels: dict[str, str] | None
    volumes: list[dict]
    timeout_s: float
    created_at: float = field(default_factory=time.time)
    stage: str = "SCHEDULING"
    message: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    log: list[LogLine] = field(default_factory=list)
    exit_code: int | None = None
    argv: list[str] | None = None  # the local command that ran
    uv_with: list[str] = field(default_factory=list)  # `uv run --with` dependencies (recorded, not installed)
    python_request: str | None = None  # `uv run --python`
    env_keys: list[str] = field(default_factory=list)  # the job process's environment variable names
    workdir: Path | None = None
    pid: int | None = None
    end_reason: str | None = None  # "canceled" / "timeout" / "stopped" while it ends
    streams_cut: int = 0
    _secret_values: dict[str, str] = field(default_factory=dict, repr=False)
    _process: subprocess.Popen | None = field(default=None, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    @property
    def done(self) -> bool:
        return self.stage in TERMINAL

    @property
    def lines(self) -> list[str]:
        """The log lines, without the "===== Job started" banner (as fetch_job_logs yields them)."""
        return [line.text for line in self.log if not line.text.startswith("===== Job started")]

    @property
    def durations(self) -> dict[str, float | None]:
        """Exact durations in seconds (the API answers them as whole seconds)."""
        now = self.finished_at or time.time()
        started = self.started_at
        return {"scheduling": (started - self.created_at) if started else None,
                "running": (now - started) if started else None, "total": now - self.created_at}

    def process_alive(self) -> bool:
        return self._process is not None and self._process.poll() is None


class JobSetupError(Exception):
    """The job cannot be started here; its message becomes the job's status message."""


class HubError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None, headers: dict | None = None,
                 body: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.headers, self.body = status, message, code, headers or {}, body


# ---------------------------------------------------------------------------------------------
# HTTP plumbing


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "FakeHub/1.0"
    timeout = 30  # an idle keep-alive connection is closed after this long
    disable_nagle_algorithm = True

    def log_message(self, format, *args):
        pass

    def setup(self):
        super().setup()
        self.server.owner._connections.add(self.connection)

    def finish(self):
        with contextlib.suppress(OSError):
            super().finish()
        self.server.owner._connections.discard(self.connection)

    def handle(self):
        with contextlib.suppress(*_DISCONNECTS, OSError):
            super().handle()

    def do_GET(self):
        self.server.owner._serve(self, "GET")

    def do_HEAD(self):
        self.server.owner._serve(self, "HEAD")

    def do_POST(self):
        self.server.owner._serve(self, "POST")

    def do_PUT(self):
        self.server.owner._serve(self, "PUT")

    def do_DELETE(self):
        self.server.owner._serve(self, "DELETE")


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], (*_DISCONNECTS, OSError)):
            return
        super().handle_error(request, client_address)


class _Exchange:
    """One request being answered."""

    def __init__(self, handler: _Handler, info: RequestInfo, raw: bytes):
        self.h, self.info, self.raw = handler, info, raw
        self.sent = False

    def send(self, status: int, payload=None, headers: dict | None = None, content_type="application/json",
             head_only=False) -> None:
        if payload is None:
            data = b""
        elif isinstance(payload, bytes):
            data = payload
        else:
            data = json.dumps(payload).encode()
        self.info.status, self.sent = status, True
        try:
            self.h.send_response(status)
            self.h.send_header("Content-Type", content_type)
            if not (headers and "Content-Length" in headers):
                self.h.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.h.send_header(name, value)
            self.h.end_headers()
            if not head_only and self.h.command != "HEAD":
                self.h.wfile.write(data)
            self.h.wfile.flush()
        except _DISCONNECTS:
            self.h.close_connection = True

    def start_stream(self, status: int, content_type: str, headers: dict | None = None) -> None:
        self.info.status, self.sent = status, True
        self.h.send_response(status)
        self.h.send_header("Content-Type", content_type)
        self.h.send_header("Transfer-Encoding", "chunked")
        for name, value in (headers or {}).items():
            self.h.send_header(name, value)
        self.h.end_headers()
        self.h.wfile.flush()

    def chunk(self, data: bytes) -> None:
        if data:
            self.h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.h.wfile.flush()

    def end_stream(self) -> None:
        self.h.wfile.write(b"0\r\n\r\n")
        self.h.wfile.flush()

    def cut(self) -> None:
        """Drop the connection mid-body (no final chunk): the client sees an incomplete chunked read."""
        self.h.close_connection = True
        with contextlib.suppress(OSError):
            self.h.wfile.flush()
            self.h.connection.shutdown(socket.SHUT_RDWR)

    def error(self, status: int, message: str, code: str | None = None, headers: dict | None = None,
              body: dict | None = None) -> None:
        extra = {"X-Error-Message": message, **(headers or {})}
        if code:
            extra["X-Error-Code"] = code
        self.send(status, {"error": message, **(body or {})}, extra)


def _read_body(handler: _Handler) -> bytes:
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        data = bytearray()
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return bytes(data)
            data += handler.rfile.read(size)
            handler.rfile.readline()
    length = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(length) if length else b""


def _parse_body(raw: bytes, content_type: str):
    if not raw:
        return None
    if "ndjson" in content_type:
        with contextlib.suppress(ValueError):
            return [json.loads(line) for line in raw.decode().splitlines() if line.strip()]
    if "octet-stream" not in content_type:
        with contextlib.suppress(ValueError):
            return json.loads(raw)
    return {"bytes": len(raw)}


_ROUTES = [  # (name, methods, pattern on the percent-encoded path)
    ("whoami", ("GET",), r"/api/whoami-v2"),
    ("agent_harnesses", ("GET",), r"/api/agent-harnesses"),
    ("create_repo", ("POST",), r"/api/repos/create"),
    ("delete_repo", ("DELETE",), r"/api/repos/delete"),
    ("hardware", ("GET",), r"/api/jobs/hardware"),
    ("create_job", ("POST",), r"/api/jobs/(?P<ns>[^/]+)"),
    ("list_jobs", ("GET",), r"/api/jobs/(?P<ns>[^/]+)"),
    ("job", ("GET",), r"/api/jobs/(?P<ns>[^/]+)/(?P<job>[^/]+)"),
    ("job_logs", ("GET",), r"/api/jobs/(?P<ns>[^/]+)/(?P<job>[^/]+)/logs"),
    ("job_metrics", ("GET",), r"/api/jobs/(?P<ns>[^/]+)/(?P<job>[^/]+)/metrics"),
    ("cancel_job", ("POST",), r"/api/jobs/(?P<ns>[^/]+)/(?P<job>[^/]+)/cancel"),
    ("bucket_xet_token", ("GET",), r"/api/buckets/(?P<ns>[^/]+)/(?P<name>[^/]+)/xet-(?P<kind>read|write)-token"),
    ("bucket_batch", ("POST",), r"/api/buckets/(?P<ns>[^/]+)/(?P<name>[^/]+)/batch"),
    ("create_bucket", ("POST",), r"/api/buckets/(?P<ns>[^/]+)/(?P<name>[^/]+)"),
    ("bucket_info", ("GET",), r"/api/buckets/(?P<ns>[^/]+)/(?P<name>[^/]+)"),
    ("repo_info", ("GET",), r"/api/(?P<types>models|datasets|spaces|kernels)/(?P<ns>[^/]+)/(?P<name>[^/]+)"
                            r"(?:/revision/(?P<rev>[^/]+))?"),
    ("tree", ("GET",), r"/api/(?P<types>models|datasets|spaces|kernels)/(?P<ns>[^/]+)/(?P<name>[^/]+)"
                       r"/tree/(?P<rev>[^/]+)(?:/(?P<path>.+))?"),
    ("preupload", ("POST",), r"/api/(?P<types>models|datasets|spaces|kernels)/(?P<ns>[^/]+)/(?P<name>[^/]+)"
                             r"/preupload/(?P<rev>[^/]+)"),
    ("commit", ("POST",), r"/api/(?P<types>models|datasets|spaces|kernels)/(?P<ns>[^/]+)/(?P<name>[^/]+)"
                          r"/commit/(?P<rev>[^/]+)"),
    ("repo_xet_token", ("GET",), r"/api/(?P<types>models|datasets|spaces|kernels)/(?P<ns>[^/]+)/(?P<name>[^/]+)"
                                 r"/xet-(?P<kind>read|write)-token(?:/(?P<rev>[^/]+))?"),
    ("cas_dedup", ("GET",), r"/cas/v1/chunks/(?P<prefix>[^/]+)/(?P<hash>[0-9a-f]{64})"),
    ("cas_grant", ("POST",), r"/cas/v1/xorb-grants/(?P<prefix>[^/]+)/(?P<hash>[0-9a-f]{64})"),
    ("cas_xorb", ("POST",), r"/cas/v1/xorbs/(?P<prefix>[^/]+)/(?P<hash>[0-9a-f]{64})"),
    ("cas_shard", ("POST",), r"/cas/(?P<version>v1|v2)/shards"),
    ("telemetry", ("POST",), r"(?:/cas)?/v1/telemetry"),
    ("cdn", ("GET", "HEAD"), r"/cdn/(?P<sha>[0-9a-f]{64})"),
    ("resolve", ("GET", "HEAD"), r"/(?:(?P<types>datasets|spaces|kernels)/)?(?P<ns>[^/]+)/(?P<name>[^/]+)"
                                 r"/resolve/(?P<rev>[^/]+)/(?P<path>.+)"),
]
_COMPILED = [(name, methods, re.compile(pattern)) for name, methods, pattern in _ROUTES]


def _route(method: str, path: str) -> tuple[str | None, dict, bool]:
    """(route name, its unquoted groups, whether the path exists for another method)."""
    other = False
    for name, methods, regex in _COMPILED:
        match = regex.fullmatch(path)
        if match:
            if method in methods:
                return name, {k: unquote(v) for k, v in match.groupdict().items() if v is not None}, False
            other = True
    return None, {}, other


# ---------------------------------------------------------------------------------------------
# The server


class HubServer:
    """The server; start()/stop() or use it as a context manager."""

    def __init__(self, *, token: str = DEFAULT_TOKEN, user: str = DEFAULT_USER, orgs=(),
                 job_python: str | os.PathLike | None = None, schedule_delay: float = 0.0,
                 job_timeout_s: float | None = None, cancel_jobs_after_s: float | None = None,
                 break_log_stream_after: int | None = None, break_log_stream_times: int | None = 1,
                 log_stream_error_status: int | None = None, lfs_threshold: int | None = None,
                 redirect_downloads: bool = False, keepalive_s: float = 30.0, kill_grace_s: float = 1.0,
                 root: str | os.PathLike | None = None, drop_log_lines_with: str | None = None):
        self.token = token
        self.drop_log_lines_with = drop_log_lines_with  # a job's lines holding this never reach its log
        self.user = user
        self.orgs = tuple(orgs)
        self.user_id = hashlib.sha1(user.encode()).hexdigest()[:24]
        self.job_python = None if job_python is None else str(job_python)
        self.schedule_delay = schedule_delay
        self.job_timeout_s = job_timeout_s
        self.cancel_jobs_after_s = cancel_jobs_after_s
        self.break_log_stream_after = break_log_stream_after
        self.break_log_stream_times = break_log_stream_times
        self.log_stream_error_status = log_stream_error_status
        self.lfs_threshold = lfs_threshold
        self.redirect_downloads = redirect_downloads
        self.keepalive_s = keepalive_s
        self.kill_grace_s = kill_grace_s
        self.repos: dict[tuple[str, str], Repo] = {}
        self.buckets: dict[str, dict] = {}  # id -> {"private", "created_at", "files": {path: bytes}}
        self.jobs: dict[str, JobRecord] = {}
        self._xet_token = "xet_" + _secrets.token_hex(16)
        self._xorbs: dict[str, list[bytes]] = {}  # xorb hash -> decompressed chunks
        self._xet_files: dict[str, bytes] = {}  # xet file hash -> content
        self._lfs: dict[str, bytes] = {}  # sha256 -> content (files uploaded with hf_xet)
        self._requests: list[RequestInfo] = []
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)  # any job's stage or log changed
        self._closing = threading.Event()
        self._connections: set[socket.socket] = set()
        self._own_root = root is None
        self._root = Path(root) if root is not None else None
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._commit_counter = 0

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> HubServer:
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="hub-server-"))
        self._root.mkdir(parents=True, exist_ok=True)
        self._closing.clear()
        self._httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="hub-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving: every job's process group is killed, streams end, connections close."""
        self._closing.set()
        with self._changed:
            self._changed.notify_all()
        for job in list(self.jobs.values()):
            self._end_job(job, "stopped")
        for job in list(self.jobs.values()):
            if job._thread is not None:
                job._thread.join(timeout=10)
        if self._httpd is not None:
            self._httpd.shutdown()
            for conn in list(self._connections):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
            self._httpd.server_close()
            self._thread.join(timeout=5)
            self._httpd = None
        if self._own_root and self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def cas_url(self) -> str:
        return f"{self.url}/cas"

    # -- inspection --------------------------------------------------------------------------
    @property
    def requests(self) -> list[RequestInfo]:
        with self._lock:
            return list(self._requests)

    def requests_to(self, route: str) -> list[RequestInfo]:
        return [r for r in self.requests if r.route == route]

    def repo(self, repo_type: str, repo_id: str) -> Repo:
        return self.repos[(repo_type, repo_id)]

    def files(self, repo_type: str, repo_id: str, revision: str | None = None) -> dict[str, bytes]:
        """The files of a repo at a revision (None: main)."""
        return self.repo(repo_type, repo_id).files(revision)

    def wait_job(self, job_id: str, timeout: float = 30.0) -> JobRecord:
        """Wait until a job has ended (server side), then return its record."""
        deadline = time.monotonic() + timeout
        with self._changed:
            job = self.jobs[job_id]
            while not (job.done and (job._thread is None or not job._thread.is_alive())):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"job {job_id} is still {job.stage} after {timeout} s")
                self._changed.wait(min(remaining, 0.1))
        return job

    # -- serving -----------------------------------------------------------------------------
    def _serve(self, handler: _Handler, method: str) -> None:
        split = urlsplit(handler.path)
        raw = _read_body(handler)
        headers = {k.lower(): v for k, v in handler.headers.items()}
        masked = dict(headers)
        if "authorization" in masked:
            masked["authorization"] = re.sub(r"(?i)^(bearer)\s+.*$", r"\1 ***", masked["authorization"])
        body = _parse_body(raw, headers.get("content-type", ""))
        info = RequestInfo(index=-1, time=time.monotonic(), method=method, path=split.path,
                           query=parse_qs(split.query), headers=masked, body=body)
        name, params, other = _route(method, split.path)
        info.route = name
        if name == "create_job" and isinstance(body, dict) and isinstance(body.get("secrets"), dict):
            info.body = {**body, "secrets": {k: "***" for k in body["secrets"]}}
        with self._lock:
            info.index = len(self._requests)
            self._requests.append(info)
        ex = _Exchange(handler, info, raw)
        try:
            if name is None:
                raise HubError(405 if other else 404, f"Sorry, we can't find the page you are looking for: {method} "
                               f"{split.path}")
            self._authorize(name, headers.get("authorization"), params)
            getattr(self, f"_h_{name}")(ex, params, body)
        except HubError as exc:
            if not ex.sent:
                ex.error(exc.status, exc.message, exc.code, exc.headers, exc.body)
        except _DISCONNECTS:
            handler.close_connection = True
        except Exception as exc:  # a bug here: answer 500 so the client says so, and keep serving
            if not ex.sent:
                ex.error(500, f"hub server error: {exc!r}")

    def _authorize(self, route: str, authorization: str | None, params: dict) -> None:
        if route in ("cdn", "telemetry", "agent_harnesses"):
            return
        given = (authorization or "").split(" ", 1)[1].strip() if " " in (authorization or "") else None
        if route.startswith("cas_"):
            if given != self._xet_token:
                raise HubError(401, "Unauthorized: invalid or expired Xet token")
            return
        if given is None:
            if route in ("resolve", "repo_info", "tree"):  # a private repo without a token: not found
                raise HubError(401, "Repository not found", "RepoNotFound")
            raise HubError(401, "You must be authenticated to access this endpoint.")
        if given != self.token:
            raise HubError(401, INVALID_CREDENTIALS)

    def _namespace_ok(self, namespace: str | None) -> bool:
        return namespace in (self.user, *self.orgs)

    # -- Hub: user and repos -----------------------------------------------------------------
    def _h_whoami(self, ex: _Exchange, p: dict, body) -> None:
        ex.send(200, {
            "type": "user", "id": self.user_id, "name": self.user, "fullname": self.user.title(),
            "email": f"{self.user}@example.test", "emailVerified": True, "canPay": True, "isPro": True,
            "periodEnd": None, "avatarUrl": "", "orgs": [{"type": "org", "name": org, "fullname": org,
                                                         "roleInOrg": "write"} for org in self.orgs],
            "auth": {"type": "access_token", "accessToken": {"displayName": "hub-server", "role": "write",
                                                             "createdAt": iso(time.time())}},
        })

    def _h_agent_harnesses(self, ex: _Exchange, p: dict, body) -> None:
        ex.send(200, {"standardEnvVars": [], "harnesses": {}})  # huggingface_hub's agent detection registry

    def _repo_url(self, repo_type: str, repo_id: str) -> str:
        return f"{self.url}/{URL_PREFIX[repo_type]}{repo_id}"

    def _h_create_repo(self, ex: _Exchange, p: dict, body) -> None:
        body = body if isinstance(body, dict) else {}
        name, org = body.get("name"), body.get("organization")
        repo_type = body.get("type") or "model"
        if not name or repo_type not in URL_PREFIX:
            raise HubError(400, "Invalid repo name or type")
        namespace = org or self.user
        if not self._namespace_ok(namespace):
            raise HubError(403, f"You don't have the rights to create a {repo_type} under the namespace "
                                f"\"{namespace}\"")
        repo_id = f"{namespace}/{name}"
        url = self._repo_url(repo_type, repo_id)
        with self._lock:
            if (repo_type, repo_id) in self.repos:
                raise HubError(409, f"You already created this {repo_type} repo", body={"url": url})
            repo = Repo(repo_type, repo_id, private=body.get("visibility", "private") != "public")
            initial = {".gitattributes": GITATTRIBUTES} if repo_type != "space" else {}
            self._add_commit(repo, "initial commit", "", initial, frozenset())
            self.repos[(repo_type, repo_id)] = repo
        ex.send(200, {"url": url, "name": repo_id, "id": hashlib.sha1(repo_id.encode()).hexdigest()[:24]})

    def _h_delete_repo(self, ex: _Exchange, p: dict, body) -> None:
        body = body if isinstance(body, dict) else {}
        key = (body.get("type") or "model", f"{body.get('organization') or self.user}/{body.get('name')}")
        with self._lock:
            if self.repos.pop(key, None) is None:
                raise HubError(404, "Repository not found", "RepoNotFound")
        ex.send(200, {})

    def _add_commit(self, repo: Repo, message: str, description: str, files: dict[str, bytes],
                    lfs: frozenset[str]) -> Commit:
        parent = repo.head.oid if repo.commits else None
        self._commit_counter += 1
        listing = json.dumps(sorted((k, git_blob_oid(v)) for k, v in files.items()))
        oid = hashlib.sha1(f"{parent}\n{listing}\n{message}\n{self._commit_counter}".encode()).hexdigest()
        commit = Commit(oid, parent, message, description, dict(files), lfs)
        repo.commits.append(commit)
        return commit

    def _get_repo(self, p: dict) -> Repo:
        repo_type = REPO_TYPES[p["types"]] if "types" in p else "model"
        repo = self.repos.get((repo_type, f"{p['ns']}/{p['name']}"))
        if repo is None:
            raise HubError(404, "Repository not found", "RepoNotFound")
        return repo

    def _get_commit(self, repo: Repo, revision: str | None) -> Commit:
        commit = repo.commit(revision)
        if commit is None:
            raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return commit

    def _entry(self, commit: Commit, path: str, blobs: bool = True) -> dict:
        data = commit.files[path]
        entry = {"type": "file", "oid": git_blob_oid(data), "size": len(data), "path": path}
        if path in commit.lfs:
            pointer = self._lfs_pointer(data)
            entry["oid"] = git_blob_oid(pointer)
            entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": len(pointer)}
        return entry

    @staticmethod
    def _lfs_pointer(data: bytes) -> bytes:
        return (f"version https://git-lfs.github.com/spec/v1\noid sha256:{hashlib.sha256(data).hexdigest()}\n"
                f"size {len(data)}\n").encode()

    def _h_repo_info(self, ex: _Exchange, p: dict, body) -> None:
        with self._lock:
            repo = self._get_repo(p)
            commit = self._get_commit(repo, p.get("rev"))
            blobs = ex.info.query.get("blobs", ["false"])[0].lower() in ("1", "true")
            siblings = []
            for path in sorted(commit.files):
                sibling = {"rfilename": path}
                if blobs:
                    entry = self._entry(commit, path)
                    sibling.update(size=entry["size"], blobId=entry["oid"])
                    if "lfs" in entry:
                        sibling["lfs"] = {"size": entry["lfs"]["size"], "sha256": entry["lfs"]["oid"],
                                          "pointerSize": entry["lfs"]["pointerSize"]}
                siblings.append(sibling)
            namespace = repo.repo_id.split("/")[0]
            info = {"_id": hashlib.sha1(repo.repo_id.encode()).hexdigest()[:24], "id": repo.repo_id,
                    "author": namespace, "sha": commit.oid, "lastModified": iso(commit.time),
                    "createdAt": iso(repo.created_at), "private": repo.private, "gated": False, "disabled": False,
                    "downloads": 0, "likes": 0, "tags": [], "siblings": siblings,
                    "usedStorage": sum(len(v) for v in commit.files.values())}
            if repo.repo_type == "model":
                info["modelId"] = repo.repo_id
        ex.send(200, info)

    def _h_tree(self, ex: _Exchange, p: dict, body) -> None:
        recursive = ex.info.query.get("recursive", ["false"])[0].lower() in ("1", "true")
        base = (p.get("path") or "").strip("/")
        with self._lock:
            repo = self._get_repo(p)
            commit = self._get_commit(repo, p.get("rev"))
            prefix = f"{base}/" if base else ""
            below = [path for path in sorted(commit.files) if path.startswith(prefix)]
            if base and not below:
                raise HubError(404, f"Entry not found: {base}", "EntryNotFound",
                               {"X-Repo-Commit": commit.oid})
            entries, folders = [], set()
            for path in below:
                rest = path[len(prefix):]
                parts = rest.split("/")
                for depth in range(1, len(parts)):
                    folder = prefix + "/".join(parts[:depth])
                    if (recursive or depth == 1) and folder not in folders:
                        folders.add(folder)
                        entries.append({"type": "directory", "path": folder, "size": 0,
                                        "oid": hashlib.sha1(f"{commit.oid}:{folder}".encode()).hexdigest()})
                if recursive or len(parts) == 1:
                    entries.append(self._entry(commit, path))
        ex.send(200, entries)

    def _ignored(self, path: str, gitignore: str | None) -> bool:
        for line in (gitignore or "").splitlines():
            pattern = line.strip()
            if pattern and not pattern.startswith("#") and not pattern.startswith("!"):
                pattern = pattern.lstrip("/")
                if pattern.endswith("/"):
                    if path.startswith(pattern) or f"/{pattern}" in f"/{path}":
                        return True
                elif fnmatch.fnmatch(path, pattern) or fnmatch.fnmatch(path.rsplit("/", 1)[-1], pattern):
                    return True
        return False

    def _h_preupload(self, ex: _Exchange, p: dict, body) -> None:
        if ex.info.query.get("create_pr"):
            raise HubError(400, "create_pr is not supported by this test server")
        files = (body or {}).get("files") if isinstance(body, dict) else None
        if not isinstance(files, list):
            raise HubError(400, "Invalid preupload payload: expected {\"files\": [...]}")
        with self._lock:
            repo = self._get_repo(p)
            commit = self._get_commit(repo, p.get("rev"))
            gitignore = body.get("gitIgnore")
            if gitignore is None and ".gitignore" in commit.files:
                gitignore = commit.files[".gitignore"].decode(errors="replace")
            out = []
            for f in files:
                path, size = f["path"], int(f.get("size") or 0)
                lfs = self.lfs_threshold is not None and size >= self.lfs_threshold
                entry = {"path": path, "uploadMode": "lfs" if lfs else "regular",
                         "shouldIgnore": self._ignored(path, gitignore)}
                if path in commit.files:  # the remote oid: unchanged files are skipped by the client
                    data = commit.files[path]
                    entry["oid"] = hashlib.sha256(data).hexdigest() if lfs else git_blob_oid(data)
                out.append(entry)
        ex.send(200, {"files": out, "commitOid": commit.oid})

    def _h_commit(self, ex: _Exchange, p: dict, body) -> None:
        if ex.info.query.get("create_pr"):
            raise HubError(400, "create_pr is not supported by this test server")
        if not isinstance(body, list) or not body or body[0].get("key") != "header":
            raise HubError(400, "Invalid commit payload: expected NDJSON starting with a header line")
        header = body[0].get("value") or {}
        if not header.get("summary"):
            raise HubError(400, "Commit summary is required")
        with self._lock:
            repo = self._get_repo(p)
            if p.get("rev") not in ("main", "refs/heads/main"):
                raise HubError(400, f"Invalid rev id: {p.get('rev')} is not a branch", "RevisionNotFound")
            parent = header.get("parentCommit")
            if parent and not repo.head.oid.startswith(parent):
                raise HubError(412, "A commit has happened since. Please refresh and try again.")
            files, lfs = dict(repo.head.files), set(repo.head.lfs)
            for op in body[1:]:
                key, value = op.get("key"), op.get("value") or {}
                path = value.get("path", "")
                if key == "file":
                    if value.get("encoding", "base64") != "base64":
                        raise HubError(400, f"Unsupported encoding {value.get('encoding')!r}")
                    files[path] = base64.b64decode(value.get("content", ""))
                    lfs.discard(path)
                elif key == "lfsFile":
                    data = self._lfs.get(value.get("oid", ""))
                    if data is None:
                        raise HubError(422, f"LFS file {path} ({value.get('oid')}) was never uploaded")
                    files[path] = data
                    lfs.add(path)
                elif key == "deletedFile":
                    if path not in files:
                        raise HubError(404, f"A file with this name doesn't exist: {path}", "EntryNotFound")
                    del files[path]
                    lfs.discard(path)
                elif key == "deletedFolder":
                    prefix = path.rstrip("/") + "/"
                    doomed = [name for name in files if name.startswith(prefix)]
                    if not doomed:
                        raise HubError(404, f"A folder with this name doesn't exist: {path}", "EntryNotFound")
                    for name in doomed:
                        del files[name]
                        lfs.discard(name)
                else:
                    raise HubError(400, f"Unsupported commit operation {key!r}")
            commit = self._add_commit(repo, header["summary"], header.get("description") or "", files,
                                      frozenset(lfs))
        ex.send(200, {"success": True, "commitOid": commit.oid, "hookOutput": "",
                      "commitUrl": f"{self._repo_url(repo.repo_type, repo.repo_id)}/commit/{commit.oid}"})

    def _h_repo_xet_token(self, ex: _Exchange, p: dict, body) -> None:
        self._get_repo(p)
        self._send_xet_token(ex)

    def _send_xet_token(self, ex: _Exchange) -> None:
        ex.send(200, {"accessToken": self._xet_token, "exp": int(time.time()) + 3600, "casUrl": self.cas_url})

    # -- downloads ---------------------------------------------------------------------------
    def _h_resolve(self, ex: _Exchange, p: dict, body) -> None:
        with self._lock:
            repo = self._get_repo(p)
            commit = self._get_commit(repo, p["rev"])
            path = p["path"]
            if path not in commit.files:
                raise HubError(404, "Entry not found", "EntryNotFound", {"X-Repo-Commit": commit.oid})
            data = commit.files[path]
            is_lfs = path in commit.lfs
        sha256 = hashlib.sha256(data).hexdigest()
        headers = {"X-Repo-Commit": commit.oid, "Accept-Ranges": "bytes",
                   "ETag": f'"{sha256 if is_lfs else git_blob_oid(data)}"'}
        if self.redirect_downloads:
            with self._lock:
                self._lfs.setdefault(sha256, data)
            location = f"http://localhost:{self.port}/cdn/{sha256}?filename={quote(path.rsplit('/', 1)[-1])}"
            headers.update({"Location": location, "X-Linked-Etag": f'"{sha256}"', "X-Linked-Size": str(len(data)),
                            "ETag": f'"{sha256}"'})
            return ex.send(302, b"", headers, content_type="text/plain")
        self._send_bytes(ex, data, headers)

    def _h_cdn(self, ex: _Exchange, p: dict, body) -> None:
        with self._lock:
            data = self._lfs.get(p["sha"])
        if data is None:
            raise HubError(404, "NoSuchKey")
        self._send_bytes(ex, data, {"ETag": f'"{p["sha"]}"', "Accept-Ranges": "bytes"})

    def _send_bytes(self, ex: _Exchange, data: bytes, headers: dict) -> None:
        status, body = 200, data
        wanted = ex.h.headers.get("Range")
        if wanted:
            match = re.fullmatch(r"bytes=(\d*)-(\d*)", wanted.strip())
            if not match or (not match.group(1) and not match.group(2)):
                raise HubError(416, "Invalid range")
            if match.group(1):
                start = int(match.group(1))
                end = min(int(match.group(2)), len(data) - 1) if match.group(2) else len(data) - 1
            else:
                start, end = max(0, len(data) - int(match.group(2))), len(data) - 1
            if start >= len(data) and len(data) > 0:
                raise HubError(416, "Requested range not satisfiable",
                               headers={"Content-Range": f"bytes */{len(data)}"})
            status, body = 206, data[start:end + 1]
            headers = {**headers, "Content-Range": f"bytes {start}-{end}/{len(data)}"}
        headers = {**headers, "Content-Length": str(len(body))}
        ex.send(status, body, headers, content_type="application/octet-stream")

    # -- buckets and Xet CAS -----------------------------------------------------------------
    def _get_bucket(self, p: dict) -> dict:
        bucket = self.buckets.get(f"{p['ns']}/{p['name']}")
        if bucket is None:
            raise HubError(404, "Bucket not found", "RepoNotFound")
        return bucket

    def _h_create_bucket(self, ex: _Exchange, p: dict, body) -> None:
        bucket_id = f"{p['ns']}/{p['name']}"
        if not self._namespace_ok(p["ns"]):
            raise HubError(403, f"You don't have the rights to create a bucket under the namespace \"{p['ns']}\"")
        url = f"{self.url}/buckets/{bucket_id}"
        with self._lock:
            if bucket_id in self.buckets:
                raise HubError(409, "You already created this bucket", body={"url": url})
            private = (body or {}).get("visibility", "private") != "public" if isinstance(body, dict) else True
            self.buckets[bucket_id] = {"private": private, "created_at": time.time(), "files": {}}
        ex.send(200, {"url": url, "name": p["name"], "id": bucket_id})

    def _h_bucket_info(self, ex: _Exchange, p: dict, body) -> None:
        with self._lock:
            bucket = self._get_bucket(p)
            ex.send(200, {"id": f"{p['ns']}/{p['name']}", "private": bucket["private"],
                          "createdAt": iso(bucket["created_at"]), "size": sum(map(len, bucket["files"].values())),
                          "totalFiles": len(bucket["files"])})

    def _h_bucket_xet_token(self, ex: _Exchange, p: dict, body) -> None:
        with self._lock:
            self._get_bucket(p)
        self._send_xet_token(ex)

    def _h_bucket_batch(self, ex: _Exchange, p: dict, body) -> None:
        if not isinstance(body, list):
            raise HubError(400, "Invalid batch payload: expected NDJSON")
        failed = []
        with self._lock:
            bucket = self._get_bucket(p)
            for op in body:
                kind, path = op.get("type"), op.get("path", "")
                if kind == "addFile":
                    data = self._xet_files.get(op.get("xetHash", ""))
                    if data is None:
                        failed.append({"path": path, "error": f"Xet file {op.get('xetHash')} not found"})
                    else:
                        bucket["files"][path] = data
                elif kind == "deleteFile":
                    bucket["files"].pop(path, None)
                else:
                    failed.append({"path": path, "error": f"operation {kind!r} is not supported by this test server"})
        ex.send(422 if failed and len(failed) == len(body) else 200,
                {"success": not failed, "processed": len(body), "succeeded": len(body) - len(failed),
                 "failed": failed})

    def _h_cas_dedup(self, ex: _Exchange, p: dict, body) -> None:
        raise HubError(404, "Chunk not found")

    def _h_cas_grant(self, ex: _Exchange, p: dict, body) -> None:
        raise HubError(404, "Xorb upload grants are not available; upload the xorb directly")

    def _h_cas_xorb(self, ex: _Exchange, p: dict, body) -> None:
        try:
            chunks = parse_xorb(ex.raw)
        except ValueError as exc:
            raise HubError(400, f"Invalid xorb: {exc}") from None
        with self._lock:
            inserted = p["hash"] not in self._xorbs
            self._xorbs[p["hash"]] = chunks
        ex.send(200, {"was_inserted": inserted})

    def _h_cas_shard(self, ex: _Exchange, p: dict, body) -> None:
        problem = None
        try:
            files = parse_shard(ex.raw)
        except (ValueError, struct.error) as exc:
            files, problem = [], f"Invalid shard: {exc}"
        registered = 0
        with self._lock:
            for file_hash, terms in files:
                parts = []
                for xorb, start, end, size in terms:
                    chunks = self._xorbs.get(xorb)
                    if chunks is None or end > len(chunks):
                        problem = f"Shard references a missing xorb {xorb}"
                        break
                    part = b"".join(chunks[start:end])
                    if len(part) != size:
                        problem = f"Shard term size mismatch for xorb {xorb}"
                        break
                    parts.append(part)
                if problem:
                    break
                data = b"".join(parts)
                self._xet_files[file_hash] = data
                self._lfs[hashlib.sha256(data).hexdigest()] = data
                registered += 1
        if p["version"] == "v1":
            if problem:
                raise HubError(400, problem)
            return ex.send(200, {"result": 1})
        frames = [{"type": "validating", "verified": registered, "total": len(files)}]
        frames += [{"type": "error", "message": problem, "retryable": False}] if problem else [
            {"type": "committing", "stage": "syncing"}, {"type": "result"}]
        ex.send(200, b"".join(json.dumps(f).encode() + b"\n" for f in frames), content_type="application/x-ndjson")

    def _h_telemetry(self, ex: _Exchange, p: dict, body) -> None:
        ex.send(200, {})

    # -- jobs --------------------------------------------------------------------------------
    def _h_hardware(self, ex: _Exchange, p: dict, body) -> None:
        ex.send(200, HARDWARE)

    def _job_json(self, job: JobRecord) -> dict:
        now = time.time()
        end = job.finished_at or now
        started = job.started_at
        durations = {"schedulingSecs": int((started or end) - job.created_at) if started else None,
                     "runningSecs": int(end - started) if started else None,
                     "totalSecs": int(end - job.created_at)}
        spec = job.spec
        info = {"id": job.id, "createdAt": iso(job.created_at),
                "startedAt": iso(started) if started else None,
                "finishedAt": iso(job.finished_at) if job.finished_at else None,
                "command": job.command, "arguments": job.arguments, "environment": job.environment,
                "secrets": {k: None for k in job.secret_keys}, "flavor": job.flavor, "labels": job.labels,
                "status": {"stage": job.stage, "message": job.message}, "durations": durations,
                "owner": {"id": self.user_id if job.namespace == self.user else
                          hashlib.sha1(job.namespace.encode()).hexdigest()[:24], "name": job.namespace,
                          "type": "user" if job.namespace == self.user else "org"},
                "initiator": {"type": "user", "id": self.user_id, "name": self.user}}
        if spec.get("spaceId"):
            info["spaceId"] = spec["spaceId"]
        else:
            info["dockerImage"] = spec.get("dockerImage") or DEFAULT_UV_IMAGE
        if job.volumes:
            info["volumes"] = job.volumes
        if spec.get("timeoutSeconds"):
            info["timeoutSeconds"] = spec["timeoutSeconds"]
        return info

    def _get_job(self, p: dict) -> JobRecord:
        job = self.jobs.get(p["job"])
        if job is None or job.namespace != p["ns"]:
            raise HubError(404, f"Job {p['job']} not found")
        return job

    def _h_create_job(self, ex: _Exchange, p: dict, body) -> None:
        if not isinstance(body, dict):
            raise HubError(400, "Invalid job spec")
        namespace = p["ns"]
        if not self._namespace_ok(namespace):
            raise HubError(403, f"You don't have the rights to run jobs under the namespace \"{namespace}\"")
        command = body.get("command")
        if not isinstance(command, list) or not command or not all(isinstance(c, str) for c in command):
            raise HubError(400, "Invalid job spec: command must be a non-empty list of strings")
        flavor = body.get("flavor") or "cpu-basic"
        if flavor not in {h["name"] for h in HARDWARE}:
            raise HubError(400, f"Invalid flavor: {flavor}")
        secrets = {str(k): str(v) for k, v in (body.get("secrets") or {}).items()}
        timeout = body.get("timeoutSeconds") or DEFAULT_JOB_TIMEOUT_S
        job_id = f"{int(time.time()):08x}{_secrets.token_hex(8)}"
        spec = {**body, "secrets": {k: "***" for k in secrets}} if secrets else dict(body)
        job = JobRecord(id=job_id, namespace=namespace, spec=spec, command=list(command),
                        arguments=[str(a) for a in body.get("arguments") or []],
                        environment={str(k): str(v) for k, v in (body.get("environment") or {}).items()},
                        secret_keys=sorted(secrets), flavor=flavor, labels=body.get("labels"),
                        volumes=list(body.get("volumes") or []), timeout_s=float(timeout))
        job._secret_values = secrets
        with self._lock:
            if self._closing.is_set():
                raise HubError(503, "The server is shutting down")
            self.jobs[job_id] = job
            job._thread = threading.Thread(target=self._run_job, args=(job,), name=f"hub-job-{job_id}",
                                           daemon=True)
            job._thread.start()
            info = self._job_json(job)
        ex.send(200, info)

    def _h_list_jobs(self, ex: _Exchange, p: dict, body) -> None:
        stages = set(ex.info.query.get("stage", []))
        labels = [tuple(item.split("=", 1)) for item in ex.info.query.get("label", []) if "=" in item]
        with self._lock:
            out = [self._job_json(job) for job in self.jobs.values() if job.namespace == p["ns"]
                   and (not stages or job.stage in stages)
                   and all((job.labels or {}).get(k) == v for k, v in labels)]
        ex.send(200, out)

    def _h_job(self, ex: _Exchange, p: dict, body) -> None:
        with self._lock:
            ex.send(200, self._job_json(self._get_job(p)))

    def _h_job_metrics(self, ex: _Exchange, p: dict, body) -> None:
        self._get_job(p)
        raise HubError(406, "Metrics are not available on this test server")

    def _h_cancel_job(self, ex: _Exchange, p: dict, body) -> None:
        with self._lock:
            job = self._get_job(p)
        self._end_job(job, "canceled")
        with self._lock:
            ex.send(200, self._job_json(job))

    def _h_job_logs(self, ex: _Exchange, p: dict, body) -> None:
        with self._lock:
            job = self._get_job(p)
            if job.streams_cut and self.log_stream_error_status and not job.done:
                raise HubError(self.log_stream_error_status, "Log stream unavailable, please retry later")
            tail = ex.info.query.get("tail", [None])[0]
            index = max(0, len(job.log) - int(tail)) if tail and tail.isdigit() else 0
            times = self.break_log_stream_times
            cut_after = self.break_log_stream_after if (
                self.break_log_stream_after is not None and not job.done
                and (times is None or job.streams_cut < times)) else None
        ex.start_stream(200, "text/event-stream", {"Cache-Control": "no-cache", "Connection": "keep-alive"})
        if cut_after is not None and cut_after <= 0:
            with self._lock:
                job.streams_cut += 1
            return ex.cut()
        sent, last = 0, time.monotonic()
        while True:
            with self._changed:
                while index >= len(job.log) and not job.done and not self._closing.is_set():
                    remaining = self.keepalive_s - (time.monotonic() - last)
                    if remaining <= 0:
                        break
                    self._changed.wait(remaining)
                batch, done = job.log[index:], job.done
            last = time.monotonic()
            if not batch and not done and not self._closing.is_set():
                ex.chunk(b": keep-alive\n\n")
                continue
            for line in batch:
                index += 1
                event = json.dumps({"data": line.text, "timestamp": line.timestamp})
                ex.chunk(f"data: {event}\n\n".encode())
                if not line.text.startswith("===== Job started"):
                    sent += 1
                if cut_after is not None and sent >= cut_after and not job.done:
                    with self._lock:
                        job.streams_cut += 1
                    return ex.cut()
            if (done and index >= len(job.log)) or self._closing.is_set():
                break
        ex.end_stream()

    # -- running jobs ------------------------------------------------------------------------
    def _log(self, job: JobRecord, text: str) -> None:
        if self.drop_log_lines_with and self.drop_log_lines_with in text:
            return
        with self._changed:
            job.log.append(LogLine(time.time(), text))
            self._changed.notify_all()
        if job.workdir is not None and job.workdir.is_dir():  # also on disk, to follow a job from a shell
            with open(job.workdir / "job.log", "a") as fh:
                fh.write(text + "\n")

    def _set_stage(self, job: JobRecord, stage: str, message: str | None = None) -> None:
        with self._changed:
            job.stage, job.message = stage, message
            if stage == "RUNNING":
                job.started_at = time.time()
            elif stage in TERMINAL and job.finished_at is None:
                job.finished_at = time.time()
            self._changed.notify_all()

    def _sleep(self, job: JobRecord, seconds: float) -> bool:
        """Sleep unless the job is ended or the server stops; True if it may go on."""
        deadline = time.monotonic() + max(0.0, seconds)
        with self._changed:
            while job.end_reason is None and not self._closing.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return True
                self._changed.wait(remaining)
        return False

    def _end_job(self, job: JobRecord, reason: str) -> None:
        """Cancel / time out / stop a job: kill its process group; a job not started ends at once."""
        with self._changed:
            if job.done or job.end_reason is not None:
                return
            job.end_reason = reason
            process = job._process
            if process is None:  # still scheduling: it never starts
                if reason == "canceled":
                    self._set_stage(job, "CANCELED")
                else:
                    self._set_stage(job, "ERROR", "Server stopped" if reason == "stopped" else TIMEOUT_MESSAGE)
            self._changed.notify_all()
        if process is not None:
            self._kill(process)

    def _kill(self, process: subprocess.Popen) -> None:
        for sig, grace in ((signal.SIGTERM, self.kill_grace_s), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, sig)
            try:
                process.wait(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError, PermissionError):  # stragglers in the group
            os.killpg(process.pid, signal.SIGKILL)

    def _run_job(self, job: JobRecord) -> None:
        try:
            self._run_job_inner(job)
        except Exception as exc:  # never leave a job hanging in a non-terminal stage
            with self._changed:
                if not job.done:
                    self._log(job, f"hub server: job runner failed: {exc!r}")
                    self._set_stage(job, "ERROR", f"Job failed to start: {exc}")

    def _run_job_inner(self, job: JobRecord) -> None:
        if not self._sleep(job, self.schedule_delay):
            return
        job.workdir = Path(tempfile.mkdtemp(prefix=f"job-{job.id}-", dir=self._root))
        try:
            python = self._job_python(job)
            argv = self._job_argv(job, python)
        except JobSetupError as exc:
            self._set_stage(job, "RUNNING")
            self._log(job, f"===== Job started at {datetime.now(UTC):%Y-%m-%d %H:%M:%S} =====")
            self._log(job, f"hub server: {exc}")
            self._set_stage(job, "ERROR", f"Job failed to start: {exc}")
            return
        env = self._job_env(job, Path(python))
        job.argv, job.env_keys = argv, sorted(env)
        job._secret_values = {}  # only the process environment holds them from now on
        with self._changed:
            if job.end_reason is not None:
                return
            process = subprocess.Popen(argv, cwd=job.workdir / "work", env=env, stdin=subprocess.DEVNULL,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
            job._process, job.pid = process, process.pid
            self._set_stage(job, "RUNNING")
            self._log(job, f"===== Job started at {datetime.now(UTC):%Y-%m-%d %H:%M:%S} =====")
        reader = threading.Thread(target=self._read_output, args=(job, process), name=f"hub-job-log-{job.id}",
                                  daemon=True)
        reader.start()
        timeout = self.job_timeout_s if self.job_timeout_s is not None else job.timeout_s
        cancel_after = self.cancel_jobs_after_s
        limit, reason = (timeout, "timeout") if cancel_after is None or timeout <= cancel_after else (
            cancel_after, "canceled")
        try:
            process.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            self._end_job(job, reason)
        process.wait()
        reader.join(timeout=10)
        code = process.returncode
        job.exit_code = code if code >= 0 else 128 - code
        with self._changed:
            if job.end_reason == "canceled":
                self._set_stage(job, "CANCELED")
            elif job.end_reason == "timeout":
                self._set_stage(job, "ERROR", TIMEOUT_MESSAGE)
            elif job.end_reason == "stopped":
                self._set_stage(job, "ERROR", "Server stopped")
            elif code == 0:
                self._set_stage(job, "COMPLETED")
            else:
                self._set_stage(job, "ERROR", f"Job failed with exit code: {job.exit_code}")

    def _read_output(self, job: JobRecord, process: subprocess.Popen) -> None:
        for raw in iter(process.stdout.readline, b""):
            self._log(job, raw.decode("utf-8", errors="replace").rstrip("\r\n"))
        process.stdout.close()

    def _job_python(self, job: JobRecord) -> str:
        if self.job_python is not None:
            return self.job_python
        venv = job.workdir / "venv"
        base = getattr(sys, "_base_executable", None) or sys.executable
        cfg = Path(sys.prefix) / "pyvenv.cfg"
        if sys.prefix != sys.base_prefix and not Path(base).exists() and cfg.exists():
            home = next((line.split("=", 1)[1].strip() for line in cfg.read_text().splitlines()
                         if line.split("=", 1)[0].strip() == "home"), None)
            base = str(Path(home) / f"python{sys.version_info.major}.{sys.version_info.minor}") if home else base
        result = subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], capture_output=True, text=True,
                                timeout=120)
        if result.returncode != 0:
            raise JobSetupError(f"could not create the job's venv: {result.stderr.strip()[-500:]}")
        purelib = sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)})
        parent = list(dict.fromkeys(p for p in (sysconfig.get_path("purelib"), sysconfig.get_path("platlib")) if p))
        Path(purelib).mkdir(parents=True, exist_ok=True)
        # Paths named in a .pth are added to sys.path, but the .pth files they hold are not run: the
        # editable install's finder stays out, and what pip installs in the venv comes first.
        (Path(purelib) / "_hub_server_parent.pth").write_text("".join(f"{path}\n" for path in parent))
        return str(venv / "bin" / "python")

    def _mount(self, job: JobRecord) -> dict[str, Path]:
        """Copy each volume's files into the job folder: mount path -> local folder."""
        mounts = {}
        for i, volume in enumerate(job.volumes):
            target = job.workdir / "mounts" / str(i)
            target.mkdir(parents=True, exist_ok=True)
            kind, source = volume.get("type"), volume.get("source", "")
            prefix = (volume.get("path") or "").strip("/")
            with self._lock:
                if kind == "bucket":
                    bucket = self.buckets.get(source)
                    if bucket is None:
                        raise JobSetupError(f"volume: bucket {source} not found")
                    files = dict(bucket["files"])
                elif kind in URL_PREFIX and (kind, source) in self.repos:
                    files = self.repos[(kind, source)].files(volume.get("revision"))
                else:
                    raise JobSetupError(f"volume: {kind} {source} not found")
            for path, data in files.items():
                if prefix and not path.startswith(prefix + "/"):
                    continue
                dest = target / path[len(prefix) + 1 if prefix else 0:]
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(data)
            mounts[volume.get("mountPath", "").rstrip("/")] = target
        return mounts

    def _job_argv(self, job: JobRecord, python: str) -> list[str]:
        (job.workdir / "work").mkdir(parents=True, exist_ok=True)
        mounts = self._mount(job)

        def local(arg: str) -> str:
            for mount, folder in mounts.items():
                if mount and (arg == mount or arg.startswith(mount + "/")):
                    return str(folder) + arg[len(mount):]
            return arg

        cmd = job.command + job.arguments
        if cmd[:2] == ["uv", "run"]:
            rest = cmd[2:]
            while rest and rest[0].startswith("-"):
                option = rest.pop(0)
                name, _, value = option.partition("=")
                if name in ("--with", "-w", "--python", "-p"):
                    value = value or (rest.pop(0) if rest else "")
                    if name in ("--with", "-w"):
                        job.uv_with.append(value)
                    else:
                        job.python_request = value
                elif name not in ("--no-project", "--isolated", "--quiet", "-q", "--no-cache", "--script"):
                    raise JobSetupError(f"`uv run {option}` is not supported by this test server")
            if not rest:
                raise JobSetupError("`uv run` without a script")
            script = local(rest[0])
            if script.startswith(("http://", "https://")) or not Path(script).is_file():
                raise JobSetupError(f"the script {rest[0]!r} is not a file of a mounted volume (URLs and "
                                    "commands are not supported by this test server)")
            return [python, script, *map(local, rest[1:])]
        if re.fullmatch(r"python(3(\.\d+)?)?", cmd[0]):
            return [python, *map(local, cmd[1:])]
        raise JobSetupError(f"only `uv run <script>` and `python ...` commands run here, not {cmd[0]!r}")

    def _job_env(self, job: JobRecord, python: Path) -> dict[str, str]:
        for sub in ("home", "tmp", "hf_home"):
            (job.workdir / sub).mkdir(parents=True, exist_ok=True)
        path = [entry for entry in [str(python.parent), *os.environ.get("PATH", "").split(os.pathsep)]
                if entry and not (Path(entry) / "uv").exists()]
        env = {k: os.environ[k] for k in ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM") if k in os.environ}
        env.update({"PATH": os.pathsep.join(dict.fromkeys(path)), "HOME": str(job.workdir / "home"),
                    "TMPDIR": str(job.workdir / "tmp"), "HF_HOME": str(job.workdir / "hf_home")})
        env.update(job.environment)
        env.update(job._secret_values)
        env.update({"HF_ENDPOINT": self.url, "PYTHONUNBUFFERED": "1", "PIP_NO_DEPS": "1", "PIP_NO_INDEX": "1",
                    "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
        env.pop("HF_HUB_OFFLINE", None)
        return env


@contextlib.contextmanager
def serve(**kwargs) -> Iterator[HubServer]:
    """Run a HubServer for the duration of a with-block."""
    server = HubServer(**kwargs)
    server.start()
    try:
        yield server
    finally:
        server.stop()


try:
    import pytest
except ImportError:
    pytest = None

if pytest is not None:

    @pytest.fixture
    def hub_server():
        """A fresh HubServer per test (no faults)."""
        with serve() as server:
            yield server
