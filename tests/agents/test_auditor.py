"""The auditor service on a real nats-server, with a real recorder writing a DuckDB log.

Fast cases publish a hand-built run (real verdict records, a real signed receipt) straight
onto the bus and ask for its audit: a clean run is clean, a lie is found, and without a
recorder the audit fails closed. The slow case audits a real run end to end (`real_run`,
tests/realrun.py: a `kernelgraph search`): the Auto trajectory asked for its final audit,
which must be clean, and `kernelgraph audit` agrees from the log file.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from auditrun import RunBuilder, clean_run, first, publish, replace
from nats.aio.client import Client as NATS
from typer.testing import CliRunner

from agents.calls import RunHistory
from agents.commands import AuditRun
from bus.logverify import ask_log
from eventstore.events import (
    IterationFinished,
    MessageDeadLettered,
    RunAudited,
    RunFinished,
    WinnerVerified,
)
from eventstore.log import EventLog
from kernelgraph.cli import app, load_commands
from kernelgraph.runtime import Runtime, RuntimeConfig
from tests.realrun import RealRun


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KG_WORKSPACE", str(tmp_path / "work"))
    monkeypatch.setenv("KG_KNOWLEDGE_PATH", str(tmp_path / "knowledge"))


def before_the_end(run: RunBuilder) -> RunBuilder:
    """The run as its final audit sees it: verified, not yet audited nor finished."""
    del run.events[run.events.index(first(run, WinnerVerified)) + 1:]
    return run


async def audited(nc: NATS, run: RunBuilder, *, final: bool = True) -> RunAudited:
    await publish(nc, run)
    command = AuditRun.create(run_id=run.run_id, node_id=run.root, final=final)
    async with RunHistory(nc, run.run_id) as history:
        event = await history.call(command, RunAudited, timeout=60)
    assert isinstance(event, RunAudited) and event.causation_id == command.command_id
    return event


async def audit_on_the_bus(tmp_path: Path, run: RunBuilder, *, recorder: bool = True) -> RunAudited:
    config = RuntimeConfig(db_path=tmp_path / "log.duckdb" if recorder else None,
                           agents=["auditor"], recorder_max_wait_s=0.05)
    async with Runtime(config) as runtime:
        assert runtime.client is not None
        return await audited(runtime.client.nc, run)


def test_a_clean_run_is_audited_clean_once_the_log_holds_it(tmp_path: Path) -> None:
    run = before_the_end(clean_run())
    result = asyncio.run(audit_on_the_bus(tmp_path, run))
    assert result.clean and result.final and result.chain_ok, result.findings
    assert result.events_checked == len(run.events)


def test_an_edited_speedup_is_found(tmp_path: Path) -> None:
    run = before_the_end(clean_run())
    lie = replace(run, [e for e in run.events if isinstance(e, IterationFinished)][-1],
                  speedup=2.5)
    result = asyncio.run(audit_on_the_bus(tmp_path, run))
    assert not result.clean and result.chain_ok
    assert {(f["check"], f["event_id"]) for f in result.findings} >= {("claims", lie.event_id)}


async def audit_after(tmp_path: Path, run: RunBuilder, tamper: Callable[[EventLog], object]
                      ) -> RunAudited:
    """Publish the run, let the recorder store it, change the log, then audit."""
    config = RuntimeConfig(db_path=tmp_path / "log.duckdb", agents=["auditor"],
                           recorder_max_wait_s=0.05)
    async with Runtime(config) as runtime:
        assert runtime.client is not None and runtime.recorder is not None
        nc = runtime.client.nc
        await publish(nc, run)
        while len((await ask_log(nc, run.run_id)).event_ids) < len(run.events):
            await asyncio.sleep(0.05)
        await runtime.recorder.read(tamper)
        return await audited(nc, run)


def test_an_event_only_in_the_log_is_a_finding(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KG_AUDIT_LOG_WAIT_S", "1")
    run = before_the_end(clean_run())
    extra = MessageDeadLettered.create(run_id=run.run_id, producer="recorder@1", subject="kg.evt.x",
                                       error="not an event")
    result = asyncio.run(audit_after(tmp_path, run, lambda log: log.append([extra])))
    assert not result.clean
    assert ("recorded", extra.event_id) in {(f["check"], f["event_id"]) for f in result.findings}


def test_a_recorded_body_unlike_the_bus_copy_is_a_finding(tmp_path: Path) -> None:
    run = before_the_end(clean_run())
    edited = first(run, WinnerVerified)

    def tamper(log: EventLog) -> None:
        (body,) = log.sql("SELECT body FROM events WHERE event_id = ?", [edited.event_id])[0]
        log.sql("UPDATE events SET body = ? WHERE event_id = ?",
                [body.replace('"test@1"', '"forged@1"'), edited.event_id])

    result = asyncio.run(audit_after(tmp_path, run, tamper))
    assert not result.clean
    assert any(f["check"] == "recorded" and "differ" in f["message"] for f in result.findings)


def test_without_a_recorder_the_audit_fails_closed(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KG_AUDIT_LOG_WAIT_S", "1")
    result = asyncio.run(audit_on_the_bus(tmp_path, before_the_end(clean_run()), recorder=False))
    assert not result.clean and not result.chain_ok
    assert [f["check"] for f in result.findings] == ["log"]
    assert result.findings[0]["message"].startswith("log unavailable: ")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_real_run_ends_only_after_a_clean_final_audit(real_run: RealRun) -> None:
    db, run_id = real_run.db, real_run.summary["run_id"]
    with EventLog(db, read_only=True) as log:
        events = list(log.events(run_id=run_id))
    (audit,) = [e for e in events if isinstance(e, RunAudited)]
    (finished,) = [e for e in events if isinstance(e, RunFinished)]
    assert audit.final and audit.clean and audit.chain_ok, audit.findings
    assert audit.events_checked == events.index(audit)
    assert finished.status == "completed" and finished.best_node_id is not None
    assert events.index(audit) < events.index(finished)
    load_commands()
    result = CliRunner().invoke(app, ["audit", str(db), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["runs"][0]["clean"] is True
