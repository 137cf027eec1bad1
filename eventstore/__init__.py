"""Events, the DuckDB event log, and content-addressed artifacts."""

from __future__ import annotations

from eventstore.codec import EventDecodeError, decode_event, encode_event
from eventstore.events import EVENT_TYPES, EVENT_TYPES_BY_NAME, AnyEvent, Event, new_event_id
from eventstore.log import (
    AppendResult,
    CorruptLog,
    EventLog,
    LogError,
    LogFromNewerSchema,
    LogLockedError,
    NotAKernelgraphLog,
    VerifyReport,
)

__all__ = [
    "EVENT_TYPES",
    "EVENT_TYPES_BY_NAME",
    "AnyEvent",
    "AppendResult",
    "CorruptLog",
    "Event",
    "EventDecodeError",
    "EventLog",
    "LogError",
    "LogFromNewerSchema",
    "LogLockedError",
    "NotAKernelgraphLog",
    "VerifyReport",
    "decode_event",
    "encode_event",
    "new_event_id",
]
