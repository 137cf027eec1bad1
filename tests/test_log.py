from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import msgspec
import pytest

from eventstore.events import RunRequested, TestsRun
from eventstore.log import (
    CorruptLog,
    EventLog,
    LogError,
    LogFromNewerSchema,
    LogLockedError,
    NotAKernelgraphLog,
)
from eventstore.synthetic import synthetic_log


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "run.duckdb"


def _tests_run(run_id: str = "r1", node_id: str = "n1") -> TestsRun:
    return TestsRun.create(run_id=run_id, producer="executor@1", node_id=node_id,
                           code_sha256="c", suite_sha256="s", passed=True, n_cases=3)


def test_append_assigns_increasing_seq_and_reads_back_in_order(db: Path) -> None:
    events = list(synthetic_log(500, seed=3))
    with EventLog(db) as log:
        result = log.append(events[:200])
        assert (result.appended, result.duplicates, result.last_seq) == (200, 0, 200)
        log.append(events[200:])
        records = list(log.read())
    assert [seq for seq, _ in records] == list(range(1, 501))
    assert [e for _, e in records] == events


def test_append_is_idempotent_on_event_id(db: Path) -> None:
    events = list(synthetic_log(300, seed=4))
    with EventLog(db) as log:
        log.append(events[:100])
        again = log.append(events[50:150])
        assert (again.appended, again.duplicates) == (50, 50)
        within = log.append([events[200], events[200], events[201]])
        assert (within.appended, within.duplicates) == (2, 1)
        assert log.append(events[:150]).appended == 0
        assert log.count() == 152
        assert log.verify().ok


def test_duplicates_are_recognised_after_reopening(db: Path) -> None:
    events = list(synthetic_log(100, seed=5))
    with EventLog(db) as log:
        log.append(events)
    with EventLog(db) as log:
        assert log.last_seq == 100
        assert log.append(events).appended == 0
        log.append([_tests_run()])
        assert log.last_seq == 101
        assert log.verify().ok


def test_a_failed_batch_leaves_nothing_behind(db: Path) -> None:
    good = list(synthetic_log(20, seed=6))
    broken = TestsRun(event_id="01ZZZZZZZZZZZZZZZZZZZZZZZZ", run_id=None, ts=0.0,  # type: ignore[arg-type]
                      producer="x", code_sha256="c", suite_sha256="s", passed=True, n_cases=1)
    with EventLog(db) as log:
        log.append(good[:10])
        with pytest.raises(duckdb.Error):
            log.append([*good[10:], broken])
        assert log.last_seq == 10
        assert log.count() == 10
        assert log.append(good[10:]).appended == 10
        assert log.verify().ok


def test_reads_by_run_type_and_position(db: Path) -> None:
    with EventLog(db) as log:
        log.append([_tests_run("a"), _tests_run("b"), _tests_run("a")])
        log.append([RunRequested.create(run_id="b", producer="cli", node_id="root", task_name="t",
                                        task_sha256="h", policy="beam", target="sim-tpu-v6e",
                                        provider="offline")])
        assert [s for s, _ in log.read(run_id="a")] == [1, 3]
        assert [s for s, _ in log.read(types=["RunRequested"])] == [4]
        assert [s for s, _ in log.read(after_seq=2)] == [3, 4]
        assert [s for s, _ in log.read(after_seq=1, limit=2)] == [2, 3]
        assert [r.run_id for r in log.runs()] == ["a", "b"]
        assert log.runs()[1].task == "t"


