"""The embedded runtime: nats-server, the recorder and every registered agent in one process.

This is what `kernelgraph up` runs and what a command without `--nats` starts behind the
scenes. With `nats_url` it joins an external server instead and starts only what it is
asked to (the distributed layout of compose.yaml is the same pieces, one per process).

Shutdown order matters: agents stop first (their in-flight commands finish and their
events are acked by JetStream), then the recorder records whatever is left on the
stream, then the connections close, then the embedded server stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.table import Table

from bus.client import BusClient
from bus.connection import Credentials, connect
from bus.recorder import Recorder
from bus.registry import UnknownAgent, load_agents
from bus.server import EmbeddedNats
from bus.service import Service
from bus.streams import BusSettings, ensure_streams
from eventstore.log import EventLog

AGENT_MODULES: tuple[str, ...] = (
    "agents.test_synth",
    "agents.baseline",
    "agents.planner",
    "agents.implementer",
    "agents.fixer",
    "agents.executor",
    "agents.autotuner",
    "agents.profiler",
    "agents.verifier",
    "agents.auto",
    "agents.auditor",
    "agents.search",
)
"""Modules that define (and `@register`) agent services."""


@dataclass
class RuntimeConfig:
    db_path: Path | None = None
    """The log the recorder writes; None runs no recorder (another process records)."""
    nats_url: str | None = None
    """An external server; None starts the embedded one."""
    nats_dir: Path | None = None
    """JetStream storage of the embedded server; None keeps it beside the log (or in a temp dir)."""
    agents: list[str] | None = None
    """Agent names to run; None runs every registered agent."""
    concurrency: Mapping[str, int] = field(default_factory=dict)
    default_concurrency: int = 4
    settings: BusSettings = field(default_factory=BusSettings.from_env)
    drain_timeout_s: float = 30.0
    recorder_max_batch: int = 5000
    recorder_max_wait_s: float = 0.25


def default_nats_dir(db_path: Path) -> Path:
    """JetStream state beside the log, so events not yet recorded survive a crash of `up`."""
    return db_path.with_name(db_path.name + ".nats")


class Runtime:
    """Start with `async with Runtime(config) as rt:`; `rt.client` sends commands."""

    def __init__(self, config: RuntimeConfig) -> None:
        self.config = config
        self.server: EmbeddedNats | None = None
        self.url = config.nats_url or ""
        self.recorder: Recorder | None = None
        self.services: dict[str, Service] = {}
        self.client: BusClient | None = None
        self.started_at = 0.0
        self._log: EventLog | None = None
        self._connections: list[Any] = []

    def selected_agents(self) -> dict[str, type[Service]]:
        registry = load_agents(AGENT_MODULES)
        names = self.config.agents if self.config.agents is not None else list(registry)
        unknown = [n for n in names if n not in registry]
        if unknown:
            raise UnknownAgent(
                f"unknown agent(s) {', '.join(unknown)}; registered: {', '.join(sorted(registry)) or 'none'}"
            )
        return {name: registry[name] for name in names}

    async def start(self) -> Runtime:
        self.started_at = time.time()
        agents = self.selected_agents()
        credentials: Credentials | None = None
        if self.config.nats_url is None:
            nats_dir = self.config.nats_dir
            if nats_dir is None and self.config.db_path is not None:
                nats_dir = default_nats_dir(self.config.db_path)
            self.server = EmbeddedNats(nats_dir, token=True)
            self.server.start()
            self.url = self.server.url
            credentials = Credentials(token=self.server.token)
        try:
            await self._start_parts(agents, credentials)
        except BaseException:
            await self.stop()
            raise
        return self

    async def _start_parts(self, agents: Mapping[str, type[Service]], credentials: Credentials | None) -> None:
        settings = self.config.settings
        services_nc = await connect(self.url, name="kernelgraph-agents", credentials=credentials)
        self._connections.append(services_nc)
        await ensure_streams(services_nc.jetstream(), settings)
        if self.config.db_path is not None:
            self.config.db_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = EventLog(self.config.db_path)
            recorder_nc = await connect(self.url, name="kernelgraph-recorder", credentials=credentials)
            self._connections.append(recorder_nc)
            self.recorder = Recorder(
                recorder_nc, self._log, settings=settings,
                max_batch=self.config.recorder_max_batch, max_wait_s=self.config.recorder_max_wait_s,
            )
            await self.recorder.start()
        for name, cls in agents.items():
            service = cls(
                services_nc,
                settings=settings,
                concurrency=self.config.concurrency.get(name, self.config.default_concurrency),
                drain_timeout_s=self.config.drain_timeout_s,
            )
            await service.start()
            self.services[name] = service
        self.client = BusClient(services_nc, settings=settings)

    async def stop(self) -> None:
        if self.client is not None:
            await self.client.close()
        if self.services:
            await asyncio.gather(*(s.stop() for s in self.services.values()), return_exceptions=True)
        if self.recorder is not None:
            await self.recorder.stop()
        for nc in self._connections:
            with contextlib.suppress(Exception):
                await nc.drain()
        self._connections.clear()
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self.services:
            from tools.knowledge import close_shared_stores

            close_shared_stores()

    async def __aenter__(self) -> Runtime:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- status -----------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        recorder = self.recorder.stats.as_dict() if self.recorder is not None else None
        return {
            "nats_url": self.url,
            "embedded_server": self.config.nats_url is None,
            "db": str(self.config.db_path) if self.config.db_path else None,
            "uptime_s": round(time.time() - self.started_at, 3) if self.started_at else 0.0,
            "pid": os.getpid(),
            "recorder": recorder,
            "services": {
                name: {"concurrency": s.concurrency, **s.stats.as_dict()} for name, s in self.services.items()
            },
        }

    def status_table(self) -> Table:
        snap = self.snapshot()
        where = "embedded" if snap["embedded_server"] else "external"
        rec = snap["recorder"]
        caption = f"uptime {snap['uptime_s']:.0f}s - Ctrl-C drains and stops"
        if rec is not None:
            caption = f"recorder: done = batches, events = recorded (log seq {rec['last_seq']}); " + caption
        table = Table(
            title=f"kernelgraph up - NATS {snap['nats_url']} ({where}) - log {snap['db'] or '(no recorder)'}",
            caption=caption,
        )
        for column in ("service", "workers", "in flight", "done", "retried", "failed", "dead", "events"):
            table.add_column(column, justify="left" if column == "service" else "right", no_wrap=True)
        for name, s in snap["services"].items():
            table.add_row(
                name, str(s["concurrency"]), str(s["in_flight"]), str(s["completed"]), str(s["retried"]),
                str(s["failed"]), str(s["dead_lettered"]), str(s["events_published"]),
            )
        if rec is not None:
            table.add_section()
            table.add_row(
                "recorder", "1", "-", str(rec["batches"]), "-", "-", str(rec["dead_lettered"]),
                str(rec["events_recorded"]),
            )
        return table


def parse_concurrency(values: Iterable[str]) -> dict[str, int]:
    """`AGENT=N` pairs from the command line."""
    out: dict[str, int] = {}
    for value in values:
        name, sep, number = value.partition("=")
        if not sep or not number.isdigit() or int(number) < 1:
            raise ValueError(f"--concurrency {value!r}: expected AGENT=N with N >= 1")
        out[name.strip()] = int(number)
    return out
