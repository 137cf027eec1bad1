"""`real_run`: one real `kernelgraph search` (offline author, simulated target), run once per
test run and shared by every test that reads a real run's log.

It is the search a user runs (`kernelgraph search TASK --db PATH --iterations 1 --tune-budget 2
--json`): `tests/agents/test_search_cli.py` checks what it printed, the winner on disk, its
receipt and its replay; `tests/agents/test_auditor.py` its final audit; the modules under
`tests/analysis/` the report, the views and the export of its log. One search takes a minute
or more on two cores, so it is run once: those modules are one xdist unit (SHARED_UNITS in
tests/conftest.py), and every test that asks for it is marked slow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

TASK = Path(__file__).parent / "evaltasks" / "rmsnorm_small.py"
# the modules that read `real_run`; tests/conftest.py runs them on one worker
READERS = ("tests/analysis/", "tests/agents/test_search_cli.py", "tests/agents/test_auditor.py")


@dataclass(frozen=True)
class RealRun:
    """The log of one real `kernelgraph search`, what it printed (`--json`) and how it ended."""

    db: Path
    summary: dict[str, Any]
    env: dict[str, str]
    returncode: int
    stderr: str


def kg(*args: str, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """`kernelgraph ARGS` in a process of its own, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "kernelgraph", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> RealRun:
    root = tmp_path_factory.mktemp("real-run")
    env = {**os.environ, "KG_WORKSPACE": str(root / "work"),
           "KG_KNOWLEDGE_PATH": str(root / "knowledge")}
    db = root / "runs.duckdb"
    search = kg("search", str(TASK), "--db", str(db), "--iterations", "1", "--tune-budget", "2",
                "--json", env=env)
    assert search.returncode in (0, 1), search.stderr[-3000:]
    return RealRun(db=db, summary=json.loads(search.stdout), env=env,
                   returncode=search.returncode, stderr=search.stderr)
