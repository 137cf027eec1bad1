"""A local knowledge folder shared by processes: one operation at a time, each under a lock.

qdrant-client's local mode (`QdrantLocal`) takes its own lock on the folder for as long as a
client is open and refuses a second client. `folder_lock` serialises kernelgraph's
operations on a folder across processes (an exclusive `flock` on `LOCK_FILE`), and
`open_local` opens the folder inside it, waiting for a client outside kernelgraph to let
go; both give up at a deadline with a `KnowledgeError` that says which of the two held it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kernelgraph.errors import KernelgraphError

ENV_WAIT = "KG_KNOWLEDGE_WAIT_S"
DEFAULT_WAIT_S = 30.0
LOCK_FILE = "kernelgraph.lock"
"""Taken (flock, exclusive) around every use of a local folder, by every process."""
_POLL_S = 0.02


class KnowledgeError(KernelgraphError):
    """The store cannot be opened or used (a locked folder, an unreachable server)."""


def wait_s() -> float:
    """How long an operation waits for the folder (another process's operation, or a client
    outside kernelgraph that holds it)."""
    try:
        return max(0.0, float(os.environ.get(ENV_WAIT, "") or DEFAULT_WAIT_S))
    except ValueError:
        return DEFAULT_WAIT_S


@contextlib.contextmanager
def folder_lock(folder: Path, deadline: float) -> Iterator[None]:
    """`LOCK_FILE` in `folder`, exclusively, waiting until `deadline` (time.monotonic)."""
    try:
        fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise KnowledgeError(f"cannot open the knowledge store {folder}: {exc}") from None
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise KnowledgeError(
                        f"the knowledge store {folder} stayed locked by another process's "
                        f"operation for {wait_s():g} s ({ENV_WAIT})") from None
                time.sleep(_POLL_S)
        yield
    finally:
        os.close(fd)  # releases the lock


def open_local(folder: Path, deadline: float) -> Any:
    """qdrant-client's local client on `folder`, waiting until `deadline` for a client that
    holds the folder outside kernelgraph's lock."""
    from qdrant_client import QdrantClient

    while True:
        try:
            return QdrantClient(path=str(folder))
        except RuntimeError as exc:
            if "already accessed" not in str(exc):
                raise
            if time.monotonic() >= deadline:
                raise KnowledgeError(
                    f"the knowledge store {folder} is held open by a client outside "
                    f"kernelgraph (local mode allows one at a time) and was not released "
                    f"within {wait_s():g} s ({ENV_WAIT})") from None
            time.sleep(_POLL_S)
        except OSError as exc:
            raise KnowledgeError(f"cannot open the knowledge store {folder}: {exc}") from None
