"""The append-only, hash-chained DuckDB event log.

One process writes a log file (the recorder); DuckDB's own file lock enforces it and
`LogLockedError` names the holder. Appends are batched through the DuckDB appender,
idempotent on `event_id`, and transactional: a batch is committed whole or not at all.
Each row stores `hash = sha256(previous row's hash || seq || body)`, so `verify()` can
name the first row that was edited, removed or reordered after the fact.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import msgspec

from eventstore.codec import EventDecodeError, decode_event
from eventstore.events import EVENT_TYPES_BY_NAME, Event
from eventstore.views import VIEWS_SHA256, create_views
from kernelgraph.errors import KernelgraphError

FORMAT_NAME = "kernelgraph-log"
SCHEMA_VERSION = 1
GENESIS_HASH = b"\x00" * 32
_FETCH_ROWS = 8192

_EVENT_COLUMNS = "seq, event_id, run_id, type, body, hash"

_SCHEMA = """
CREATE TABLE kg_meta (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL);
CREATE TABLE events (
    seq BIGINT NOT NULL,
    event_id VARCHAR NOT NULL PRIMARY KEY,
    run_id VARCHAR NOT NULL,
    type VARCHAR NOT NULL,
    body VARCHAR NOT NULL USING COMPRESSION uncompressed,
    hash BLOB NOT NULL USING COMPRESSION uncompressed
);
CREATE TABLE artifacts (
    sha256 VARCHAR PRIMARY KEY,
    kind VARCHAR NOT NULL,
    size BIGINT NOT NULL,
    created_ts DOUBLE NOT NULL,
    data BLOB NOT NULL
);
"""


class LogError(KernelgraphError):
    """Base for every error a user can get from opening or reading a log."""


class LogLockedError(LogError):
    """Another writer holds the file."""


class NotAKernelgraphLog(LogError):
    """The file is not a kernelgraph log (another DuckDB database, or not DuckDB at all)."""


class LogFromNewerSchema(LogError):
    """The log was written by a newer kernelgraph."""


class CorruptLog(LogError):
    """The file or a row in it cannot be read."""


@dataclass(frozen=True, slots=True)
class AppendResult:
    appended: int
    duplicates: int
    last_seq: int


@dataclass(frozen=True, slots=True)
class VerifyReport:
    ok: bool
    rows_checked: int
    first_broken_seq: int | None = None
    reason: str = ""


class RunRow(msgspec.Struct, frozen=True):
    run_id: str
    events: int
    first_ts: float
    last_ts: float
    task: str | None
    policy: str | None
    target: str | None
    status: str | None
    speedup: float | None
    measured_on: str | None


_LOCK_WAIT_S = 3.0
_open_paths: dict[str, int] = {}
_open_paths_lock = threading.Lock()
_HOLDER_RE = re.compile(r"Conflicting lock is held in (?P<prog>.*?) \(PID (?P<pid>\d+)\)")


def _holder_description(message: str) -> str:
    match = _HOLDER_RE.search(message)
    if not match:
        return "another process"
    pid = int(match.group("pid"))
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        cmdline = match.group("prog")
    return f"process {pid} ({cmdline})"


def _chain(prev: bytes, seq: int, body: bytes) -> bytes:
    """The row hash; `append` inlines the same expression."""
    return hashlib.sha256(prev + seq.to_bytes(8, "big") + body).digest()


_ENCODER = msgspec.json.Encoder()
_TAGS: dict[type[Event], str] = {cls: name for name, cls in EVENT_TYPES_BY_NAME.items()}


class EventLog:
    """An open kernelgraph log. Writable by default; `read_only=True` for analysis."""

    def __init__(self, path: str | os.PathLike[str], *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self._key = os.path.realpath(self.path)
        self._con = self._connect()
        try:
            self._check_or_create()
            row = self._con.execute(
                "SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1"
            ).fetchone()
        except BaseException:
            self._release()
            raise
        self._last_seq: int = row[0] if row else 0
        self._last_hash: bytes = bytes(row[1]) if row else GENESIS_HASH

    # --- opening ----------------------------------------------------------------------

    def _connect(self) -> duckdb.DuckDBPyConnection:
        if self.read_only and not self.path.exists():
            raise LogError(f"{self.path}: no such log")
        if not self.path.parent.is_dir():
            raise LogError(f"{self.path}: no such directory {self.path.parent}")
        with _open_paths_lock:
            if not self.read_only and self._key in _open_paths:
                raise LogLockedError(
                    f"{self.path} is already open for writing in this process (pid {os.getpid()})"
                )
            try:
                con = self._connect_waiting_for_readers()
            except duckdb.IOException as exc:
                message = str(exc)
                if "lock" in message.lower():
                    raise LogLockedError(
                        f"{self.path} is held by {_holder_description(message)}; "
                        "only one process may write a log (stop it, or read after it exits)"
                    ) from None
                raise NotAKernelgraphLog(
                    f"{self.path} is not a kernelgraph log: {message.splitlines()[0]}"
                ) from None
            except duckdb.Error as exc:
                raise CorruptLog(f"{self.path} cannot be opened: {str(exc).splitlines()[0]}") from None
            con.execute("SET preserve_insertion_order = true")  # read() relies on it
            if not self.read_only:
                _open_paths[self._key] = os.getpid()
        return con

    def _connect_waiting_for_readers(self) -> duckdb.DuckDBPyConnection:
        """A reader (`events --follow`, `watch`) holds the file for one poll; a writer waits it out.

        A writer that still holds the file after `_LOCK_WAIT_S` is another writer, reported as such.
        """
        deadline = time.monotonic() + (0.0 if self.read_only else _LOCK_WAIT_S)
        pause = 0.01
        while True:
            try:
                return duckdb.connect(str(self.path), read_only=self.read_only)
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower() or time.monotonic() >= deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.2)

    def _check_or_create(self) -> None:
        tables = {r[0] for r in self._con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        if not tables and not self.read_only:
            self._con.begin()
            self._con.execute(_SCHEMA)
            self._con.executemany(
                "INSERT INTO kg_meta VALUES (?, ?)",
                [("format", FORMAT_NAME), ("schema_version", str(SCHEMA_VERSION)),
                 ("created_ts", repr(time.time())), ("views_sha256", VIEWS_SHA256)],
            )
            create_views(self._con, temporary=False)
            self._con.commit()
            self._views_current = True
            return
        if "kg_meta" not in tables:
            raise NotAKernelgraphLog(f"{self.path} is a DuckDB database but not a kernelgraph log")
        meta = dict(self._con.execute("SELECT key, value FROM kg_meta").fetchall())
        if meta.get("format") != FORMAT_NAME:
            raise NotAKernelgraphLog(f"{self.path} is a DuckDB database but not a kernelgraph log")
        version = int(meta.get("schema_version", "0"))
        if version > SCHEMA_VERSION:
            raise LogFromNewerSchema(
                f"{self.path} was written with log schema v{version}; this kernelgraph reads up to "
                f"v{SCHEMA_VERSION}. Upgrade kernelgraph to open it."
            )
        # Stored in the file for plain `duckdb` sessions; a read-only open cannot store them,
        # so `sql()` makes temporary ones with the current definitions when these are older.
        self._views_current = meta.get("views_sha256") == VIEWS_SHA256
        if not self._views_current and not self.read_only:
            self._con.begin()
            create_views(self._con, temporary=False)
            self._con.execute("INSERT OR REPLACE INTO kg_meta VALUES ('views_sha256', ?)",
                              [VIEWS_SHA256])
            self._con.commit()
            self._views_current = True

    def _release(self) -> None:
        try:
            self._con.close()
        finally:
            if not self.read_only:
                with _open_paths_lock:
                    _open_paths.pop(self._key, None)

    def close(self) -> None:
        if getattr(self, "_con", None) is not None:
            self._release()
            self._con = None  # type: ignore[assignment]

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writing ----------------------------------------------------------------------

    @property
    def last_seq(self) -> int:
        return self._last_seq

    def append(self, events: Sequence[Event]) -> AppendResult:
        """Append a batch in one transaction; events already in the log are skipped."""
        if self.read_only:
            raise LogError(f"{self.path} is open read-only")
        if not events:
            return AppendResult(0, 0, self._last_seq)
        fresh: list[Event] = []
        batch_ids: set[str] = set()
        for event in events:
            if event.event_id not in batch_ids:
                batch_ids.add(event.event_id)
                fresh.append(event)
        existing = self._existing_ids(batch_ids)
        if existing:
            fresh = [e for e in fresh if e.event_id not in existing]
        duplicates = len(events) - len(fresh)
        if not fresh:
            return AppendResult(0, duplicates, self._last_seq)

        # The hot loop of the recorder: inlined on purpose (see benchmarks/eventstore.py).
        rows = []
        seq, prev = self._last_seq, self._last_hash
        encode, sha256, tags = _ENCODER.encode, hashlib.sha256, _TAGS
        for event in fresh:
            seq += 1
            body = encode(event)
            prev = sha256(prev + seq.to_bytes(8, "big") + body).digest()
            rows.append((seq, event.event_id, event.run_id, tags[type(event)], body.decode(), prev))
        self._append_rows("events", rows)
        self._last_seq, self._last_hash = seq, prev
        return AppendResult(len(fresh), duplicates, seq)

    def _existing_ids(self, ids: set[str]) -> set[str]:
        if self._last_seq == 0:
            return set()
        # Ids are time-ordered, so the lower bound lets DuckDB skip old row groups.
        rows = self._con.execute(
            "SELECT event_id FROM events WHERE event_id >= ? "
            "AND event_id IN (SELECT unnest(?::VARCHAR[]))",
            [min(ids), list(ids)],
        ).fetchall()
        return {r[0] for r in rows}

    def put_artifact(self, data: bytes, *, kind: str) -> str:
        return self.put_artifacts([(data, kind)])[0]

    def put_artifacts(self, items: Iterable[tuple[bytes, str]]) -> list[str]:
        """Store each (data, kind) once, keyed by its sha256; returns the hashes in order."""
        if self.read_only:
            raise LogError(f"{self.path} is open read-only")
        staged: dict[str, tuple[bytes, str]] = {}
        hashes = []
        for data, kind in items:
            sha = hashlib.sha256(data).hexdigest()
            hashes.append(sha)
            staged.setdefault(sha, (bytes(data), kind))
        if not staged:
            return hashes
        present = {
            r[0]
            for r in self._con.execute(
                "SELECT sha256 FROM artifacts WHERE sha256 IN (SELECT unnest(?::VARCHAR[]))",
                [list(staged)],
            ).fetchall()
        }
        now = time.time()
        rows = [(sha, kind, len(data), now, data)
                for sha, (data, kind) in staged.items() if sha not in present]
        if rows:
            self._append_rows("artifacts", rows)
        return hashes

    def _append_rows(self, table: str, rows: list[tuple[object, ...]]) -> None:
        """All rows in one transaction through the DuckDB appender, or none of them."""
        con = self._con
        con.begin()
        try:
            appender = con.appender(table)
            appender.append_rows(rows)
            appender.flush()
            con.commit()
        except BaseException:
            con.rollback()
            raise

    # --- reading ----------------------------------------------------------------------

    def get_artifact(self, sha256: str) -> bytes:
        row = self._con.execute("SELECT data FROM artifacts WHERE sha256 = ?", [sha256]).fetchone()
        if row is None:
            raise KeyError(f"no artifact {sha256} in {self.path}")
        data = bytes(row[0])
        if hashlib.sha256(data).hexdigest() != sha256:
            raise CorruptLog(f"artifact {sha256} in {self.path} does not match its hash")
        return data

    def has_artifact(self, sha256: str) -> bool:
        return self._con.execute(
            "SELECT 1 FROM artifacts WHERE sha256 = ?", [sha256]
        ).fetchone() is not None

    def read(
        self,
        *,
        run_id: str | None = None,
        types: Iterable[str] | None = None,
        after_seq: int = 0,
        limit: int | None = None,
    ) -> Iterator[tuple[int, Event]]:
        """Stream (seq, event) in log order, decoding lazily, lifting old schemas."""
        where, params = ["seq > ?"], [after_seq]
        if run_id is not None:
            where.append("run_id = ?")
            params.append(run_id)
        if types is not None:
            where.append("type IN (SELECT unnest(?::VARCHAR[]))")
            params.append(list(types))
        # No ORDER BY: rows are appended in seq order and DuckDB scans preserve insertion
        # order, which saves a sort of every body; the loop below checks it holds.
        sql = f"SELECT seq, body FROM events WHERE {' AND '.join(where)}"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        cursor = self._con.cursor()
        try:
            cursor.execute(sql, params)
            decode, last = decode_event, after_seq
            while chunk := cursor.fetchmany(_FETCH_ROWS):
                for seq, body in chunk:
                    if seq <= last:
                        raise CorruptLog(f"{self.path}: row seq={seq} is stored after seq={last}; "
                                         "the log was rewritten (run `kernelgraph log verify`)")
                    last = seq
                    try:
                        yield seq, decode(body)
                    except EventDecodeError as exc:
                        raise CorruptLog(f"{self.path} row seq={seq}: {exc}") from None
        finally:
            cursor.close()

    def events(self, **filters: object) -> Iterator[Event]:
        for _, event in self.read(**filters):  # type: ignore[arg-type]
            yield event

    def count(self) -> int:
        return self._con.execute("SELECT count(*) FROM events").fetchone()[0]  # type: ignore[index]

    def runs(self) -> list[RunRow]:
        """One row per run: its request, its end (if any), and event counts."""
        rows = self._con.execute(
            """
            SELECT run_id, count(*),
                   min(CAST(json_extract(body, '$.ts') AS DOUBLE)),
                   max(CAST(json_extract(body, '$.ts') AS DOUBLE)),
                   any_value(json_extract_string(body, '$.task_name')) FILTER (WHERE type = 'RunRequested'),
                   any_value(json_extract_string(body, '$.policy')) FILTER (WHERE type = 'RunRequested'),
                   any_value(json_extract_string(body, '$.target')) FILTER (WHERE type = 'RunRequested'),
                   arg_max(json_extract_string(body, '$.status'), seq) FILTER (WHERE type = 'RunFinished'),
                   arg_max(CAST(json_extract(body, '$.speedup') AS DOUBLE), seq) FILTER (WHERE type = 'RunFinished'),
                   arg_max(json_extract_string(body, '$.measured_on'), seq) FILTER (WHERE type = 'RunFinished')
            FROM events GROUP BY run_id ORDER BY min(seq)
            """
        ).fetchall()
        return [RunRow(*r) for r in rows]

    def verify(self) -> VerifyReport:
        """Recompute the chain in storage order; name the first row whose hash, place or columns
        are wrong."""
        cursor = self._con.cursor()
        prev, expected_seq, checked = GENESIS_HASH, 1, 0
        try:
            cursor.execute(f"SELECT {_EVENT_COLUMNS} FROM events")  # storage order, as read()
            while chunk := cursor.fetchmany(_FETCH_ROWS):
                for seq, event_id, run_id, type_name, body, stored in chunk:
                    if seq != expected_seq:
                        return VerifyReport(False, checked, expected_seq,
                                            f"row seq={expected_seq} is missing (next row is seq={seq})")
                    body_bytes = body.encode()
                    prev = _chain(prev, seq, body_bytes)
                    if prev != bytes(stored):
                        return VerifyReport(False, checked, seq,
                                            f"row seq={seq} ({event_id}) does not match the hash chain")
                    try:
                        event = decode_event(body_bytes)
                    except EventDecodeError as exc:
                        return VerifyReport(False, checked, seq, f"row seq={seq} body: {exc}")
                    if (event.event_id, event.run_id, event.type_name) != (event_id, run_id, type_name):
                        return VerifyReport(False, checked, seq,
                                            f"row seq={seq} columns disagree with its body")
                    checked += 1
                    expected_seq += 1
        finally:
            cursor.close()
        return VerifyReport(True, checked)

    def sql(self, query: str, params: Sequence[object] | None = None) -> list[tuple[object, ...]]:
        """Run read-only analysis SQL against the log's tables and views."""
        return self.query(query, params)[1]

    def query(self, query: str, params: Sequence[object] | None = None
              ) -> tuple[list[str], list[tuple[object, ...]]]:
        """Like `sql`, with the column names first."""
        if not self._views_current:
            create_views(self._con, temporary=True)
            self._views_current = True
        cursor = self._con.execute(query, params or [])
        return [d[0] for d in cursor.description or ()], cursor.fetchall()
