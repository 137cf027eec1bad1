"""The README's two commands in order: a search writes its winner next to its log, inside
the checkout (`kernelgraph.duckdb.winners/`), and the checkout's `ruff check .` must not judge
that run output; git must not offer it for a commit either."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUFF = Path(sys.executable).with_name("ruff")
UNLINTED = 'print((1))\n'  # UP034: extraneous parentheses, as a generated kernel once had


def test_ruff_skips_winners_and_reports_but_still_lints_the_source(tmp_path: Path) -> None:
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for output in ("kernelgraph.duckdb.winners/rmsnorm-RUN.py", "runs.duckdb.winners/w.py",
                   "report/index.py"):
        (tmp_path / output).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / output).write_text(UNLINTED)
    clean = subprocess.run([str(RUFF), "check", "."], cwd=tmp_path, capture_output=True, text=True)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    (tmp_path / "source.py").write_text(UNLINTED)
    dirty = subprocess.run([str(RUFF), "check", "."], cwd=tmp_path, capture_output=True, text=True)
    assert dirty.returncode == 1 and "UP034" in dirty.stdout and "winners" not in dirty.stdout


def test_git_ignores_the_run_outputs() -> None:
    for output in ("kernelgraph.duckdb", "kernelgraph.duckdb.winners/rmsnorm-RUN.py",
                   "kernelgraph.duckdb.winners/rmsnorm-RUN.json", "report/index.html"):
        ignored = subprocess.run(["git", "check-ignore", "-q", output], cwd=ROOT)
        assert ignored.returncode == 0, f"{output} is not ignored"
