"""`kernelgraph audit DB`: a clean log passes; a log tampered with after the fact does not.

The log is a real DuckDB file holding a hand-built run (`tests/auditrun.py`); the tampering
is what someone with the file could do: edit a recorded speedup, delete a receipt, append
a second frozen suite, or swap the receipt for one signed by another key.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from auditrun import RunBuilder, clean_run, first, replace
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from typer.testing import CliRunner

from eventstore.events import RunFinished, TestSuiteFrozen, WinnerVerified, new_event_id
from eventstore.log import EventLog
from kernelgraph.cli import app, load_commands
from tools import api
from tools.verification import signing
from tools.verification.receipts import seal

load_commands()


def write(db: Path, run: RunBuilder) -> Path:
    with EventLog(db) as log:
        log.put_artifacts((data, "test") for data in run.artifacts.values())
        log.append(run.events)
    return db


def audit(db: Path, *args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(app, ["audit", str(db), "--json", *args])
    return result.exit_code, json.loads(result.output) if result.exit_code in (0, 1) else {}


def findings(report: dict) -> set[tuple[str, str | None]]:
    return {(f["check"], f["event_id"]) for run in report["runs"] for f in run["findings"]}


def test_a_clean_log_exits_0(tmp_path: Path) -> None:
    run = clean_run()
    db = write(tmp_path / "log.duckdb", run)
    code, report = audit(db)
    assert code == 0 and report["clean"] and report["chain"]["ok"]
    assert [(r["run_id"], r["clean"], r["events_checked"]) for r in report["runs"]] == [
        (run.run_id, True, len(run.events))]
    text = CliRunner().invoke(app, ["audit", str(db), "--run", run.run_id])
    assert text.exit_code == 0 and f"clean run {run.run_id}" in text.output


def test_an_edited_speedup_breaks_the_chain_and_the_claim(tmp_path: Path) -> None:
    run = clean_run()
    db = write(tmp_path / "log.duckdb", run)
    finished = first(run, RunFinished)
    with EventLog(db) as log:
        body = json.loads(log.sql("SELECT body FROM events WHERE event_id = ?",
                                  [finished.event_id])[0][0])
        body["speedup"] = 3.0
        log.sql("UPDATE events SET body = ? WHERE event_id = ?",
                [json.dumps(body, separators=(",", ":")), finished.event_id])
    code, report = audit(db)
    assert code == 1 and not report["chain"]["ok"]
    assert {("chain", None), ("finish", finished.event_id)} <= findings(report)


def test_a_deleted_receipt_is_found(tmp_path: Path) -> None:
    run = clean_run()
    db = write(tmp_path / "log.duckdb", run)
    verified = first(run, WinnerVerified)
    with EventLog(db) as log:
        log.sql("DELETE FROM artifacts WHERE sha256 = ?", [verified.receipt_sha256])
    code, report = audit(db)
    assert code == 1 and report["chain"]["ok"]  # artifacts are not chained; the audit reads them
    assert ("winner", verified.event_id) in findings(report)


def test_a_second_suite_appended_is_found(tmp_path: Path) -> None:
    run = clean_run()
    db = write(tmp_path / "log.duckdb", run)
    second = msgspec.structs.replace(first(run, TestSuiteFrozen), event_id=new_event_id(),
                                     suite_sha256="f" * 64)
    with EventLog(db) as log:
        log.append([second])
    code, report = audit(db)
    assert code == 1 and report["chain"]["ok"]
    assert ("suite", second.event_id) in findings(report)


def test_a_receipt_signed_by_another_key_needs_trust(tmp_path: Path) -> None:
    run = clean_run()
    other = signing.ReceiptKey(Ed25519PrivateKey.generate())
    verified = first(run, WinnerVerified)
    body = json.loads(run.artifacts[verified.receipt_sha256])
    resealed = run.put(api.receipt_json(seal(body, key=other)).encode())
    replace(run, verified, receipt_sha256=resealed)
    replace(run, first(run, RunFinished), receipt_sha256=resealed)
    db = write(tmp_path / "log.duckdb", run)
    code, report = audit(db)
    assert code == 1 and ("winner", verified.event_id) in findings(report)
    assert "another key" in json.dumps(report)
    assert audit(db, "--trust", other.fingerprint)[0] == 0


@pytest.mark.parametrize("args", [["--run", "nope"], []])
def test_a_missing_log_or_run_exits_2(tmp_path: Path, args: list[str]) -> None:
    db = write(tmp_path / "log.duckdb", clean_run()) if args else tmp_path / "absent.duckdb"
    result = CliRunner().invoke(app, ["audit", str(db), *args])
    assert result.exit_code == 2 and "error:" in result.output
