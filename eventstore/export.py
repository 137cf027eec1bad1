"""The log as Parquet: the stored events, every analysis view, optionally the artifacts.

DuckDB writes the files itself (no pyarrow needed). Each file is written under a
temporary name and renamed, so a folder never holds half a file; a reader of the folder
gets events.parquet plus one file per view in `eventstore.views.VIEW_NAMES`.
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb

from eventstore.log import EventLog, LogError
from eventstore.views import VIEW_NAMES


class ExportError(LogError):
    """The export folder cannot be written."""


_TABLES: dict[str, str] = {
    "events": "SELECT seq, event_id, run_id, type, body, hash FROM events ORDER BY seq",
    **{name: f"SELECT * FROM {name}" for name in VIEW_NAMES},
}


def export_parquet(log: EventLog, folder: Path, *, artifacts: bool = False) -> dict[str, int]:
    """Write <folder>/<name>.parquet for the events and every view; returns rows per file."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExportError(f"{folder}: {exc.strerror or exc}") from None
    tables = dict(_TABLES)
    if artifacts:
        tables["artifacts"] = "SELECT sha256, kind, size, created_ts, data FROM artifacts ORDER BY sha256"
    log.sql("SELECT 1")  # the log's views are current before any of them is read
    written: dict[str, int] = {}
    for name, query in tables.items():
        target = folder / f"{name}.parquet"
        tmp = folder / f".{name}.parquet.tmp"
        path = str(tmp).replace("'", "''")
        try:
            ((rows,),) = log.sql(f"COPY ({query}) TO '{path}' (FORMAT parquet, COMPRESSION zstd)")
            os.replace(tmp, target)
        except OSError as exc:
            raise ExportError(f"{target}: {exc.strerror or exc}") from None
        except duckdb.IOException as exc:
            raise ExportError(f"{target}: {str(exc).splitlines()[0]}") from None
        written[name] = int(rows)  # type: ignore[call-overload]
    return written
