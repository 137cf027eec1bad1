"""The echo agent: answers `Ping` with `PingAnswered`. The bus's health check and load generator.

Its knobs exist to exercise the bus end to end (`kernelgraph ping`, tests, benchmarks):
`events` answers per ping, `delay_s` before the first answer, `gap_s` between answers, and
`error` to make the handler raise (the retry / AgentFailed path).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import ClassVar

from bus.commands import Command, Ping
from bus.registry import register
from bus.service import Service
from eventstore.events import Event, PingAnswered
from kernelgraph.errors import KernelgraphError


class EchoError(KernelgraphError, RuntimeError):
    """Raised on purpose when a Ping asks for an error."""


@register
class EchoService(Service):
    agent: ClassVar[str] = "echo"
    commands: ClassVar[tuple[type[Command], ...]] = (Ping,)

    async def handle(self, cmd: Ping) -> AsyncIterator[Event]:
        if cmd.error:
            raise EchoError(cmd.error)
        if cmd.delay_s > 0:
            await asyncio.sleep(cmd.delay_s)
        for index in range(cmd.events):
            if index and cmd.gap_s > 0:
                await asyncio.sleep(cmd.gap_s)
            yield self.event(PingAnswered, cmd, agent=self.agent, seq=cmd.seq, index=index, echo=cmd.echo)
