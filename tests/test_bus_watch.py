"""`kernelgraph events --nats`: watching a run on the bus while the recorder holds the log."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import msgspec
import nats
import pytest

from bus import subjects
from bus.connection import BusUnreachable, connect
from bus.server import EmbeddedNats
from bus.streams import BusSettings, ensure_streams
from eventstore.codec import encode_event
from eventstore.events import Event
from eventstore.synthetic import synthetic_log


async def _publish(url: str, events: list[Event]) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await ensure_streams(js, BusSettings())
    for event in events:
        await js.publish(subjects.event_subject(event.run_id, event.type_name),
                         encode_event(event), headers={"Nats-Msg-Id": event.event_id})
    await js.publish(subjects.event_subject("bad-run", "Nope"), b"not an event")
    await nc.close()


def _events(url: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "kernelgraph", "events", "--nats", url, "--json", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def test_events_from_the_bus_then_live(nats_server: EmbeddedNats) -> None:
    events = list(synthetic_log(60, seed=21))
    asyncio.run(_publish(nats_server.url, events[:40]))

    snapshot = _events(nats_server.url)
    out, err = snapshot.communicate(timeout=60)
    assert snapshot.returncode == 0, err
    seen = [msgspec.json.decode(line) for line in out.splitlines()]
    assert [e["event_id"] for e in seen] == [e.event_id for e in events[:40]]

    run_id = events[0].run_id
    only = _events(nats_server.url, "--run", run_id, "--type", "LlmCalled")
    out, _ = only.communicate(timeout=60)
    picked = [msgspec.json.decode(line) for line in out.splitlines()]
    expected = [e.event_id for e in events[:40] if e.run_id == run_id and e.type_name == "LlmCalled"]
    assert expected and [e["event_id"] for e in picked] == expected

    follower = _events(nats_server.url, "--follow")
    try:
        assert follower.stdout is not None
        first = [msgspec.json.decode(follower.stdout.readline()) for _ in range(40)]
        asyncio.run(_publish(nats_server.url, events[40:]))
        later = [msgspec.json.decode(follower.stdout.readline()) for _ in range(20)]
    finally:
        follower.terminate()
        follower.wait(timeout=30)
    assert [e["event_id"] for e in first + later] == [e.event_id for e in events]


def test_events_needs_exactly_one_source(nats_server: EmbeddedNats, tmp_path) -> None:
    both = subprocess.run([sys.executable, "-m", "kernelgraph", "events", str(tmp_path / "x.duckdb"),
                           "--nats", nats_server.url], capture_output=True, text=True, check=False)
    assert both.returncode == 2 and "either a log file" in both.stderr
    neither = subprocess.run([sys.executable, "-m", "kernelgraph", "events"],
                             capture_output=True, text=True, check=False)
    assert neither.returncode == 2


async def test_connect_gives_up_on_a_server_that_never_answers() -> None:
    started = time.monotonic()
    with pytest.raises(BusUnreachable, match=r"no NATS server answers at nats://127.0.0.1:1 \(waited 0.5 s\)"):
        await connect("nats://127.0.0.1:1", name="probe", wait_s=0.5)
    assert time.monotonic() - started < 5


@pytest.mark.slow
def test_an_unreachable_server_is_one_line(tmp_path) -> None:
    result = subprocess.run([sys.executable, "-m", "kernelgraph", "events", "--nats",
                             "nats://127.0.0.1:1"], capture_output=True, text=True, check=False,
                            timeout=60)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "nats://127.0.0.1:1" in result.stderr
