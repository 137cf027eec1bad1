"""Reading a run's history from the bus when the server has already pushed it all.

An ordered consumer's `num_pending` drops to 0 as soon as the server has pushed the backlog
to the client, before anyone reads it. A history that took that 0 for "nothing to read"
looked empty to the auditor (a clean audit of zero events) and to a resumed orchestrator.
The consumer's first answer is delayed here until the whole backlog is in flight.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from auditrun import clean_run, publish
from nats.aio.client import Client as NATS
from nats.js.client import JetStreamContext

from agents.calls import RunHistory
from bus.client import BusClient
from bus.connection import Credentials, connect
from bus.server import EmbeddedNats
from kernelgraph.resume import events_on_bus

PushSubscription = JetStreamContext.PushSubscription


@pytest.fixture
async def nc(nats_server: EmbeddedNats) -> AsyncIterator[NATS]:
    nc = await connect(nats_server.url, name="test", credentials=Credentials())
    client = BusClient(nc)
    await client.ensure_streams()
    try:
        yield nc
    finally:
        await client.close()
        await nc.close()


@pytest.fixture
def backlog_pushed_first(monkeypatch: pytest.MonkeyPatch) -> None:
    real = PushSubscription.consumer_info

    async def late(self: Any) -> Any:
        await asyncio.sleep(0.3)  # the server pushes the backlog meanwhile
        return await real(self)

    monkeypatch.setattr(PushSubscription, "consumer_info", late)


async def test_a_history_whose_backlog_was_pushed_before_it_asked_reads_it_all(
        nc: NATS, backlog_pushed_first: None) -> None:
    run = clean_run()
    await publish(nc, run)
    async with RunHistory(nc, run.run_id) as history:
        await asyncio.wait_for(history.caught_up(), timeout=10)
        assert [e.event_id for e in history.events] == [e.event_id for e in run.events]


async def test_an_empty_history_is_caught_up_at_once(nc: NATS, backlog_pushed_first: None) -> None:
    async with RunHistory(nc, "no-such-run") as history:
        await asyncio.wait_for(history.caught_up(), timeout=10)
        assert history.events == []


async def test_resume_counts_the_events_already_pushed(
        nc: NATS, backlog_pushed_first: None) -> None:
    run = clean_run()
    await publish(nc, run)
    assert await events_on_bus(nc, run.run_id) == len(run.events)