def test_artifacts_are_stored_once_and_checked_on_read(db: Path) -> None:
    source = b"def build():\n    return kernel\n"
    with EventLog(db) as log:
        sha = log.put_artifact(source, kind="kernel")
        assert sha == hashlib.sha256(source).hexdigest()
        assert log.put_artifacts([(source, "kernel"), (b"plan", "plan"), (source, "kernel")]) == [
            sha, hashlib.sha256(b"plan").hexdigest(), sha]
        assert log.sql("SELECT count(*) FROM artifacts") == [(2,)]
        assert log.get_artifact(sha) == source
        assert log.has_artifact(sha)
        with pytest.raises(KeyError):
            log.get_artifact("0" * 64)
        log.sql("UPDATE artifacts SET data = 'evil' WHERE sha256 = ?", [sha])
        with pytest.raises(CorruptLog, match="does not match its hash"):
            log.get_artifact(sha)


def _tamper(db: Path, sql: str) -> None:
    con = duckdb.connect(str(db))
    con.execute(sql)
    con.close()


def _filled(db: Path, n: int = 50) -> None:
    with EventLog(db) as log:
        log.append(list(synthetic_log(n, seed=8)))


def test_verify_names_an_edited_row(db: Path) -> None:
    _filled(db)
    con = duckdb.connect(str(db))
    (target,) = con.execute("SELECT min(seq) FROM events WHERE type = 'TestsRun' "
                            "AND body LIKE '%\"passed\":false%'").fetchone()
    con.execute("UPDATE events SET body = replace(body, '\"passed\":false', '\"passed\":true') "
                "WHERE seq = ?", [target])
    con.close()
    with EventLog(db, read_only=True) as log:
        report = log.verify()
    assert (report.ok, report.first_broken_seq, report.rows_checked) == (False, target, target - 1)
    assert "hash chain" in report.reason


def test_verify_names_a_deleted_row(db: Path) -> None:
    _filled(db)
    _tamper(db, "DELETE FROM events WHERE seq = 17")
    with EventLog(db, read_only=True) as log:
        report = log.verify()
    assert (report.ok, report.first_broken_seq, report.rows_checked) == (False, 17, 16)
    assert "missing" in report.reason


def test_verify_catches_columns_that_disagree_with_the_body(db: Path) -> None:
    _filled(db)
    _tamper(db, "UPDATE events SET run_id = 'other' WHERE seq = 5")
    with EventLog(db, read_only=True) as log:
        report = log.verify()
    assert (report.ok, report.first_broken_seq) == (False, 5)


def test_a_rehashed_forgery_still_breaks_at_the_next_row(db: Path) -> None:
    """Recomputing one row's hash is not enough: the next row chains from the old one."""
    _filled(db)
    con = duckdb.connect(str(db))
    seq, body, prev = con.execute(
        "SELECT e.seq, e.body, p.hash FROM events e JOIN events p ON p.seq = e.seq - 1 "
        "WHERE e.seq = 10").fetchone()
    forged = body.replace('"producer":"', '"producer":"x')
    new_hash = hashlib.sha256(bytes(prev) + seq.to_bytes(8, "big") + forged.encode()).digest()
    con.execute("UPDATE events SET body = ?, hash = ? WHERE seq = 10", [forged, new_hash])
    con.close()
    with EventLog(db, read_only=True) as log:
        report = log.verify()
    assert (report.ok, report.first_broken_seq) == (False, 11)


def test_a_file_that_is_not_duckdb_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "random.duckdb"
    path.write_bytes(os.urandom(64 * 1024))
    with pytest.raises(NotAKernelgraphLog, match="not a kernelgraph log"):
        EventLog(path)


def test_a_foreign_duckdb_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE sales (id INTEGER)")
    con.close()
    with pytest.raises(NotAKernelgraphLog, match="DuckDB database but not a kernelgraph log"):
        EventLog(path)
    with pytest.raises(NotAKernelgraphLog):
        EventLog(path, read_only=True)


