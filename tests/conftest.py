"""Shared fixtures and the test run's layout.

- `nats_server`: a real nats-server with JetStream, fresh for each test.
- Every test session (every pytest-xdist worker) keeps agents' files and the knowledge
  store in its own temporary folders, never in the user's `~/.cache/kernelgraph`.
- Tests run in parallel under pytest-xdist (see pyproject.toml) with `--dist loadscope`:
  the tests of one module run on one worker, so a module-scoped fixture (a finished search,
  frozen suites) is built once; a session-scoped one is built once per worker.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bus.server import EmbeddedNats


@pytest.fixture(scope="session", autouse=True)
def _receipt_key(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Receipts sealed by tests are signed by a key of the test session, not the user's."""
    if "KG_RECEIPT_KEY" not in os.environ:
        os.environ["KG_RECEIPT_KEY"] = str(tmp_path_factory.mktemp("receipt-key") / "key")


@pytest.fixture(scope="session", autouse=True)
def _session_folders(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Agents' workspace and the knowledge store of this session. Qdrant's local mode locks
    its folder, so two processes of one test run (xdist workers) must not share one; a test
    that needs its own sets these variables itself."""
    root = tmp_path_factory.mktemp("kg-session")
    os.environ["KG_WORKSPACE"] = str(root / "work")
    os.environ["KG_KNOWLEDGE_PATH"] = str(root / "knowledge")


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[EmbeddedNats]:
    """A nats-server (JetStream on, loopback, free port, no auth) for one test; `.url` to connect.

    It starts in a few tens of milliseconds, so every test gets its own streams and state.
    """
    server = EmbeddedNats(tmp_path / "nats")
    server.start()
    try:
        yield server
    finally:
        server.stop()
