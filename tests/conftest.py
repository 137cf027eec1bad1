"""Shared fixtures. `nats_server`: a real nats-server with JetStream, fresh for each test."""

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
