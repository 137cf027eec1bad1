"""Watching a run live from the events stream, while the recorder holds the log file.

DuckDB lets one process open a log, so a user who wants to watch a search as it runs
reads the bus instead: an ordered JetStream consumer (ephemeral, no ack, flow control)
over `kg.evt.<run>.>` delivers every retained event in stream order, then new ones.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection

from nats.aio.client import Client as NATS
from nats.js.api import DeliverPolicy

from bus import subjects
from bus.codec import EventDecodeError, decode_event
from eventstore.events import Event


async def watch_events(
    nc: NATS,
    *,
    run_id: str | None = None,
    types: Collection[str] | None = None,
    follow: bool = True,
    idle_s: float = 1.0,
) -> AsyncIterator[tuple[int, Event]]:
    """(stream sequence, event) for every event retained on the bus, then new ones.

    Without `follow` it stops once it has caught up with what the stream held. Messages that
    do not decode are skipped here: the recorder dead-letters them in the log.
    """
    js = nc.jetstream()
    subject = f"{subjects.PREFIX}.evt.{run_id or '*'}.>"
    info = await js.stream_info(subjects.EVENTS_STREAM)
    if not follow and info.state.messages == 0:
        return
    sub = await js.subscribe(subject, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL)
    try:
        while True:
            try:
                msg = await sub.next_msg(timeout=idle_s)
            except TimeoutError:
                if follow:
                    continue
                return  # nothing more arrived: caught up (or no event matches)
            meta = msg.metadata
            try:
                event = decode_event(msg.data)
            except EventDecodeError:
                event = None
            if event is not None and (types is None or event.type_name in types):
                yield meta.sequence.stream, event
            if not follow and meta.num_pending == 0:
                return
    finally:
        await sub.unsubscribe()
