"""The projection protocol: a pure fold over events that can resume from a position.

A projection owns one msgspec `state` struct and a table of handlers keyed by event
class. `apply` folds one event; `rebuild` folds a whole stream from empty. Because the
state is plain data, `snapshot()`/`restore()` let a reader save its place (`position`,
the log `seq` of the last event folded) and continue later with only the new events:
incremental folding and a full rebuild must always agree.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Generic, Self, TypeVar

import msgspec

from eventstore.events import Event

S = TypeVar("S", bound=msgspec.Struct)

Handler = Callable[[Any, Any], None]


class Projection(Generic[S]):
    """Subclasses set `state_type` and register handlers with `@handles(EventType, ...)`."""

    state_type: ClassVar[type[msgspec.Struct]]
    _handlers: ClassVar[dict[type[Event], Handler]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        handlers: dict[type[Event], Handler] = {}
        for base in reversed(cls.__mro__):
            own: dict[type[Event], Handler] = {}
            for attr in vars(base).values():
                for event_type in getattr(attr, "_handles", ()):
                    if event_type in own:
                        raise TypeError(f"{base.__name__} handles {event_type.__name__} twice")
                    own[event_type] = attr
            handlers.update(own)
        cls._handlers = handlers

    def __init__(self) -> None:
        self.state: S = self.state_type()  # type: ignore[assignment]
        self.position = 0

    def accepts(self, event: Event) -> bool:
        """Filter hook, e.g. a projection bound to one run."""
        return True

    def apply(self, event: Event, seq: int | None = None) -> None:
        handler = self._handlers.get(type(event))
        if handler is not None and self.accepts(event):
            handler(self, event)
        if seq is not None:
            self.position = seq

    def apply_all(self, events: Iterable[Event]) -> Self:
        for event in events:
            self.apply(event)
        return self

    def apply_records(self, records: Iterable[tuple[int, Event]]) -> Self:
        for seq, event in records:
            self.apply(event, seq)
        return self

    @classmethod
    def rebuild(cls, events: Iterable[Event], *args: Any, **kwargs: Any) -> Self:
        return cls(*args, **kwargs).apply_all(events)

    def snapshot(self) -> bytes:
        return msgspec.msgpack.encode({"position": self.position, "state": self.state})

    def restore(self, data: bytes) -> Self:
        raw = msgspec.msgpack.decode(data)
        self.state = msgspec.convert(raw["state"], self.state_type)  # type: ignore[assignment]
        self.position = raw["position"]
        return self

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.state == self.state  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]


def handles(*event_types: type[Event]) -> Callable[[Handler], Handler]:
    """Mark a method as the fold step for these event types."""

    def mark(fn: Handler) -> Handler:
        fn._handles = event_types  # type: ignore[attr-defined]
        return fn

    return mark
