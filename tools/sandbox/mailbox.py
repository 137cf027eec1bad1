"""A sandboxed child's request, delivered after the child started.

The launcher (:mod:`tools.sandbox.launcher`) starts the child at once; the child imports
what it needs and waits for its request file, so its start-up overlaps the parent's other
work. The wall limit counts from the delivery, and the delivery may set it, for a request
whose size was not known when the child was launched.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import stat
import subprocess
import threading
import time
from pathlib import Path

REQUEST_FILE = "request.bin"


class Mailbox:
    """A request delivered after the child started (it starts, imports and then waits for
    it), so a child's start-up overlaps the parent's other work; :meth:`cancel` ends a child
    nothing was delivered to, :meth:`kill` any child.

    The child's wall limit counts from the delivery; before it the child waits up to
    ``wait_s``, by default as long as the parent takes (the parent delivers or kills it, and
    a parent that dies takes the child along)."""

    def __init__(self, wait_s: float = math.inf) -> None:
        self._lock = threading.Lock()
        self._started = threading.Event()
        self._box: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._closed = False
        self.wait_s = wait_s
        self.delivered_at: float | None = None  # time.monotonic() of the delivery
        self.delivered_wall_s: float | None = None  # the wall limit given with it, if any

    def _attach(self, box: Path, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._box, self._proc = box, proc
            if self._closed:
                signal_group(proc)
        self._started.set()

    def started(self, timeout: float) -> bool:
        """Whether the child process exists (waiting up to ``timeout`` seconds for it)."""
        return self._started.wait(timeout)

    def deliver(self, request: bytes, timeout: float = 120.0, *,
                wall_s: float | None = None) -> None:
        """Hand the child its request (atomically: it sees the whole file or none);
        ``wall_s``: its wall limit from now, instead of the launch's (a request whose size
        was not known at the launch; the launch's ``cpu_wall_s`` must cover it)."""
        if not self._started.wait(timeout):
            raise TimeoutError("the sandboxed child did not start")
        with self._lock:
            if self._closed or self._box is None:
                raise RuntimeError("the sandbox was cancelled")
            self._closed = True
            staging = self._box / f".{REQUEST_FILE}.new"
            staging.write_bytes(request)
            os.replace(staging, self._box / REQUEST_FILE)
            self.delivered_wall_s = wall_s
            self.delivered_at = time.monotonic()

    def cancel(self) -> None:
        """Kill the child unless it was given its request (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._proc is not None:
                signal_group(self._proc)

    def kill(self) -> None:
        """Kill the child whether or not it was given its request (its answer is not
        wanted any more; idempotent)."""
        with self._lock:
            self._closed = True
            if self._proc is not None:
                signal_group(self._proc)

    def read(self, name: str, max_bytes: int) -> bytes | None:
        """A file the running child put in its directory (renamed into place whole), read
        like its result: a plain regular file or nothing (None, also before it exists)."""
        with self._lock:
            box = self._box
        return None if box is None else read_regular_file(box / name, max_bytes)

    def deadline(self, started: float, wall_s: float) -> float:
        """When the child is out of time: the wall limit after the delivery, else the wait."""
        delivered = self.delivered_at
        if delivered is None:
            return started + self.wait_s
        return delivered + (wall_s if self.delivered_wall_s is None else self.delivered_wall_s)


def signal_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def read_regular_file(path: Path, max_bytes: int) -> bytes | None:
    """A file the child wrote, or None unless it is a plain regular file of at most
    `max_bytes` with one link: never a link followed, a FIFO waited on or a device read."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or info.st_size > max_bytes:
            return None
        chunks, left = [], info.st_size
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)
