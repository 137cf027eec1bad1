"""Services and the recorder against a real nats-server, all in the test's process."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from nats.aio.client import Client as NATS

from bus import subjects
from bus.artifacts import fetch_artifact, publish_artifacts
from bus.client import BusClient, CommandFailed
from bus.codec import derived_event_id
from bus.commands import Command, Ping
from bus.connection import Credentials, connect
from bus.echo import EchoService
from bus.recorder import Recorder
from bus.server import EmbeddedNats
from bus.service import PermanentError, Service
from bus.streams import BusSettings
from eventstore.events import Event, MessageDeadLettered, PingAnswered, RunFinished
from eventstore.log import EventLog

SETTINGS = BusSettings(ack_wait_s=2.0, max_deliver=3, max_backoff_s=1.0)


class FastRetryEcho(EchoService):
    retry_base_s: ClassVar[float] = 0.05


@dataclass
class Bus:
    nc: NATS
    recorder: Recorder
    client: BusClient
    url: str

    async def events(self, **filters: Any) -> list[Event]:
        return await self.recorder.read(lambda log: list(log.events(**filters)))

    async def wait_recorded(self, count: int, *, types: list[str] | None = None, timeout: float = 15) -> list[Event]:
        deadline = time.monotonic() + timeout
        while True:
            events = await self.events(types=types)
            if len(events) >= count or time.monotonic() > deadline:
                return events
            await asyncio.sleep(0.05)

    async def service(self, cls: type[Service] = EchoService, **kwargs: Any) -> Service:
        nc = await connect(self.url, name="svc", credentials=Credentials())
        kwargs.setdefault("settings", SETTINGS)
        kwargs.setdefault("fetch_timeout_s", 0.2)
        svc = cls(nc, **kwargs)
        await svc.start()
        return svc


@asynccontextmanager
async def running_bus(server: EmbeddedNats, db: Path) -> AsyncIterator[Bus]:
    nc = await connect(server.url, name="test", credentials=Credentials())
    rec_nc = await connect(server.url, name="recorder", credentials=Credentials())
    log = EventLog(db)
    recorder = Recorder(rec_nc, log, settings=SETTINGS, max_wait_s=0.05)
    await recorder.start()
    client = BusClient(nc, settings=SETTINGS)
    try:
        yield Bus(nc, recorder, client, server.url)
    finally:
        await client.close()
        await recorder.stop()
        log.close()
        await rec_nc.close()
        await nc.close()


async def _stop(*services: Service) -> None:
    for svc in services:
        await svc.stop()
        await svc.nc.close()


async def _wait(predicate: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def test_round_trip_command_event_recorded_row(nats_server: EmbeddedNats, tmp_path: Path) -> None:
    async with running_bus(nats_server, tmp_path / "log.duckdb") as bus:
        svc = await bus.service()
        cmd = Ping.create(run_id="run-1", node_id="n1", seq=7, echo="hello", events=2)
        answers = await bus.client.request(cmd, expect=2, timeout=10)
        assert [a.index for a in answers] == [0, 1]  # type: ignore[attr-defined]
        recorded = await bus.wait_recorded(2)
        assert len(recorded) == 2
        first = recorded[0]
        assert isinstance(first, PingAnswered)
        assert (first.run_id, first.node_id, first.seq, first.echo) == ("run-1", "n1", 7, "hello")
        assert first.causation_id == cmd.command_id
        assert first.producer == "echo@1"
        assert {e.event_id for e in recorded} == {a.event_id for a in answers}
        assert svc.stats.completed == 1 and svc.stats.in_flight == 0
        assert (await bus.recorder.read(lambda log: log.verify())).ok
        await _stop(svc)


async def test_a_command_sent_twice_is_queued_once(nats_server: EmbeddedNats, tmp_path: Path) -> None:
    async with running_bus(nats_server, tmp_path / "log.duckdb") as bus:
        cmd = Ping.create(run_id="run-1")
        assert await bus.client.send(cmd) == await bus.client.send(cmd)
        svc = await bus.service()
        await bus.wait_recorded(1)
        await asyncio.sleep(0.3)
        assert len(await bus.events()) == 1
        assert svc.stats.received == 1
        await _stop(svc)


async def test_work_is_spread_across_two_workers_of_one_agent(nats_server: EmbeddedNats, tmp_path: Path) -> None:
    async with running_bus(nats_server, tmp_path / "log.duckdb") as bus:
        workers = [await bus.service(concurrency=1), await bus.service(concurrency=1)]
        commands = [Ping.create(run_id="spread", seq=i, delay_s=0.05) for i in range(16)]
        await asyncio.gather(*(bus.client.request(c, timeout=20) for c in commands))
        await _wait(lambda: sum(w.stats.completed for w in workers) == 16)
        done = [w.stats.completed for w in workers]
        assert min(done) >= 3, f"one worker took (almost) everything: {done}"
        recorded = await bus.wait_recorded(16)
        assert sorted(e.seq for e in recorded) == list(range(16))  # type: ignore[attr-defined]
        await _stop(*workers)


async def test_malformed_messages_are_dead_lettered_and_the_service_goes_on(
    nats_server: EmbeddedNats, tmp_path: Path
) -> None:
    async with running_bus(nats_server, tmp_path / "log.duckdb") as bus:
        svc = await bus.service()
        js = bus.nc.jetstream()
        not_json = b"\xff{not json"
        wrong_type = b'{"type":"NoSuchCommand","command_id":"c1","run_id":"run-x","ts":0}'
        await js.publish(subjects.command_subject("echo"), not_json)
        await js.publish(subjects.command_subject("echo"), wrong_type)
        await js.publish(subjects.event_subject("run-y", "Garbage"), b"[1, 2")  # on the events stream
        answers = await bus.client.request(Ping.create(run_id="run-x", seq=1), timeout=10)
        assert answers[0].seq == 1  # type: ignore[attr-defined]
        letters = await bus.wait_recorded(3, types=["MessageDeadLettered"])
        assert len(letters) == 3
        by_raw = {e.raw: e for e in letters if isinstance(e, MessageDeadLettered)}
        assert set(by_raw) == {not_json, wrong_type, b"[1, 2"}
        assert by_raw[wrong_type].run_id == "run-x"
        assert by_raw[wrong_type].subject == "kg.cmd.echo"
        assert "NoSuchCommand" in by_raw[wrong_type].error
        assert by_raw[b"[1, 2"].producer == "recorder@1"
        await _wait(lambda: svc.stats.completed == 1)
        assert svc.stats.dead_lettered == 2
        info = await js.consumer_info(subjects.COMMANDS_STREAM, "agent_echo")
        assert info.num_ack_pending == 0 and info.num_pending == 0
        await _stop(svc)


async def test_a_handler_that_always_raises_ends_in_agent_failed(nats_server: EmbeddedNats, tmp_path: Path) -> None:
    async with running_bus(nats_server, tmp_path / "log.duckdb") as bus:
        svc = await bus.service(FastRetryEcho)
        cmd = Ping.create(run_id="run-f", error="boom")
        with pytest.raises(CommandFailed, match="boom") as failure:
            await bus.client.request(cmd, timeout=20)
        event = failure.value.failure
        assert event.deliveries == SETTINGS.max_deliver
        assert (event.agent, event.command_type, event.command_id) == ("echo", "Ping", cmd.command_id)
        assert "EchoError: boom" in event.error
        await _wait(lambda: svc.stats.failed == 1)
        assert svc.stats.retried == SETTINGS.max_deliver - 1 and svc.stats.failed == 1
        recorded = await bus.wait_recorded(1, types=["AgentFailed"])
        assert [e.event_id for e in recorded] == [event.event_id]
        stream = await bus.nc.jetstream().stream_info(subjects.COMMANDS_STREAM)
        assert stream.state.messages == 0  # terminated, not left to redeliver
        await _stop(svc)


class Fussy(Service):
    agent: ClassVar[str] = "fussy"
    commands: ClassVar[tuple[type[Command], ...]] = (Ping,)

    async def handle(self, cmd: Ping) -> AsyncIterator[Event]:
        if cmd.seq < 0:
            raise PermanentError("negative seq")
        yield self.event(RunFinished, cmd, status="completed", reason=f"seq {cmd.seq}")


async def test_permanent_errors_fail_at_once(nats_server: EmbeddedNats, tmp_path: Path) -> None:
    async with running_bus(nats_server, tmp_path / "log.duckdb") as bus:
        svc = await bus.service(Fussy)
        with pytest.raises(CommandFailed, match="negative seq") as failure:
            await bus.client.request(Ping.create(run_id="r", seq=-1), agent="fussy", timeout=10)
        assert failure.value.failure.deliveries == 1
        answers = await bus.client.request(Ping.create(run_id="r", seq=2), agent="fussy", timeout=10)
        assert isinstance(answers[0], RunFinished) and answers[0].reason == "seq 2"
        assert svc.stats.retried == 0
        await _stop(svc)


@pytest.mark.parametrize("drain_timeout_s", [10.0, 0.0], ids=["finish-in-flight", "hand-back-in-flight"])
async def test_shutdown_with_work_in_flight_loses_nothing(
    nats_server: EmbeddedNats, tmp_path: Path, drain_timeout_s: float
) -> None:
    slow_timeout = BusSettings(ack_wait_s=5.0, max_deliver=3)
    async with running_bus(nats_server, tmp_path / "log.duckdb") as bus:
        first = await bus.service(concurrency=4, settings=slow_timeout)
        commands = [Ping.create(run_id="drain", seq=i, delay_s=0.4) for i in range(10)]
        for cmd in commands:
            await bus.client.send(cmd)
        await _wait(lambda: first.stats.in_flight == 4)
        # On a loaded machine the sends can be slow enough that some commands finished
        # before the test saw four in flight: judge stop() by what it held when it began.
        done_before_stop, held_at_stop = first.stats.completed, first.stats.in_flight
        started = time.monotonic()
        await first.stop(drain_timeout_s=drain_timeout_s)
        handled_by_first = first.stats.completed
        assert handled_by_first - done_before_stop == (held_at_stop if drain_timeout_s else 0)
        second = await bus.service(concurrency=10, settings=slow_timeout)
        recorded = await bus.wait_recorded(10)
        # Handed-back commands come back at once, not after an ack-wait.
        assert time.monotonic() - started < slow_timeout.ack_wait_s - 1
        assert sorted(e.seq for e in recorded) == list(range(10))  # type: ignore[attr-defined]
        assert second.stats.completed == 10 - handled_by_first
        await asyncio.sleep(0.3)
        assert len(await bus.events()) == 10
        await first.nc.close()
        await _stop(second)


class ArtifactWriter(Service):
    agent: ClassVar[str] = "writer"
    commands: ClassVar[tuple[type[Command], ...]] = (Ping,)

    async def handle(self, cmd: Ping) -> AsyncIterator[Event]:
        sha = await self.put_artifact(cmd.echo.encode() * 1000, "kernel")
        yield self.event(RunFinished, cmd, status="completed", receipt_sha256=sha)


async def test_artifacts_travel_by_hash_and_are_stored_with_their_events(
    nats_server: EmbeddedNats, tmp_path: Path
) -> None:
    async with running_bus(nats_server, tmp_path / "log.duckdb") as bus:
        svc = await bus.service(ArtifactWriter)
        answers = await bus.client.request(Ping.create(run_id="art", echo="def kernel(): ..."), agent="writer")
        sha = answers[0].receipt_sha256  # type: ignore[attr-defined]
        await bus.wait_recorded(1)
        data = await bus.recorder.read(lambda log: log.get_artifact(sha))
        assert data == b"def kernel(): ..." * 1000
        assert await fetch_artifact(bus.nc.jetstream(), sha) == (data, "kernel")
        assert bus.recorder.stats.artifacts_stored == 1
        again = await publish_artifacts(bus.nc.jetstream(), [(data, "kernel"), (b"other", "plan")])
        assert again[0] == sha
        await _wait(lambda: bus.recorder.stats.artifacts_stored >= 2)
        many = await publish_artifacts(bus.nc.jetstream(), [(b"plan %d" % i, "plan") for i in range(600)])
        await _wait(lambda: bus.recorder.stats.artifacts_stored >= 602)  # several chunks
        stored = await bus.recorder.read(lambda log: {sha: log.has_artifact(sha) for sha in many})
        assert all(stored.values())
        await _stop(svc)


async def test_a_long_handler_keeps_its_command_by_reporting_progress(
    nats_server: EmbeddedNats, tmp_path: Path
) -> None:
    quick = BusSettings(ack_wait_s=0.6, max_deliver=3)
    async with running_bus(nats_server, tmp_path / "log.duckdb") as bus:
        workers = [await bus.service(settings=quick, concurrency=1) for _ in range(2)]
        await bus.client.request(Ping.create(run_id="long", delay_s=2.0), timeout=10)
        await _wait(lambda: sum(w.stats.completed for w in workers) == 1)
        await asyncio.sleep(0.3)
        assert sum(w.stats.received for w in workers) == 1  # never redelivered to the idle worker
        await _stop(*workers)


class Sleepy(FastRetryEcho):
    handler_timeout_s: ClassVar[float | None] = 0.2


async def test_a_handler_past_its_timeout_is_retried_then_failed(nats_server: EmbeddedNats, tmp_path: Path) -> None:
    async with running_bus(nats_server, tmp_path / "log.duckdb") as bus:
        svc = await bus.service(Sleepy)
        with pytest.raises(CommandFailed, match="TimeoutError") as failure:
            await bus.client.request(Ping.create(run_id="slow", delay_s=5), timeout=20)
        assert failure.value.failure.deliveries == SETTINGS.max_deliver
        await _stop(svc)


class NotesOnce(FastRetryEcho):
    """First delivery: a named note, the positional answer, then a retryable failure; the
    redelivery has no note (the store answered this time) and answers again."""

    agent: ClassVar[str] = "notesonce"
    deliveries = 0

    async def handle(self, cmd: Ping) -> AsyncIterator[Event]:
        type(self).deliveries += 1
        first = type(self).deliveries == 1
        if first:
            yield self.event(RunFinished, cmd, status="failed", reason="a note of one delivery",
                             event_id=derived_event_id(f"{cmd.command_id}:note", 1, fallback_ms=0))
        yield self.event(PingAnswered, cmd, agent=self.agent, seq=cmd.seq, index=0, echo="")
        if first:
            raise RuntimeError("worker lost after publishing")


async def test_an_event_named_by_its_handler_shifts_no_positional_id(
    nats_server: EmbeddedNats, tmp_path: Path
) -> None:
    async with running_bus(nats_server, tmp_path / "log.duckdb") as bus:
        svc = await bus.service(NotesOnce)
        await bus.client.send(Ping.create(run_id="notes", seq=1), agent="notesonce")
        await _wait(lambda: svc.stats.completed == 1)
        await asyncio.sleep(0.3)
        answers = await bus.events(types=["PingAnswered"])
        assert len(answers) == 1, [e.event_id for e in answers]  # the redelivery's is a duplicate
        assert len(await bus.events(types=["RunFinished"])) == 1
        await _stop(svc)
