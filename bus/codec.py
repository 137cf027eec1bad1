"""msgspec encoding of commands and events, and the deterministic ids of handler results.

A handler that is killed after publishing some of its events and then runs again on
redelivery must not record its results twice. Its events therefore get ids derived from
the command (`derived_event_id(command_id, index)`): the same command yields the same ids,
JetStream drops the repeats inside its duplicate window and the log's idempotent append
drops them after it. The ids keep the ULID shape and the command's creation time, so they
still sort by time (to the millisecond), and a command's events sort in yield order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any, Union

import msgspec

from bus.commands import Command
from eventstore.codec import EventDecodeError, decode_event
from eventstore.eventids import CROCKFORD as _CROCKFORD
from eventstore.eventids import is_ulid
from eventstore.eventids import ulid_ms as _ulid_ms

MAX_EVENTS_PER_COMMAND = 0xFFFF
"""Indices 0..65534 are for a handler's events; 65535 is reserved for the failure event."""
FAILURE_INDEX = 0xFFFF

_encoder = msgspec.json.Encoder()

__all__ = [
    "EventDecodeError",
    "command_decoder",
    "decode_event",
    "derived_event_id",
    "encode",
    "salvage_run_id",
]


def encode(obj: Any) -> bytes:
    """Commands and events travel as JSON, the same bytes the log stores."""
    return _encoder.encode(obj)


def command_decoder(types: Iterable[type[Command]]) -> msgspec.json.Decoder[Any]:
    """A decoder that accepts exactly the given command types (by their tag)."""
    unique = tuple(dict.fromkeys(types))
    if not unique:
        raise ValueError("a service must take at least one command type")
    union: Any = unique[0] if len(unique) == 1 else Union[unique]  # noqa: UP007
    return msgspec.json.Decoder(union)


class _RunIdOnly(msgspec.Struct):
    run_id: str = ""


def salvage_run_id(data: bytes) -> str:
    """The run id of a message that failed to decode, when its JSON still holds one."""
    try:
        run_id = msgspec.json.decode(data, type=_RunIdOnly).run_id
    except (msgspec.DecodeError, msgspec.ValidationError):
        return ""
    return run_id if run_id.replace("-", "").replace("_", "").isalnum() else ""


class DerivedIds:
    """The ids of one command's events: `DerivedIds(command_id, fallback_ms)[index]`.

    Layout of the 128-bit value: 48-bit milliseconds (the seed's own time when the seed is
    a ULID, else `fallback_ms`), 64 bits of blake2b(seed), 16 bits of index. The first 22
    characters depend only on the seed, so they are computed once per command.
    """

    __slots__ = ("_low_digest", "_prefix")

    def __init__(self, seed: str, *, fallback_ms: int) -> None:
        ms = _ulid_ms(seed) if is_ulid(seed) else fallback_ms
        digest = int.from_bytes(hashlib.blake2b(seed.encode(), digest_size=8).digest(), "big")
        value = (ms << 80) | (digest << 16)
        self._prefix = "".join(_CROCKFORD[(value >> shift) & 31] for shift in range(125, 15, -5))
        self._low_digest = (digest & 0xF) << 16

    def __getitem__(self, index: int) -> str:
        if not 0 <= index <= FAILURE_INDEX:
            raise ValueError(f"{index=} must be within 0..{FAILURE_INDEX}")
        low = self._low_digest | index
        return self._prefix + (
            _CROCKFORD[low >> 15] + _CROCKFORD[(low >> 10) & 31]
            + _CROCKFORD[(low >> 5) & 31] + _CROCKFORD[low & 31]
        )


def derived_event_id(seed: str, index: int, *, fallback_ms: int) -> str:
    """A ULID-shaped id that depends only on `seed` (a command id) and `index`; see DerivedIds."""
    return DerivedIds(seed, fallback_ms=fallback_ms)[index]
