"""Durable calls: send a command and wait for its result, remembering every answer in the log.

An orchestrator (Auto, the autotuner's fan-out) is a straight-line coroutine whose state is
the run's event history. Every command it sends gets an id derived from its own command id
and a step key, so running the same coroutine again after a crash sends the same commands.
Before sending, `RunHistory.call` looks for the command's result among the events already
on the stream: a step that finished before the crash is answered from history and never
redone; a step in flight is waited for (its redelivered command has the same id, so
JetStream keeps it once).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

from nats.aio.client import Client as NATS
from nats.js.api import DeliverPolicy

from bus import subjects
from bus.client import BusClient, CommandFailed
from bus.codec import EventDecodeError, decode_event, derived_event_id
from bus.commands import Command
from eventstore.events import AgentFailed, Event

__all__ = ["CommandFailed", "RunHistory", "step_id"]


def step_id(parent: Command, key: str) -> str:
    """The id of the command a handler of `parent` sends for step `key` (same on every run)."""
    return derived_event_id(f"{parent.command_id}/{key}", 0, fallback_ms=int(parent.ts * 1000))


class RunHistory:
    """Every event of one run, past then live, indexed by the command that caused it."""

    def __init__(self, nc: NATS, run_id: str) -> None:
        self.nc = nc
        self.run_id = run_id
        self.client = BusClient(nc)
        self.events: list[Event] = []
        self._by_cause: dict[str, list[Event]] = {}
        self._changed = asyncio.Condition()
        self._caught_up = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self._sub = None

    async def __aenter__(self) -> RunHistory:
        js = self.nc.jetstream()
        self._sub = await js.subscribe(subjects.run_events_subject(self.run_id),
                                       ordered_consumer=True, deliver_policy=DeliverPolicy.ALL)
        info = await self._sub.consumer_info()
        # num_pending is 0 too when the server has already pushed the whole backlog to this
        # client, unread; then the reader catches up on the last one (its num_pending is 0).
        if not info.num_pending and not info.delivered.consumer_seq:
            self._caught_up.set()
        self._reader = asyncio.create_task(self._read(), name=f"history-{self.run_id}")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()

    async def _read(self) -> None:
        assert self._sub is not None
        while True:
            try:
                msg = await self._sub.next_msg(timeout=None)
            except TimeoutError:
                continue
            try:
                event = decode_event(msg.data)
            except EventDecodeError:
                event = None
            if event is not None:
                self.events.append(event)
                if event.causation_id:
                    self._by_cause.setdefault(event.causation_id, []).append(event)
                async with self._changed:
                    self._changed.notify_all()
            if msg.metadata.num_pending == 0:
                self._caught_up.set()

    async def caught_up(self) -> None:
        """Return once every event the stream held when the history opened has been read."""
        await self._caught_up.wait()

    def caused_by(self, command_id: str) -> list[Event]:
        return list(self._by_cause.get(command_id, ()))

    def of_type(self, *types: type[Event]) -> list[Event]:
        return [e for e in self.events if isinstance(e, types)]

    async def call(
        self,
        cmd: Command,
        done: type[Event] | Sequence[type[Event]],
        *,
        agent: str | None = None,
        timeout: float | None = None,
    ) -> Event:
        """The first event of type `done` caused by `cmd`, sending `cmd` only if none exists yet.

        Raises `CommandFailed` when the agent gave up on it (AgentFailed).
        """
        (event,) = await self.gather([cmd], done, agent=agent, timeout=timeout)
        return event

    async def gather(
        self,
        cmds: Sequence[Command],
        done: type[Event] | Sequence[type[Event]],
        *,
        agent: str | None = None,
        timeout: float | None = None,
    ) -> list[Event | AgentFailed]:
        """Like `call` for several commands at once; a failed one yields its AgentFailed
        (only when more than one command is gathered) instead of raising."""
        kinds = (done,) if isinstance(done, type) else tuple(done)
        await self._caught_up.wait()
        for cmd in cmds:
            if self._result(cmd.command_id, kinds) is None:
                await self.client.send(cmd, agent=agent)

        def all_answered() -> bool:
            return all(self._result(c.command_id, kinds) is not None for c in cmds)

        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(all_answered)
        results: list[Event | AgentFailed] = []
        for cmd in cmds:
            result = self._result(cmd.command_id, kinds)
            assert result is not None
            if isinstance(result, AgentFailed) and len(cmds) == 1:
                raise CommandFailed(result)
            results.append(result)
        return results

    def _result(self, command_id: str, kinds: tuple[type[Event], ...]) -> Event | None:
        for event in self._by_cause.get(command_id, ()):
            if isinstance(event, (*kinds, AgentFailed)):
                return event
        return None

    def wait_until(self, predicate: Callable[[], bool]) -> asyncio.Future[bool]:
        async def waiter() -> bool:
            async with self._changed:
                return await self._changed.wait_for(predicate)

        return asyncio.ensure_future(waiter())
