"""Sending commands and waiting for the events they cause (orchestrators, the CLI, benchmarks).

A command is published to `kg.cmd.<agent>` (`kg.cmd.<agent>.<route>` for a routed one,
`Command.subject`) with `Nats-Msg-Id = command_id`, so sending
the same command twice queues it once. Results are matched by `causation_id ==
command_id` on a plain subscription to the run's events, opened before the command is
sent so no result can slip past; the recorder, not this client, is what makes them durable.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from bus import subjects
from bus.codec import EventDecodeError, decode_event, encode
from bus.commands import Command
from bus.streams import BusSettings, ensure_streams
from eventstore.events import AgentFailed, Event
from kernelgraph.errors import KernelgraphError


class CommandFailed(KernelgraphError, RuntimeError):
    """The agent gave up on the command (it published AgentFailed)."""

    def __init__(self, failure: AgentFailed) -> None:
        super().__init__(
            f"{failure.agent} failed {failure.command_type} after {failure.deliveries} deliveries: {failure.error}"
        )
        self.failure = failure


class BusClient:
    def __init__(self, nc: NATS, *, settings: BusSettings | None = None) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.settings = settings or BusSettings()
        self._subs: dict[str, Subscription] = {}
        self._waiters: dict[str, asyncio.Queue[Event]] = {}

    async def ensure_streams(self) -> None:
        await ensure_streams(self.js, self.settings)

    async def send(self, cmd: Command, *, agent: str | None = None) -> int:
        """Queue a command for its agent kind (and its route); returns its stream sequence."""
        ack = await self.js.publish(
            cmd.subject(agent),
            encode(cmd),
            headers={subjects.MSG_ID_HEADER: cmd.command_id},
        )
        return int(ack.seq)

    async def request(
        self,
        cmd: Command,
        *,
        agent: str | None = None,
        expect: int = 1,
        until: Callable[[Event], bool] | None = None,
        timeout: float = 30.0,
    ) -> list[Event]:
        """Send `cmd` and return its events: the first `expect`, or up to the first matching `until`.

        Raises CommandFailed if the agent gives up, TimeoutError if the events do not come.
        """
        await self._watch(cmd.run_id)
        queue: asyncio.Queue[Event] = asyncio.Queue()
        self._waiters[cmd.command_id] = queue
        events: list[Event] = []
        try:
            await self.send(cmd, agent=agent)
            async with asyncio.timeout(timeout):
                while True:
                    event = await queue.get()
                    if isinstance(event, AgentFailed):
                        raise CommandFailed(event)
                    events.append(event)
                    if (until is not None and until(event)) or (until is None and len(events) >= expect):
                        return events
        finally:
            self._waiters.pop(cmd.command_id, None)

    async def _watch(self, run_id: str) -> None:
        token = subjects.run_token(run_id)
        if token in self._subs:
            return
        self._subs[token] = await self.nc.subscribe(subjects.run_events_subject(run_id), cb=self._on_event)
        await self.nc.flush()

    async def _on_event(self, msg: Msg) -> None:
        if not self._waiters:
            return
        try:
            event = decode_event(msg.data)
        except EventDecodeError:
            return
        queue = self._waiters.get(event.causation_id or "")
        if queue is not None:
            queue.put_nowait(event)

    async def close(self) -> None:
        for sub in self._subs.values():
            with contextlib.suppress(Exception):  # the connection may be closing already
                await sub.unsubscribe()
        self._subs.clear()

    async def __aenter__(self) -> BusClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
