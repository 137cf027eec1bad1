"""Commands that turn a log into files for people and notebooks: `report`, `export`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernelgraph.cli.app import app, console, emit_json, fail
from kernelgraph.cli.logcmds import DbArg, _open

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object: what was written.")]


@app.command(rich_help_panel="Analysis")
def report(
    db: DbArg,
    out: Annotated[Path, typer.Option("--out", help="Folder for index.html and its PNG charts "
                                      "(created if missing).", show_default=False)],
    run: Annotated[str | None, typer.Option("--run", help="Only this run (default: every run "
                                            "in the log).", show_default=False)] = None,
    json: JsonOpt = False,
) -> None:
    """Write an HTML report of the log's runs: fast_p per policy, search progression, search
    graphs with failure reasons, the per-task table, time and tokens per phase, and each
    winner's source with its receipt.

    Everything is rebuilt from the log alone; simulated figures are labelled so.
    """
    from projections.report import ReportError, build_report

    if out.exists() and not out.is_dir():
        fail(f"--out {out}: exists and is not a folder")
    with _open(db) as log:
        try:
            page = build_report(log, out, run)
        except ReportError as exc:
            fail(str(exc))
        except OSError as exc:
            fail(f"--out {out}: {exc.strerror or exc}")
    files = sorted(p.name for p in out.iterdir() if p.suffix in (".html", ".png"))
    if json:
        emit_json({"report": str(page), "files": files})
    else:
        console.print(f"report: {page} ({len(files) - 1} charts)", highlight=False)


@app.command(rich_help_panel="Analysis")
def export(
    db: DbArg,
    parquet: Annotated[Path, typer.Option("--parquet", help="Folder for the Parquet files "
                                          "(created if missing).", show_default=False)],
    artifacts: Annotated[bool, typer.Option("--artifacts", help="Also write artifacts.parquet "
                                            "(kernel sources, plans, receipts: can be large).")
                         ] = False,
    json: JsonOpt = False,
) -> None:
    """Write the log's events and every analysis view as Parquet, one file per table.

    events.parquet keeps the stored rows as they are (body JSON and hash chain included);
    each view (events_json, nodes, kernels, run_results, metrics, ...) gets its own file.
    """
    from eventstore.export import ExportError, export_parquet

    if parquet.exists() and not parquet.is_dir():
        fail(f"--parquet {parquet}: exists and is not a folder")
    with _open(db) as log:
        try:
            written = export_parquet(log, parquet, artifacts=artifacts)
        except ExportError as exc:
            fail(str(exc))
    if json:
        emit_json({"folder": str(parquet), "files": {name: rows for name, rows in written.items()}})
        return
    for name, rows in written.items():
        console.print(f"{parquet / (name + '.parquet')}: {rows} rows", highlight=False)
