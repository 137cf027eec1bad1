"""Bus figures: embedded server start, command round trip, events recorded per second.

    python benchmarks/bus.py --json

- `server_start_s`: the embedded nats-server from spawn until JetStream answers (median of 5).
- `command_roundtrip_p50_ms` / `_p99_ms`: a Ping published -> its PingAnswered received by
  the caller, trivial handler, sequential, in the embedded runtime (`kernelgraph up`'s
  layout: server, recorder and echo agent running, caller in the same process).
- `recorded_events_per_s`: events published by the echo agent and committed to the DuckDB
  log by the recorder, end to end (first command sent -> last event committed), embedded
  runtime, one process, no other subscriber to those events.
- `recorded_events_per_s_distributed`: the same with the recorder and the echo agent as
  separate `kernelgraph serve` processes (compose.yaml's layout), the bus as the only link.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# This file shares its name with the `bus` package; keep its folder off the import path.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from bus import subjects  # noqa: E402
from bus.client import BusClient  # noqa: E402
from bus.commands import Ping  # noqa: E402
from bus.connection import Credentials, connect  # noqa: E402
from bus.server import EmbeddedNats  # noqa: E402
from eventstore.events import new_event_id  # noqa: E402
from eventstore.log import EventLog  # noqa: E402
from kernelgraph.runtime import Runtime, RuntimeConfig  # noqa: E402


def server_start(repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        with EmbeddedNats() as server:
            assert server.start_s is not None
            times.append(server.start_s)
    return statistics.median(times)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def embedded(pings: int, commands: int, events_per_command: int, workdir: Path) -> dict[str, float]:
    config = RuntimeConfig(db_path=workdir / "embedded.duckdb", agents=["echo"], nats_dir=workdir / "embedded.nats")
    async with Runtime(config) as runtime:
        client, recorder = runtime.client, runtime.recorder
        assert client is not None and recorder is not None
        run_id = f"bench-{new_event_id()}"
        for seq in range(50):  # warm-up
            await client.request(Ping.create(run_id=run_id, seq=seq))
        latencies = []
        for seq in range(pings):
            started = time.perf_counter()
            await client.request(Ping.create(run_id=run_id, seq=seq))
            latencies.append((time.perf_counter() - started) * 1000)
        while recorder.stats.events_recorded < 50 + pings:
            await asyncio.sleep(0.01)

        # A run nobody watches: the figure is publish -> commit, without extra subscribers.
        load_run = f"bench-load-{new_event_id()}"
        before = recorder.stats.events_recorded
        target = before + commands * events_per_command
        started = time.perf_counter()
        for seq in range(commands):
            await client.send(Ping.create(run_id=load_run, seq=seq, events=events_per_command))
        while recorder.stats.events_recorded < target:
            await asyncio.sleep(0.002)
        elapsed = time.perf_counter() - started
        batches = recorder.stats.batches
    return {
        "command_roundtrip_p50_ms": round(statistics.median(latencies), 3),
        "command_roundtrip_p99_ms": round(_percentile(latencies, 0.99), 3),
        "recorded_events_per_s": round(commands * events_per_command / elapsed, 1),
        "embedded_recorder_batches": batches,
    }


async def distributed(commands: int, events_per_command: int, workdir: Path) -> dict[str, float]:
    db = workdir / "distributed.duckdb"
    with EmbeddedNats(workdir / "distributed.nats") as server:
        env = {**os.environ, "KG_NATS_URL": ""}
        processes = [
            subprocess.Popen(
                [sys.executable, "-m", "kernelgraph", "serve", *args, "--nats", server.url],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            for args in (["recorder", "--db", str(db)], ["echo", "--concurrency", "4"])
        ]
        try:
            nc = await connect(server.url, name="bench", credentials=Credentials())
            js = nc.jetstream()

            async def waiting(stream: str, consumer: str) -> bool:
                try:
                    return bool((await js.consumer_info(stream, consumer)).num_waiting)
                except Exception:
                    return False

            deadline = time.monotonic() + 60
            while not (
                await waiting(subjects.COMMANDS_STREAM, "agent_echo")
                and await waiting(subjects.EVENTS_STREAM, subjects.RECORDER_EVENTS_CONSUMER)
            ):
                if time.monotonic() > deadline:
                    raise RuntimeError("the serve processes did not start")
                await asyncio.sleep(0.05)
            client = BusClient(nc)
            run_id = f"bench-{new_event_id()}"
            total = commands * events_per_command
            started = time.perf_counter()
            for seq in range(commands):
                await client.send(Ping.create(run_id=run_id, seq=seq, events=events_per_command))
            while True:  # the recorder acks only what it has committed
                info = await js.consumer_info(subjects.EVENTS_STREAM, subjects.RECORDER_EVENTS_CONSUMER)
                if info.ack_floor is not None and info.ack_floor.stream_seq >= total:
                    break
                await asyncio.sleep(0.005)
            elapsed = time.perf_counter() - started
            await nc.close()
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait(timeout=30)
    with EventLog(db, read_only=True) as log:
        recorded = log.count()
    if recorded != total:
        raise RuntimeError(f"distributed run recorded {recorded} events, expected {total}")
    return {"recorded_events_per_s_distributed": round(total / elapsed, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--pings", type=int, default=1000, help="sequential round trips")
    parser.add_argument("--commands", type=int, default=200, help="commands for the throughput runs")
    parser.add_argument("--events-per-command", type=int, default=100)
    parser.add_argument("--skip-distributed", action="store_true")
    args = parser.parse_args()

    figures: dict[str, Any] = {"server_start_s": round(server_start(), 4)}
    with tempfile.TemporaryDirectory(prefix="kg-bench-bus-") as tmp:
        figures.update(asyncio.run(embedded(args.pings, args.commands, args.events_per_command, Path(tmp))))
        if not args.skip_distributed:
            figures.update(asyncio.run(distributed(args.commands, args.events_per_command, Path(tmp))))
    figures["events"] = args.commands * args.events_per_command
    figures["pings"] = args.pings
    figures["machine"] = f"{platform.machine()}, {os.cpu_count()} cpus, python {platform.python_version()}"
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:>36}: {value}")


if __name__ == "__main__":
    main()
