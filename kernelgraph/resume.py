"""Continuing a run that stopped: `kernelgraph resume DB --run ID`.

A run's state is its events, so resuming is resending the command that started it (kept
in `RunRequested.start_command`, same id): the orchestrator walks its steps again, every
finished one is answered from the history and only the rest is done. When the bus lost
what the log holds (a fresh JetStream store, another machine), the run's events and the
log's artifacts are published again first; the log keeps every event once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import msgspec
from nats.aio.client import Client as NATS
from nats.js.api import DeliverPolicy

from agents.commands import StartRun, StartSearch
from bus import artifacts, subjects
from bus.codec import encode
from eventstore.events import Event, RunFinished, RunRequested
from eventstore.log import EventLog
from kernelgraph.client import send_start
from kernelgraph.errors import KernelgraphError


class ResumeError(KernelgraphError, ValueError):
    """The run cannot be resumed as asked (unknown, already finished, no start command)."""


@dataclass
class SavedRun:
    """What the log holds of one run: enough to put it back on a bus and restart it."""

    requested: RunRequested
    start: StartRun
    events: list[Event]
    finished: RunFinished | None

    @property
    def run_id(self) -> str:
        return self.requested.run_id


def load_run(db: Path, run_id: str | None) -> SavedRun:
    """The run to resume: `run_id`, or the log's only unfinished run."""
    if not db.is_file():
        raise ResumeError(f"{db}: no such log")
    with EventLog(db, read_only=True) as log:
        if run_id is None:
            open_runs = [r.run_id for r in log.runs() if r.status is None]
            if len(open_runs) != 1:
                listing = ", ".join(open_runs) or "none"
                raise ResumeError(f"{db}: say which run to resume with --run "
                                  f"(unfinished runs: {listing})")
            run_id = open_runs[0]
        events = list(log.events(run_id=run_id))
    requested = next((e for e in events if isinstance(e, RunRequested)), None)
    if requested is None:
        raise ResumeError(f"{db}: no run {run_id!r} (see `kernelgraph runs {db}`)")
    if not requested.start_command:
        raise ResumeError(f"run {run_id} was recorded without its start command; it cannot "
                          "be resumed")
    kind = StartSearch if requested.start_command.get("type") == "StartSearch" else StartRun
    try:
        start = msgspec.convert(requested.start_command, kind)
    except msgspec.ValidationError as exc:
        raise ResumeError(f"run {run_id}: its start command cannot be read: {exc}") from None
    finished = next((e for e in events if isinstance(e, RunFinished)), None)
    return SavedRun(requested=requested, start=start, events=events, finished=finished)


async def events_on_bus(nc: NATS, run_id: str) -> int:
    js = nc.jetstream()
    sub = await js.subscribe(subjects.run_events_subject(run_id), ordered_consumer=True,
                             deliver_policy=DeliverPolicy.ALL)
    try:
        info = await sub.consumer_info()
        # What the server already pushed to this subscription is no longer pending.
        return int(info.num_pending or 0) + int(info.delivered.consumer_seq or 0)
    finally:
        await sub.unsubscribe()


ArtifactReader = Callable[[], Awaitable[list[tuple[bytes, str]]]]
"""Every artifact of the log as (data, kind); in the embedded runtime the recorder reads them."""


async def resume(nc: NATS, saved: SavedRun, read_artifacts: ArtifactReader | None = None) -> int:
    """Put the run back on the bus when the bus has fewer of its events than the log (the
    artifacts first, so no event names one the bus lacks), then resend its start command.
    Returns how many events were published again."""
    js = nc.jetstream()
    restored = 0
    if await events_on_bus(nc, saved.run_id) < len(saved.events):
        if read_artifacts is not None:
            await artifacts.publish_artifacts(js, await read_artifacts(), max_payload=nc.max_payload)
        for event in saved.events:
            await js.publish(subjects.event_subject(event.run_id, event.type_name), encode(event),
                             headers={subjects.MSG_ID_HEADER: event.event_id})
        restored = len(saved.events)
    await send_start(js, saved.start)
    return restored
