"""Shared fixtures and the test run's layout.

- `nats_server`: a real nats-server with JetStream, fresh for each test.
- Every test session (every pytest-xdist worker) keeps agents' files and the knowledge
  store in its own temporary folders, never in the user's `~/.cache/kernelgraph`; the real
  TPU compiler's cache is one per test run, shared by its workers, and JAX's compilation
  cache is off unless `KG_XLA_CACHE` names a folder.
- Host (XLA:CPU) programs are compiled without LLVM's optimisation passes (FAST_HOST_COMPILE).
- Tests run in parallel under pytest-xdist (see pyproject.toml) with `--dist loadscope`:
  the tests of one module run on one worker, so a module-scoped fixture (a finished search,
  frozen suites) is built once; a session-scoped one is built once per worker. The modules
  that read `real_run` (tests/realrun.py: one real `kernelgraph search`) are one unit, so
  that search is run once; the tests of `tests/test_task_suite.py` are one unit each, so the
  workers share its per-task verifications. Units are handed out longest first
  (LONGEST_FIRST, from `--durations`), then by how many slow tests they hold, so no long one
  starts last; a worker that still has a long test to run takes a short unit next, so two
  long ones never queue on one worker.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bus.server import EmbeddedNats
from tests import realrun
from tests.realrun import real_run  # noqa: F401  (a session fixture, offered to every module)
from tools import compilecache

# units of modules that share a session fixture (module paths or folders): one xdist unit each
SHARED_UNITS = {"real_run": realrun.READERS}
# modules of long, independent tests (no module- or session-scoped fixture): each test is a
# unit of its own, so the workers share the module
PER_TEST_UNITS = ("tests/test_task_suite.py",)


# the longest units (`--durations`), longest first, then the tests of PER_TEST_UNITS (each
# shorter than these, they even out the workers); the rest by how many slow tests they hold
LONGEST_FIRST = ("tests/agents/test_offline_conv.py", "tests/agents/test_offline_fixed_dims.py",
                 "tests/test_verify.py", "tests/test_fairness.py",
                 "real_run", "tests/agents/test_search_run.py",
                 "tests/agents/test_search_resume.py",
                 "tests/agents/test_distributed.py", "tests/test_runner.py",
                 "tests/agents/test_auto.py", "tests/agents/test_hitl.py",
                 "tests/test_time_limits.py", "tests/agents/test_offline_author.py",
                 "tests/agents/test_jaxpr_readable.py", "tests/agents/test_offline_levers.py",
                 "tests/test_scalar_fuzz.py", "tests/test_task_suite.py")


# Host programs are compiled without LLVM's optimisation passes. The suite compiles thousands
# of small XLA:CPU programs (eager ops, oracles, interpret-mode kernels) and runs each a few
# times, so their compiles cost more than their runs: a fifth of the CPU time of freezing a
# suite, three quarters of classifying a convolution. Without the passes a compile takes a
# third of the time (the whole suite: 1257 s -> 1140 s). Results may differ in their last
# bits (no fused multiply-adds, scalar math); every tolerance is the reference's own error
# measured under the same flags as the kernel it judges, the sandbox passes XLA_FLAGS on, and
# XLA:TPU's programs (the compile check, the baseline's price) do not depend on this flag.
FAST_HOST_COMPILE = "--xla_backend_optimization_level=0"


def pytest_configure(config: pytest.Config) -> None:
    """Before any backend starts, in the controller and so in every worker and the children
    they spawn (the sandbox passes XLA_FLAGS on); a level the user set is kept."""
    del config
    flags = os.environ.get("XLA_FLAGS", "")
    if "--xla_backend_optimization_level" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {FAST_HOST_COMPILE}".strip()


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: one worker more than the cores this process may use (at most four, as
    `--maxprocesses` says). A worker of an integration test spends part of its time waiting
    on child processes, servers and time limits; on two cores, two workers kept 1.8 of them
    busy and three keep 1.9 (the suite ran 24.5 -> 22.5 minutes)."""
    return len(os.sched_getaffinity(0)) + 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest units first (a stable sort: the same order on every worker)."""
    slow = Counter(_group(i.nodeid) for i in items if i.get_closest_marker("slow"))

    def rank(item: pytest.Item) -> tuple[int, int]:
        group = _group(item.nodeid)
        first = LONGEST_FIRST.index(group) if group in LONGEST_FIRST else len(LONGEST_FIRST)
        return first, -slow[group]

    items.sort(key=rank)


def _group(nodeid: str) -> str:
    """The module, or the name of the SHARED_UNITS unit it is in: what LONGEST_FIRST names."""
    module = nodeid.split("::", 1)[0]
    return next((unit for unit, paths in SHARED_UNITS.items()
                 if any(module.startswith(p) for p in paths)), module)


def _long(nodeid: str) -> bool:
    """Is the test in one of the long units (LONGEST_FIRST)?"""
    return _group(nodeid) in LONGEST_FIRST


def _unit(nodeid: str) -> str | None:
    """What one worker runs together: a SHARED_UNITS unit, a PER_TEST_UNITS test, or
    (None) what --dist loadscope makes of it (the module, or the class)."""
    group = _group(nodeid)
    if group in SHARED_UNITS:
        return group
    return nodeid if group in PER_TEST_UNITS else None


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """--dist loadscope, with the SHARED_UNITS units as one unit each and the tests of
    PER_TEST_UNITS one unit each, handed out in collection order (LONGEST_FIRST): xdist's own
    reordering (the units with the most tests first) would start a long one-test unit last."""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False

    class SharedUnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid) or super()._split_scope(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            """A worker takes its next unit while it still has up to two tests to run (it
            needs the next test to run the current one). When one of those is long, the next
            unit is the first short one: otherwise two long one-test units (a whole search
            each) queue on one worker and run in a row while the other runs short ones."""
            pending = [nodeid for unit in self.assigned_work.get(node, {}).values()
                       for nodeid, done in unit.items() if not done]
            if any(_long(nodeid) for nodeid in pending):
                short = next((scope for scope, unit in self.workqueue.items()
                              if not any(_long(nodeid) for nodeid in unit)), None)
                if short is not None:
                    self.workqueue.move_to_end(short, last=False)
            super()._assign_work_unit(node)

    return SharedUnitScheduling(config, log)


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
    # The compile cache is this test run's (never a result of an earlier run), shared by its
    # workers: a program compiled on one is not compiled again on another. Its entries are
    # written atomically and checked against their key when read.
    run_root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        run_root = run_root.parent  # .../pytest-N/popen-gw0: the run's folder is pytest-N
    os.environ["KG_TPU_COMPILE_CACHE"] = str(run_root / "tpu-compile")
    # JAX's persistent compilation cache (tools/compilecache.py) is off unless the run names a
    # folder: most of the suite's programs are compiled once, and with one cache over the whole
    # run (3000+ entries, each write scanning them all for eviction) the suite took more CPU,
    # not less. tests/test_compilecache.py and tests/test_verify.py turn it on themselves.
    os.environ.setdefault(compilecache.CACHE_ENV, "off")
    compilecache.enable()


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
