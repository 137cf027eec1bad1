"""Commands: requests for work sent to one agent kind on `kg.cmd.<agent>`.

A command class may route by one of its fields (`route_field`): its commands then travel on
`kg.cmd.<agent>.<value>` and only the workers that take that route see them (an executor
command routes by its target, so a TPU machine's executor takes only `tpu` work).
`Command.subject` is the one place a command's subject is derived.

A command is imperative ("do this"), an event is past tense ("this happened"). Every
command is a frozen msgspec Struct tagged with a stable name (never the class path), so
senders and workers of different versions agree on the wire. `command_id` is a
time-ordered id; it is the command's JetStream message id (a command sent twice is
queued once) and the seed of the ids of the events its handler yields (a command
redelivered after a crash yields events with the same ids, which the log keeps once).
Later issues add their commands as subclasses; `Ping` exists for tests, benchmarks and
`kernelgraph ping`.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar, Self

import msgspec

from bus import subjects
from eventstore.events import new_event_id


class Command(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """The envelope shared by every command."""

    command_id: str
    run_id: str
    ts: float
    node_id: str | None = None
    causation_id: str | None = None

    target: ClassVar[str | None] = None
    """The agent kind that takes this command when the sender names none."""
    route_field: ClassVar[str | None] = None
    """The field whose value routes the command within its agent kind (None: not routed)."""

    @classmethod
    def create(
        cls,
        *,
        run_id: str,
        node_id: str | None = None,
        causation_id: str | None = None,
        **payload: Any,
    ) -> Self:
        """Stamp a new command with a fresh id and the current time."""
        return cls(
            command_id=new_event_id(),
            run_id=run_id,
            ts=time.time(),
            node_id=node_id,
            causation_id=causation_id,
            **payload,
        )

    @property
    def type_name(self) -> str:
        return type(self).__struct_config__.tag  # type: ignore[return-value]

    @property
    def route(self) -> str | None:
        """The value of `route_field`, or None for a command that is not routed."""
        return None if self.route_field is None else str(getattr(self, self.route_field))

    def subject(self, agent: str | None = None) -> str:
        """Where this command is published: its agent kind's subject (`agent` overrides the
        class's `target`), with its route appended when the class routes."""
        kind = agent or self.target
        if kind is None:
            raise ValueError(f"{self.type_name} names no target agent; pass agent=")
        return subjects.command_subject(kind, self.route)


class Ping(Command, frozen=True, kw_only=True, tag="Ping"):
    """Ask the echo agent for `events` PingAnswered events (see `bus.echo` for the knobs)."""

    target: ClassVar[str | None] = "echo"

    seq: int = 0
    echo: str = ""
    events: int = 1
    delay_s: float = 0.0
    gap_s: float = 0.0
    error: str = ""


def command_types() -> dict[str, type[Command]]:
    """Every concrete command class defined so far, by tag; two classes may not share a tag."""
    found: dict[str, type[Command]] = {}
    pending: list[type[Command]] = list(Command.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        tag = cls.__struct_config__.tag
        if not isinstance(tag, str):
            continue
        if tag in found and found[tag] is not cls:
            raise TypeError(
                f"command tag {tag!r} is used by both {found[tag].__qualname__} and {cls.__qualname__}"
            )
        found[tag] = cls
    return found
