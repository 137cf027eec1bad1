"""Processes killed with SIGKILL: a worker mid-command, the recorder mid-batch and between batches.

The services run as real `python -m kernelgraph serve ...` processes, as compose.yaml runs them.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from nats.aio.msg import Msg
from nats.js.errors import NotFoundError

from bus import subjects
from bus.client import BusClient
from bus.codec import decode_event, encode
from bus.commands import Ping
from bus.connection import Credentials, connect
from bus.echo import EchoService
from bus.publisher import JetStreamPublisher
from bus.recorder import Recorder
from bus.server import EmbeddedNats
from bus.streams import BusSettings, ensure_streams
from eventstore.events import Event, PingAnswered
from eventstore.log import AppendResult, EventLog

SETTINGS = BusSettings(ack_wait_s=1.0, max_deliver=5)
ENV = {**os.environ, "KG_BUS_ACK_WAIT_S": "1.0", "KG_BUS_MAX_DELIVER": "5"}


def _serve(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "kernelgraph", "serve", *args], env=ENV,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )


async def _wait(predicate: Callable[[], object], timeout: float = 20, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        assert time.monotonic() < deadline, f"{what} not reached in {timeout}s"
        await asyncio.sleep(0.01)


async def _consumer(js: object, stream: str, name: str) -> object | None:
    try:
        return await js.consumer_info(stream, name)  # type: ignore[attr-defined]
    except NotFoundError:
        return None


def _kill(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)


@pytest.mark.slow
async def test_worker_killed_mid_command_is_redelivered_and_recorded_once(
    nats_server: EmbeddedNats, tmp_path: Path
) -> None:
    nc = await connect(nats_server.url, name="test", credentials=Credentials())
    js = nc.jetstream()
    log = EventLog(tmp_path / "log.duckdb")
    recorder = Recorder(nc, log, settings=SETTINGS, max_wait_s=0.05)
    await recorder.start()
    client = BusClient(nc, settings=SETTINGS)
    worker = _serve("echo", "--nats", nats_server.url, "--concurrency", "1")
    survivor: EchoService | None = None
    try:

        async def worker_is_pulling() -> bool:
            info = await _consumer(js, subjects.COMMANDS_STREAM, "agent_echo")
            return info is not None and info.num_waiting > 0  # type: ignore[attr-defined]

        await _wait(worker_is_pulling, what="worker pulling")
        seen: list[PingAnswered] = []

        async def on_event(msg: Msg) -> None:
            seen.append(decode_event(msg.data))  # type: ignore[arg-type]

        await nc.subscribe(subjects.run_events_subject("kill"), cb=on_event)
        cmd = Ping.create(run_id="kill", events=3, gap_s=0.8)
        await client.send(cmd)
        await _wait(lambda: len(seen) >= 1, what="first answer")
        _kill(worker)  # between the first and the second answer
        assert len(seen) == 1

        survivor = EchoService(nc, settings=SETTINGS, concurrency=1, fetch_timeout_s=0.2)
        await survivor.start()
        await _wait(lambda: recorder.stats.events_recorded >= 3, what="three answers recorded")
        await _wait(lambda: survivor.stats.completed == 1, what="survivor done")
        await asyncio.sleep(0.5)
        recorded = await recorder.read(lambda log: list(log.events()))
        assert [e.index for e in recorded] == [0, 1, 2]  # type: ignore[attr-defined]
        assert all(e.causation_id == cmd.command_id for e in recorded)
        assert recorded[0].event_id == seen[0].event_id  # the dead worker's answer, kept once
        assert survivor.stats.received == 1
        info = await js.consumer_info(subjects.COMMANDS_STREAM, "agent_echo")
        assert info.num_ack_pending == 0 and info.num_pending == 0
    finally:
        worker.kill()
        if survivor is not None:
            await survivor.stop()
        await recorder.stop()
        log.close()
        await nc.close()


@pytest.mark.slow
async def test_recorder_killed_and_restarted_loses_nothing_and_duplicates_nothing(
    nats_server: EmbeddedNats, tmp_path: Path
) -> None:
    db = tmp_path / "log.duckdb"
    nc = await connect(nats_server.url, name="test", credentials=Credentials())
    js = nc.jetstream()
    publisher = await JetStreamPublisher(nc).open()
    published: list[str] = []
    recorders: list[subprocess.Popen[bytes]] = []

    async def publish(count: int, *, seq0: int) -> None:
        for start in range(0, count, 500):
            futures = []
            for seq in range(seq0 + start, seq0 + min(start + 500, count)):
                event = PingAnswered.create(run_id="rec", producer="test@1", agent="test", seq=seq)
                published.append(event.event_id)
                futures.append(
                    await publisher.publish(
                        subjects.event_subject("rec", "PingAnswered"), encode(event), msg_id=event.event_id
                    )
                )
            await publisher.wait(futures, timeout=10)
            await asyncio.sleep(0.005)

    async def consumer_state() -> object | None:
        return await _consumer(js, subjects.EVENTS_STREAM, subjects.RECORDER_EVENTS_CONSUMER)

    async def start_recorder() -> subprocess.Popen[bytes]:
        process = _serve("recorder", "--nats", nats_server.url, "--db", str(db))
        recorders.append(process)

        async def pulling() -> bool:
            info = await consumer_state()
            return info is not None and info.num_waiting > 0  # type: ignore[attr-defined]

        await _wait(pulling, what="recorder pulling")
        return process

    try:
        await ensure_streams(js, SETTINGS)
        first = await start_recorder()
        producer = asyncio.create_task(publish(6000, seq0=0))

        async def batch_in_flight() -> bool:  # delivered to the recorder, not yet acked
            info = await consumer_state()
            return info is not None and info.num_ack_pending > 0  # type: ignore[attr-defined]

        await _wait(batch_in_flight, what="a batch in flight")
        _kill(first)  # mid-batch

        second = await start_recorder()
        await producer

        async def all_acked() -> bool:
            info = await consumer_state()
            return (
                info is not None
                and info.num_pending == 0  # type: ignore[attr-defined]
                and info.num_ack_pending == 0  # type: ignore[attr-defined]
            )

        await _wait(all_acked, what="second recorder caught up")
        _kill(second)  # between batches

        # The same events once more under other message ids: JetStream keeps them, the log must not.
        again = published[:200]
        for event_id in again:
            event = PingAnswered(event_id=event_id, run_id="rec", ts=0.0, producer="test@1", agent="test")
            await publisher.wait(
                [await publisher.publish(subjects.event_subject("rec", "PingAnswered"), encode(event))],
                timeout=10,
            )
        third = await start_recorder()
        await publish(500, seq0=6000)
        await _wait(all_acked, what="third recorder caught up")
        third.send_signal(signal.SIGTERM)
        assert third.wait(timeout=20) == 0, third.stderr.read().decode() if third.stderr else ""
    finally:
        for process in recorders:
            process.kill()
        await publisher.close()
        await nc.close()

    with EventLog(db, read_only=True) as log:
        ids = [e.event_id for e in log.events()]
        assert log.verify().ok
    assert len(ids) == len(set(ids)) == 6500
    assert set(ids) == set(published)


class _StuckLog(EventLog):
    """A log whose append never finishes: its recorder dies holding a delivered, unacked batch."""

    def __init__(self, path: Path, *, gate: threading.Event, entered: threading.Event) -> None:
        super().__init__(path)
        self.gate, self.entered = gate, entered

    def append(self, events: Sequence[Event]) -> AppendResult:
        self.entered.set()
        self.gate.wait(30)
        return AppendResult(0, 0, self.last_seq)


async def test_a_batch_delivered_to_a_dead_recorder_is_recorded_by_the_next(
    nats_server: EmbeddedNats, tmp_path: Path
) -> None:
    """Ack-all must not let the next recorder's first ack swallow the dead one's batch."""
    nc = await connect(nats_server.url, name="test", credentials=Credentials())
    publisher = await JetStreamPublisher(nc).open()
    subject = subjects.event_subject("r", "PingAnswered")

    async def publish(seqs: range) -> list[str]:
        events = [PingAnswered.create(run_id="r", producer="t@1", agent="t", seq=s) for s in seqs]
        futures = [await publisher.publish(subject, encode(e), msg_id=e.event_id) for e in events]
        await publisher.wait(futures, timeout=10)
        return [e.event_id for e in events]

    await ensure_streams(nc.jetstream(), SETTINGS)
    first_ids = await publish(range(100))
    gate, entered = threading.Event(), threading.Event()
    dead_nc = await connect(nats_server.url, name="doomed", credentials=Credentials())
    doomed_log = _StuckLog(tmp_path / "doomed.duckdb", gate=gate, entered=entered)
    doomed = Recorder(dead_nc, doomed_log, settings=SETTINGS)
    await doomed.start()
    try:
        await asyncio.get_running_loop().run_in_executor(None, entered.wait, 10)
        assert entered.is_set()
        assert doomed._task is not None
        doomed._task.cancel()
        await dead_nc.close()  # gone without an ack, like a SIGKILL

        rec_nc = await connect(nats_server.url, name="next", credentials=Credentials())
        log = EventLog(tmp_path / "log.duckdb")
        recorder = Recorder(rec_nc, log, settings=SETTINGS, max_wait_s=0.05)
        await recorder.start()
        later_ids = await publish(range(100, 150))
        await _wait(lambda: recorder.stats.events_recorded >= 150, timeout=10, what="all 150 recorded")
        recorded = await recorder.read(lambda log: [e.event_id for e in log.events()])
        await recorder.stop()
        log.close()
        await rec_nc.close()
        assert sorted(recorded) == sorted(first_ids + later_ids)
    finally:
        gate.set()
        doomed._db.shutdown(wait=True)
        doomed_log.close()
        await publisher.close()
        await nc.close()
