"""Shared fixtures and the test run's layout.

- `nats_server`: a real nats-server with JetStream, fresh for each test.
- Every test session (every pytest-xdist worker) keeps agents' files and the knowledge
  store in its own temporary folders, never in the user's `~/.cache/kernelgraph`.
- Under pytest-xdist (`--dist loadgroup`, see pyproject.toml) tests that share a module-,
  class-, package- or session-scoped fixture defined under `tests/` run on one worker, so
  an expensive shared fixture (a finished search, frozen suites) is built once per run.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bus.server import EmbeddedNats

TESTS = Path(__file__).resolve().parent


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


_SESSION_AUTOUSE = frozenset({"_receipt_key", "_session_folders"})  # cheap, in every test


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


# ------------------------------------------------------------------- pytest-xdist groups


def _shared_fixtures(item: pytest.Item) -> list[str]:
    """Keys of the fixture instances `item` shares with other tests: one per module-, class-,
    package- or session-scoped fixture defined in a file under tests/."""
    info = getattr(item, "_fixtureinfo", None)
    keys = []
    for name, defs in (info.name2fixturedefs.items() if info else ()):
        fixture = defs[-1]
        scope = fixture.scope
        if scope == "function" or name in _SESSION_AUTOUSE:
            continue
        try:
            source = Path(inspect.getsourcefile(fixture.func) or "").resolve()
        except TypeError:  # a builtin
            continue
        if not source.is_relative_to(TESTS):
            continue
        if scope == "session":
            keys.append(f"{name}~session")
        else:
            owner = item.getparent({"module": pytest.Module, "class": pytest.Class,
                                    "package": pytest.Package}[scope])
            keys.append(f"{name}~{owner.nodeid if owner else item.nodeid}")
    return keys


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give tests that share an expensive fixture one `xdist_group` (connected sets: two tests
    sharing any such fixture, directly or through others, land on the same worker)."""
    if config.getoption("dist", "no") != "loadgroup":
        return
    parent: dict[str, str] = {}

    def find(key: str) -> str:
        while parent.setdefault(key, key) != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    shared = {item.nodeid: _shared_fixtures(item) for item in items}
    for keys in shared.values():
        for key in keys[1:]:
            parent[find(key)] = find(keys[0])
    for item in items:
        if shared[item.nodeid]:
            item.add_marker(pytest.mark.xdist_group(find(shared[item.nodeid][0])))
