"""The embedded nats-server: JetStream readiness, auth, clean stop, death with its parent, streams."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import nats
import nats.errors
import pytest

from bus import subjects
from bus.connection import Credentials, connect
from bus.server import EmbeddedNats, NatsServerError, jetstream_info
from bus.streams import BusSettings, ensure_agent_consumer, ensure_streams


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie child still answers kill(0); look at its state.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"


def _wait_dead(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.02)
    return False


def test_server_is_ready_when_jetstream_answers_and_stops_cleanly(tmp_path: Path) -> None:
    server = EmbeddedNats(tmp_path / "n").start()
    try:
        assert server.start_s is not None and server.start_s < 5
        assert server.port is not None
        info = jetstream_info(server.host, server.port)
        assert "limits" in info or "memory" in info
        pid = server.process.pid if server.process else -1
    finally:
        server.stop()
    assert not _alive(pid)
    assert server.port is None
    assert (tmp_path / "n" / "jetstream").is_dir()  # a given data dir is kept


def test_temporary_data_dir_is_removed_on_stop() -> None:
    with EmbeddedNats() as server:
        data_dir = server.data_dir
        assert data_dir is not None and data_dir.is_dir()
    assert not data_dir.exists()


async def test_token_is_required_and_never_on_the_command_line(tmp_path: Path) -> None:
    with EmbeddedNats(tmp_path / "n", token=True) as server:
        assert server.token and server.process is not None
        cmdline = Path(f"/proc/{server.process.pid}/cmdline").read_bytes()
        assert server.token.encode() not in cmdline
        with pytest.raises((nats.errors.Error, OSError)):
            await nats.connect(server.url, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=2)
        nc = await connect(server.url, name="t", credentials=Credentials(token=server.token))
        assert nc.is_connected
        await nc.close()


def test_a_taken_port_is_a_clear_error(tmp_path: Path) -> None:
    with EmbeddedNats(tmp_path / "a") as first:
        second = EmbeddedNats(tmp_path / "b", port=first.port, ready_timeout=3)
        with pytest.raises(NatsServerError, match=r"exited|not ready"):
            second.start()


@pytest.mark.slow
def test_server_dies_with_its_parent(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys, time
        from bus.server import EmbeddedNats
        server = EmbeddedNats({str(tmp_path / "n")!r}).start()
        print(server.process.pid, flush=True)
        time.sleep(60)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        server_pid = int(parent.stdout.readline())
        assert _alive(server_pid)
        parent.send_signal(signal.SIGKILL)  # no atexit, no cleanup: only PR_SET_PDEATHSIG is left
        parent.wait(timeout=10)
        assert _wait_dead(server_pid), "nats-server outlived its parent"
    finally:
        parent.kill()


async def test_streams_and_consumers_are_created_idempotently(nats_server: EmbeddedNats) -> None:
    nc = await connect(nats_server.url, name="t", credentials=Credentials())
    js = nc.jetstream()
    try:
        await ensure_streams(js, BusSettings())
        await ensure_streams(js, BusSettings())
        await ensure_streams(js, BusSettings(duplicate_window_s=60))  # changed: updated in place
        info = await js.stream_info(subjects.EVENTS_STREAM)
        assert info.config.duplicate_window == 60
        await ensure_agent_consumer(js, "echo", BusSettings())
        await ensure_agent_consumer(js, "echo", BusSettings(ack_wait_s=2, max_deliver=3))
        consumer = await js.consumer_info(subjects.COMMANDS_STREAM, "agent_echo")
        assert consumer.config.max_deliver == 3
        assert consumer.config.ack_wait == 2
        assert [s.config.name for s in await js.streams_info()].count(subjects.COMMANDS_STREAM) == 1
    finally:
        await nc.close()
