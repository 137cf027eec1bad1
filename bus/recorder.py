"""The recorder: the only writer of the DuckDB log, fed from the events and artifacts streams.

Each round it takes the events that are waiting (up to `max_batch`; when none are, the
first to arrive within `max_wait_s`, plus what comes in the next `linger_s`), then stores
every artifact waiting on KG_ART (`put_artifacts`, in bounded chunks, each acked once
stored), then appends the events in one transaction (`EventLog.append`) and only then acks
them with one ack-all. While one batch commits the next accumulates,
so batches grow with load (group commit) and a quiet bus records within milliseconds.

Crash safety: nothing is acked before it is committed, and at start the consumers are
restarted just after the last acked message (`bus.streams.reset_recorder_consumer`), so a
recorder killed at any moment redelivers its unfinished batch at once; the log's append is
idempotent on event_id, so whatever had been committed is not written twice.

Artifacts before events: a producer publishes an artifact and waits for its ack before it
publishes an event naming it; the recorder fetches artifacts *after* it has the event, so
the artifact is already in the stream and goes into the log no later than the event.

A message on the events stream that does not decode is recorded as `MessageDeadLettered`
(with its raw bytes), never dropped and never fatal.

It also answers `kg.log.verify` (`bus.logverify`): the chain's verification, a run's
recorded events and which artifacts the log lacks, so an auditor elsewhere can audit.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import nats.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from bus import subjects
from bus.codec import EventDecodeError, decode_event, derived_event_id, salvage_run_id
from bus.logverify import LogVerifier
from bus.pull import PullConsumer
from bus.streams import BusSettings, ensure_streams, reset_recorder_consumers
from eventstore.events import Event, MessageDeadLettered
from eventstore.log import EventLog
from kernelgraph.errors import KernelgraphError

log = logging.getLogger("kernelgraph.recorder")

PRODUCER = "recorder@1"
ARTIFACT_CHUNK = 256
ARTIFACT_CHUNK_BYTES = 64 * 1024 * 1024
"""Artifacts are stored in chunks of at most this many messages and bytes (above max_payload)."""

T = TypeVar("T")


@dataclass
class RecorderStats:
    batches: int = 0
    events_recorded: int = 0
    duplicates: int = 0
    artifacts_stored: int = 0
    dead_lettered: int = 0
    last_seq: int = 0
    last_batch: int = 0
    commit_s: float = 0.0

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


class RecorderError(KernelgraphError, RuntimeError):
    """The log refused a batch several times over; the recorder stops rather than spin."""


class Recorder:
    """Copies the bus's events and artifacts into one EventLog; see the module docstring."""

    name = "recorder"

    def __init__(
        self,
        nc: NATS,
        event_log: EventLog,
        *,
        settings: BusSettings | None = None,
        max_batch: int = 5000,
        max_wait_s: float = 0.25,
        linger_s: float = 0.005,
        commit_attempts: int = 3,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"{max_batch=} must be >= 1")
        self.nc = nc
        self.js = nc.jetstream()
        self.log = event_log
        self.settings = settings or BusSettings()
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.linger_s = linger_s
        self.commit_attempts = commit_attempts
        self.stats = RecorderStats(last_seq=event_log.last_seq)
        self._db = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="recorder-db")
        self._events: PullConsumer | None = None
        self._artifacts: PullConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._verify_sub: Subscription | None = None
        self._stopping = asyncio.Event()
        self._idle = asyncio.Event()

    async def start(self) -> None:
        await ensure_streams(self.js, self.settings)
        await reset_recorder_consumers(self.js, self.settings)
        self._events = await PullConsumer(
            self.nc, subjects.EVENTS_STREAM, subjects.RECORDER_EVENTS_CONSUMER
        ).open()
        self._artifacts = await PullConsumer(
            self.nc, subjects.ARTIFACTS_STREAM, subjects.RECORDER_ARTIFACTS_CONSUMER
        ).open()
        self._task = asyncio.create_task(self._run(), name="recorder")
        verifier = LogVerifier(self.read, self.nc.max_payload)
        self._verify_sub = await self.nc.subscribe(subjects.LOG_VERIFY, queue=self.name,
                                                   cb=verifier.on_request)
        await self.nc.flush()  # the server knows the subscription once start() returns

    async def stop(self) -> None:
        """Record everything already on the stream, then stop (call after the services stopped)."""
        self._stopping.set()
        if self._verify_sub is not None:
            with contextlib.suppress(nats.errors.Error):
                await self._verify_sub.unsubscribe()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        for pull in (self._events, self._artifacts):
            if pull is not None:
                await pull.close()
        self._db.shutdown(wait=True)

    async def run(self, stop: asyncio.Event) -> None:
        await self.start()
        try:
            await asyncio.wait(
                [asyncio.ensure_future(stop.wait()), self._task],  # type: ignore[list-item]
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            await self.stop()
        if self._task is not None and not self._task.cancelled() and self._task.exception():
            raise self._task.exception()  # type: ignore[misc]

    async def read(self, query: Callable[[EventLog], T]) -> T:
        """Run `query(log)` on the recorder's own thread: the one safe way to read a log it is writing."""
        return await asyncio.get_running_loop().run_in_executor(self._db, query, self.log)

    @property
    def failed(self) -> BaseException | None:
        if self._task is None or not self._task.done() or self._task.cancelled():
            return None
        return self._task.exception()

    async def wait_idle(self, timeout: float = 10.0) -> None:
        """Return once a round found nothing left to record (tests and benchmarks)."""
        self._idle.clear()
        await asyncio.wait_for(self._idle.wait(), timeout)

    async def _run(self) -> None:
        assert self._events is not None and self._artifacts is not None
        while True:
            stopping = self._stopping.is_set()
            wait = 0.0 if stopping else self.max_wait_s
            try:
                msgs = await self._events.fetch(self.max_batch, wait_s=wait)
                if msgs and len(msgs) < self.max_batch and self.linger_s > 0 and not stopping:
                    # A trickle: let a few more arrive, so a quiet bus is not one commit per event.
                    await asyncio.sleep(self.linger_s)
                    msgs += await self._events.fetch(self.max_batch - len(msgs), wait_s=0.0)
                # After the events are in hand: every artifact they can name is on KG_ART by now.
                stored = await self._store_waiting_artifacts(self._artifacts)
            except nats.errors.ConnectionClosedError:
                if stopping:
                    return
                raise
            except (nats.errors.Error, OSError) as exc:
                log.warning("recorder: fetch failed (%s); retrying", exc)
                await asyncio.sleep(0.5)
                continue
            if msgs:
                await self._commit_events(msgs)
            elif not stored:
                self._idle.set()
                if stopping:
                    return

    async def _store_waiting_artifacts(self, pull: PullConsumer) -> int:
        """Store every artifact waiting now, in chunks of bounded size, each acked once stored."""
        stored = 0
        while True:
            msgs = await pull.fetch(ARTIFACT_CHUNK, wait_s=0.0, max_bytes=ARTIFACT_CHUNK_BYTES)
            if not msgs:
                return stored
            items = [(bytes(m.data), (m.headers or {}).get(subjects.ARTIFACT_KIND_HEADER, "")) for m in msgs]
            await self._in_db(self.log.put_artifacts, items)
            with contextlib.suppress(nats.errors.Error):
                await msgs[-1].ack()  # ack-all: the whole chunk
            stored += len(msgs)
            self.stats.artifacts_stored += len(msgs)

    async def _commit_events(self, msgs: Sequence[Msg]) -> None:
        events = [self._decode(msg) for msg in msgs]
        started = time.perf_counter()
        result = await self._in_db(self.log.append, events)
        self.stats.commit_s += time.perf_counter() - started
        with contextlib.suppress(nats.errors.Error):
            await msgs[-1].ack()  # ack-all: one ack covers the batch, sent only after the commit
        self.stats.batches += 1
        self.stats.last_batch = len(events)
        self.stats.events_recorded += result.appended
        self.stats.duplicates += result.duplicates
        self.stats.last_seq = result.last_seq

    async def _in_db(self, write: Callable[[Any], T], items: Any) -> T:
        """Run one log write on the recorder's thread; a write that keeps failing stops the recorder."""
        loop = asyncio.get_running_loop()
        for attempt in range(1, self.commit_attempts + 1):
            try:
                return await loop.run_in_executor(self._db, write, items)
            except Exception as exc:
                if attempt == self.commit_attempts:
                    raise RecorderError(f"the log refused a batch {attempt} times: {exc}") from exc
                log.warning("recorder: commit failed (%s); retry %d", exc, attempt)
                await asyncio.sleep(0.2 * attempt)
        raise AssertionError("unreachable")

    def _decode(self, msg: Msg) -> Event:
        try:
            return decode_event(msg.data)
        except EventDecodeError as exc:
            meta = msg.metadata
            seed = f"{meta.stream}:{meta.sequence.stream}"
            self.stats.dead_lettered += 1
            log.warning("recorder: dead-lettered %s on %s: %s", seed, msg.subject, exc)
            return MessageDeadLettered(
                event_id=derived_event_id(seed, 0, fallback_ms=int(meta.timestamp.timestamp() * 1000)),
                run_id=salvage_run_id(msg.data),
                producer=PRODUCER,
                ts=time.time(),
                subject=msg.subject,
                error=str(exc)[:4000],
                raw=bytes(msg.data),
            )
