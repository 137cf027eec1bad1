"""`real_run`: one real search (offline author, simulated target), shared by the analysis tests.

The log it leaves is what `kernelgraph search` writes for a user, so the report, the views
and the export are tested on the real thing, not only on synthetic events. One search
takes a few minutes on two cores; every test that asks for it is marked slow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.analysis.logs import RealRun

TASK = Path(__file__).parents[1] / "evaltasks" / "gelu_small.py"


@pytest.fixture(scope="session")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> RealRun:
    root = tmp_path_factory.mktemp("real-run")
    env = {**os.environ, "KG_WORKSPACE": str(root / "work"),
           "KG_KNOWLEDGE_PATH": str(root / "knowledge")}
    db = root / "run.duckdb"
    search = subprocess.run(
        [sys.executable, "-m", "kernelgraph", "search", str(TASK), "--db", str(db),
         "--iterations", "1", "--tune-budget", "1", "--fix-rounds", "1", "--quiet", "--json"],
        env=env, capture_output=True, text=True, timeout=900,
    )
    assert search.returncode in (0, 1), search.stderr[-3000:]
    return RealRun(db=db, summary=json.loads(search.stdout), env=env)
