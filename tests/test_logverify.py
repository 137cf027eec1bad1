"""`kg.log.verify`: the recorder tells another process what the log holds of a run.

A real nats-server and a real recorder writing a DuckDB log: the answer lists the run's
recorded events in log order with a digest of their bodies that the asker can recompute
from its own copies, names the artifacts the log lacks, and carries the chain's
verification; a request nobody answers, or one the recorder cannot read, is an error.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import msgspec
import pytest
from auditrun import clean_run, publish

from bus import subjects
from bus.connection import Credentials, connect
from bus.logverify import LogUnavailable, LogVerified, ask_log, events_digest
from bus.recorder import Recorder
from bus.server import EmbeddedNats
from bus.streams import BusSettings
from eventstore.codec import encode_event
from eventstore.log import EventLog


async def recorded(nc, run_id: str, count: int) -> LogVerified:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 15
    while True:
        reply = await ask_log(nc, run_id, timeout=5)
        if len(reply.event_ids) >= count or time.monotonic() > deadline:
            return reply
        await asyncio.sleep(0.05)


async def test_the_recorder_answers_with_the_runs_events_digest_and_missing_artifacts(
    nats_server: EmbeddedNats, tmp_path: Path
) -> None:
    nc = await connect(nats_server.url, name="test", credentials=Credentials())
    rec_nc = await connect(nats_server.url, name="recorder", credentials=Credentials())
    log = EventLog(tmp_path / "log.duckdb")
    recorder = Recorder(rec_nc, log, settings=BusSettings(), max_wait_s=0.05)
    await recorder.start()
    try:
        run, other = clean_run(), clean_run("auto")
        await publish(nc, run)
        await publish(nc, other)
        reply = await recorded(nc, run.run_id, len(run.events))
        assert reply.event_ids == [e.event_id for e in run.events]
        assert reply.events_sha256 == events_digest(encode_event(e) for e in run.events)
        assert reply.chain_ok and reply.rows_checked >= len(run.events) and not reply.error
        absent = "0" * 64
        present = next(iter(run.artifacts))
        reply = await ask_log(nc, run.run_id, [present, absent, absent])
        assert reply.missing_artifacts == [absent]
        assert (await ask_log(nc, "no-such-run")).event_ids == []
        answer = await nc.request(subjects.LOG_VERIFY, b"{not json", timeout=5)
        assert "not a LogVerifyRequest" in msgspec.json.decode(answer.data, type=LogVerified).error
    finally:
        await recorder.stop()
        log.close()
        await rec_nc.close()
        await nc.close()


async def test_without_a_recorder_the_log_is_unavailable(nats_server: EmbeddedNats) -> None:
    nc = await connect(nats_server.url, name="test", credentials=Credentials())
    try:
        with pytest.raises(LogUnavailable, match="no recorder"):
            await ask_log(nc, "run", timeout=2)
    finally:
        await nc.close()
