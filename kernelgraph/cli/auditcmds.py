"""`kernelgraph audit DB`: recompute every run's claims from the log file alone (no bus)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from kernelgraph.cli.app import app, console, emit_json, fail


@app.command()
def audit(
    db: Annotated[Path, typer.Argument(help="Path of a kernelgraph DuckDB log.",
                                       show_default=False)],
    run: Annotated[str | None, typer.Option("--run", help="Only this run.")] = None,
    trust: Annotated[list[str] | None, typer.Option(
        "--trust", help="Also trust receipts signed by the key with this fingerprint "
        "(repeatable; this installation's key is always trusted).")] = None,
    json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Audit runs from the log: the hash chain, one frozen suite, every claimed speedup against
    the verdict or receipt it cites, simulated/real labels, node states, expansions, the end.

    Exit status: 0 when every audited run is clean, 1 when any has a finding, 2 when the log
    cannot be read (or the run is not in it). A run that has not finished is audited as far
    as it went.
    """
    from eventstore.log import CorruptLog, EventLog, LogError
    from projections.audit import AuditReport, ChainStatus, Finding, audit_run
    from tools import api

    if not db.exists():
        fail(f"{db}: no such log")
    receipt_problems = functools.partial(api.receipt_problems, also_trusted=tuple(trust or ()))
    reports: list[AuditReport] = []
    try:
        with EventLog(db, read_only=True) as log:
            verified = log.verify()
            chain = ChainStatus(verified.ok, verified.rows_checked, verified.reason)
            run_ids = [r.run_id for r in log.runs()]
            if run is not None:
                if run not in run_ids:
                    fail(f"no run {run!r} in {db}")
                run_ids = [run]

            def fetch(sha256: str) -> bytes | None:
                try:
                    return log.get_artifact(sha256)
                except (KeyError, CorruptLog):  # absent, or not what its hash says: not there
                    return None

            for run_id in run_ids:
                try:
                    events = list(log.events(run_id=run_id))
                except CorruptLog as exc:
                    reports.append(AuditReport(run_id=run_id, clean=False, chain_ok=False,
                                               events_checked=0,
                                               findings=[Finding("chain", str(exc))]))
                    continue
                final = any(e.type_name == "RunFinished" for e in events)
                reports.append(audit_run(events, fetch=fetch, chain=chain,
                                         receipt_problems=receipt_problems, final=final))
    except LogError as exc:
        fail(str(exc))
    clean = all(r.clean for r in reports) and chain.ok
    if json:
        emit_json({"db": str(db), "clean": clean,
                   "chain": {"ok": chain.ok, "rows_checked": chain.rows_checked,
                             "reason": chain.reason},
                   "runs": [_report_json(r) for r in reports]})
    else:
        _print(db, chain, reports)
    if not clean:
        raise typer.Exit(1)


def _report_json(report: Any) -> dict[str, Any]:
    return {"run_id": report.run_id, "clean": report.clean, "chain_ok": report.chain_ok,
            "events_checked": report.events_checked, "findings": report.findings_json()}


def _print(db: Path, chain: Any, reports: list[Any]) -> None:
    if chain.ok:
        console.print(f"hash chain intact ({chain.rows_checked} rows)")
    else:
        console.print(f"[bold red]hash chain broken[/]: {escape(chain.reason)}")
    if not reports:
        console.print(f"no runs in {db}")
    for report in reports:
        if report.clean:
            console.print(f"[green]clean[/] run {report.run_id} ({report.events_checked} events)")
            continue
        table = Table(title=f"run {report.run_id}: {len(report.findings)} finding(s) over "
                      f"{report.events_checked} events", title_justify="left")
        for column in ("check", "event", "finding"):
            table.add_column(column, overflow="fold")
        for f in report.findings:
            table.add_row(f.check, f.event_id or "-", escape(f.message))
        console.print(table)
