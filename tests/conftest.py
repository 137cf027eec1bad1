"""Shared fixtures. `nats_server`: a real nats-server with JetStream, fresh for each test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bus.server import EmbeddedNats


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
