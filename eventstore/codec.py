"""Bytes <-> events. JSON on the wire and in the log, so plain SQL can read every body."""

from __future__ import annotations

import msgspec

from eventstore.events import _CURRENT_VERSIONS, EVENT_TYPES_BY_NAME, AnyEvent, Event
from eventstore.upcasting import upcast
from kernelgraph.errors import KernelgraphError

_encoder = msgspec.json.Encoder()
_typed = msgspec.json.Decoder(AnyEvent)
_untyped = msgspec.json.Decoder()
_current_by_class = {cls: _CURRENT_VERSIONS[name] for name, cls in EVENT_TYPES_BY_NAME.items()}


class EventDecodeError(KernelgraphError, ValueError):
    """Bytes that are not a kernelgraph event this version can read."""


def encode_event(event: Event) -> bytes:
    return _encoder.encode(event)


def decode_event(data: bytes | str) -> Event:
    """Decode one event body, lifting it to the current schema if it is older."""
    try:
        event: Event = _typed.decode(data)
    except msgspec.ValidationError:
        return _decode_upcast(data)
    except msgspec.DecodeError as exc:
        raise EventDecodeError(f"not a JSON event: {exc}") from None
    if event.v != _current_by_class[type(event)]:
        return _decode_upcast(data)
    return event


def _decode_upcast(data: bytes | str) -> Event:
    try:
        raw = _untyped.decode(data)
    except msgspec.DecodeError as exc:
        raise EventDecodeError(f"not a JSON event: {exc}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
        raise EventDecodeError("event body has no 'type'")
    type_name = raw["type"]
    current = _CURRENT_VERSIONS.get(type_name)
    if current is None:
        raise EventDecodeError(f"unknown event type {type_name!r}")
    try:
        lifted = upcast(type_name, raw, to_version=current)
        return msgspec.convert(lifted, AnyEvent)
    except (ValueError, msgspec.ValidationError) as exc:
        raise EventDecodeError(f"cannot read {type_name} event: {exc}") from None
