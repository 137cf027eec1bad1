"""`kernelgraph export DB --parquet DIR`: the events and every view, readable back as they were."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from eventstore.log import EventLog
from eventstore.views import VIEW_NAMES
from kernelgraph.cli import app, load_commands
from tests.analysis.logs import mixed_runs, write_log
from tests.realrun import RealRun

load_commands()
runner = CliRunner()


def _parquet(path: Path, query: str = "SELECT count(*) FROM t") -> list[tuple[object, ...]]:
    con = duckdb.connect()
    try:
        con.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{path}')")
        return con.execute(query).fetchall()
    finally:
        con.close()


def test_export_writes_the_events_and_every_view(tmp_path: Path) -> None:
    db = write_log(tmp_path / "mixed.duckdb", mixed_runs())
    out = tmp_path / "parquet"
    result = runner.invoke(app, ["export", str(db), "--parquet", str(out), "--json"])
    assert result.exit_code == 0, result.output
    files = json.loads(result.stdout)["files"]
    assert set(files) == {"events", *VIEW_NAMES}
    assert not (out / "artifacts.parquet").exists()
    with EventLog(db, read_only=True) as log:
        for name in files:
            (count,) = log.sql(f"SELECT count(*) FROM {name}")[0]
            assert files[name] == count and _parquet(out / f"{name}.parquet") == [(count,)], name
        stored = log.sql("SELECT seq, body, hash FROM events ORDER BY seq")
        summary = log.sql("SELECT measured_on, geomean_speedup FROM metrics_summary ORDER BY 1")
    assert _parquet(out / "events.parquet", "SELECT seq, body, hash FROM t ORDER BY seq") == stored
    assert _parquet(out / "metrics_summary.parquet",
                    "SELECT measured_on, geomean_speedup FROM t ORDER BY 1") == summary
    assert not list(out.glob(".*.tmp"))


def test_export_refuses_a_file_as_the_folder(tmp_path: Path) -> None:
    db = write_log(tmp_path / "mixed.duckdb", mixed_runs())
    (tmp_path / "taken").write_text("x")
    result = runner.invoke(app, ["export", str(db), "--parquet", str(tmp_path / "taken")])
    assert result.exit_code == 2 and "is not a folder" in result.output
    missing = runner.invoke(app, ["export", str(tmp_path / "nope.duckdb"), "--parquet", str(tmp_path)])
    assert missing.exit_code == 2 and "no such log" in missing.output


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_export_of_a_real_run_keeps_its_artifacts(real_run: RealRun, tmp_path: Path) -> None:
    out = tmp_path / "parquet"
    result = runner.invoke(app, ["export", str(real_run.db), "--parquet", str(out), "--artifacts"])
    assert result.exit_code == 0, result.output
    rows = _parquet(out / "artifacts.parquet", "SELECT sha256, kind, data FROM t")
    assert {kind for _, kind, _ in rows} >= {"kernel", "receipt", "task"}
    assert all(hashlib.sha256(bytes(data)).hexdigest() == sha for sha, _, data in rows)
    best = real_run.summary["best"]
    if best["receipt_sha256"]:
        assert best["receipt_sha256"] in {sha for sha, _, _ in rows}