def test_a_log_from_a_newer_schema_is_refused(db: Path) -> None:
    _filled(db, 5)
    _tamper(db, "UPDATE kg_meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(LogFromNewerSchema, match="v99"):
        EventLog(db)


def test_a_missing_log_is_a_clear_error_for_readers(tmp_path: Path) -> None:
    with pytest.raises(LogError, match="no such log"):
        EventLog(tmp_path / "absent.duckdb", read_only=True)
    with pytest.raises(LogError, match="no such directory"):
        EventLog(tmp_path / "nowhere" / "run.duckdb")


def test_a_corrupt_row_is_named(db: Path) -> None:
    _filled(db, 10)
    _tamper(db, "UPDATE events SET body = '{\"type\": \"TestsRun\"' WHERE seq = 4")
    with EventLog(db, read_only=True) as log, pytest.raises(CorruptLog, match="seq=4"):
        list(log.read())


def test_a_second_writer_in_the_same_process_is_refused(db: Path) -> None:
    with EventLog(db), pytest.raises(LogLockedError, match="already open for writing in this process"):
        EventLog(db)
    EventLog(db).close()  # released on close


def test_a_writer_in_another_process_is_named(db: Path) -> None:
    EventLog(db).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from eventstore.log import EventLog
            log = EventLog({str(db)!r})
            print("ready", flush=True)
            sys.stdin.read()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with pytest.raises(LogLockedError) as info:
            EventLog(db)
        assert f"process {holder.pid}" in str(info.value)
        with pytest.raises(LogLockedError):
            EventLog(db, read_only=True)
    finally:
        holder.communicate("", timeout=30)
    EventLog(db).close()


def test_a_writer_waits_out_a_reader_holding_the_file_for_one_poll(db: Path) -> None:
    EventLog(db).close()
    reader = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import time
            from eventstore.log import EventLog
            with EventLog({str(db)!r}, read_only=True):
                print("reading", flush=True)
                time.sleep(0.5)
        """)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert reader.stdout is not None and reader.stdout.readline().strip() == "reading"
        with EventLog(db) as log:  # held by the reader for 0.5 s: without the wait this raises
            log.append(list(synthetic_log(3, seed=2)))
    finally:
        reader.communicate(timeout=30)
    assert reader.returncode == 0


def test_sql_views_answer_analysis_queries(db: Path) -> None:
    events = list(synthetic_log(2_000, seed=9))
    with EventLog(db) as log:
        log.append(events)
        producers = log.sql("SELECT DISTINCT producer FROM events_json ORDER BY 1")
        assert ("planner@0.1.0",) in producers
        nodes = log.sql("SELECT run_id, node_id, parent_id, status FROM nodes")
        evaluated = [e for e in events if e.type_name == "NodeEvaluated"]
        assert len(nodes) == sum(1 for e in events if e.type_name == "ExpansionRequested")
        assert sum(1 for n in nodes if n[3] == "valid") == sum(1 for e in evaluated if e.valid)
        metrics = log.sql("SELECT run_id, kernels, compile_rate FROM metrics ORDER BY run_id")
        first_run = metrics[0][0]
        kernels = [e for e in events if e.type_name == "IterationFinished" and e.run_id == first_run]
        assert metrics[0][1] == len(kernels)
        assert metrics[0][2] == pytest.approx(sum(e.compiled for e in kernels) / len(kernels))


def test_bodies_are_plain_json(db: Path) -> None:
    with EventLog(db) as log:
        event = _tests_run()
        log.append([event])
        (body,) = log.sql("SELECT body FROM events")[0]
    assert msgspec.json.decode(body)["passed"] is True


def test_a_row_moved_out_of_place_is_caught_by_read_and_verify(db: Path) -> None:
    _filled(db, 20)
    _tamper(db, "CREATE TEMP TABLE moved AS SELECT * FROM events WHERE seq = 7; "
                "DELETE FROM events WHERE seq = 7; INSERT INTO events SELECT * FROM moved")
    with EventLog(db, read_only=True) as log:
        with pytest.raises(CorruptLog, match="seq=7 is stored after seq=20"):
            list(log.read())
        report = log.verify()
    assert (report.ok, report.first_broken_seq) == (False, 7)
