"""Commands that run the bus: `up`, `serve`, `nats-server`, `agents`, `ping`, `bus-status`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from kernelgraph.cli.app import (
    WeakSandboxOpt,
    app,
    console,
    emit_json,
    err_console,
    fail,
    sandbox_gate,
)

T = TypeVar("T")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables (up and serve: when they stop; nats-server: once it is ready).")]
SERVE_WAIT_S = 60.0
"""How long `serve` waits for its server to come up before it exits (compose restarts it)."""

NatsOpt = Annotated[
    str | None,
    typer.Option(
        "--nats",
        envvar="KG_NATS_URL",
        help="URL of an external NATS server (nats://host:4222). Credentials come only from "
        "KG_NATS_TOKEN, KG_NATS_USER/KG_NATS_PASSWORD or KG_NATS_CREDS.",
        show_default=False,
    ),
]
DEFAULT_DB = Path("kernelgraph.duckdb")


def _user_errors() -> tuple[type[BaseException], ...]:
    """Errors a user can act on: printed as one line, never a traceback."""
    import nats.errors

    from bus.connection import BusConfigError
    from bus.recorder import RecorderError
    from bus.registry import UnknownAgent
    from bus.server import NatsServerError
    from eventstore.log import LogError

    return (BusConfigError, NatsServerError, LogError, UnknownAgent, RecorderError, nats.errors.NoServersError,
            nats.errors.Error, ConnectionError, ImportError)


def _run_until_signal(main: Callable[[asyncio.Event], Awaitable[T]]) -> T:
    """Run `main(stop)`; the first Ctrl-C or SIGTERM sets `stop` (drain), a second one aborts."""

    async def runner() -> T:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        task = asyncio.current_task()

        def on_signal() -> None:
            if stop.is_set() and task is not None:
                task.cancel()
            stop.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal)
        return await main(stop)

    try:
        return asyncio.run(runner())
    except asyncio.CancelledError:
        fail("interrupted twice: stopped without draining", code=130)
    except _user_errors() as exc:
        fail(str(exc).strip("'\""))


def _setup_logging(verbose: bool, *, rich_console: Any = None) -> None:
    level = logging.DEBUG if verbose else logging.INFO
    if rich_console is not None:
        from rich.logging import RichHandler

        handler: logging.Handler = RichHandler(console=rich_console, show_path=False)
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("kernelgraph")
    root.handlers[:] = [handler]
    root.setLevel(level)


@app.command()
def up(
    db: Annotated[Path, typer.Option("--db", help="The event log the recorder writes.")] = DEFAULT_DB,
    nats: NatsOpt = None,
    nats_dir: Annotated[
        Path | None,
        typer.Option("--nats-dir", help="JetStream storage of the embedded server \\[default: DB.nats].",
                     show_default=False),
    ] = None,
    agent: Annotated[
        list[str] | None,
        typer.Option("--agent", help="Run only this agent (repeatable) \\[default: every registered agent].",
                     show_default=False),
    ] = None,
    concurrency: Annotated[
        list[str] | None,
        typer.Option("--concurrency", help="AGENT=N commands handled at once by one agent (repeatable).",
                     show_default=False),
    ] = None,
    workers: Annotated[int, typer.Option("--workers", min=1, help="Default concurrency per agent.")] = 4,
    duration: Annotated[
        float | None,
        typer.Option("--duration", help="Stop after this many seconds \\[default: until Ctrl-C].",
                     show_default=False),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
    allow_weak_sandbox: WeakSandboxOpt = False,
    json: JsonOpt = False,
) -> None:
    """Run everything in one process: nats-server (unless --nats), the recorder and every agent.

    Shows a live table of services, in-flight commands and events recorded. Ctrl-C drains:
    agents finish their in-flight commands, the recorder records what is left, then the
    server stops (a second Ctrl-C stops at once; unfinished commands are redelivered later).
    """
    from bus.streams import BusSettings
    from kernelgraph.errors import KernelgraphError
    from kernelgraph.runtime import Runtime, RuntimeConfig, parse_concurrency
    from tools.sandbox.policy import CANDIDATE_AGENTS

    if agent is None or CANDIDATE_AGENTS & set(agent):
        sandbox_gate(allow_weak_sandbox)
    try:
        per_agent = parse_concurrency(concurrency or [])
    except ValueError as exc:  # a malformed --concurrency AGENT=N
        fail(str(exc))
    try:
        config = RuntimeConfig(
            db_path=db, nats_url=nats, nats_dir=nats_dir, agents=agent or None,
            concurrency=per_agent, default_concurrency=workers,
            settings=BusSettings.from_env(),
        )
    except KernelgraphError as exc:  # BusConfigError: a bad --nats or KG_BUS_* setting
        fail(str(exc))
    _setup_logging(verbose, rich_console=None if json else err_console)

    async def main(stop: asyncio.Event) -> dict[str, Any]:
        runtime = Runtime(config)
        await runtime.start()
        try:
            if duration is not None:
                asyncio.get_running_loop().call_later(duration, stop.set)
            from rich.live import Live

            live = None if json else Live(runtime.status_table(), console=console, refresh_per_second=4)
            with live or contextlib.nullcontext():
                while not stop.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), 0.25)
                    if live is not None:
                        live.update(runtime.status_table())
                    if runtime.recorder is not None and runtime.recorder.failed is not None:
                        raise runtime.recorder.failed
        finally:
            await runtime.stop()
        return runtime.snapshot()

    snapshot = _run_until_signal(main)
    if json:
        emit_json(snapshot)


@app.command()
def serve(
    agent: Annotated[str, typer.Argument(help="Agent name (see `kernelgraph agents`), or `recorder`.")],
    nats: NatsOpt = None,
    db: Annotated[
        Path | None, typer.Option("--db", help="The event log (only for `recorder`).", show_default=False)
    ] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, help="Commands handled at once.")] = 4,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
    allow_weak_sandbox: WeakSandboxOpt = False,
    json: JsonOpt = False,
) -> None:
    """Run one service against an external NATS server (one process per service, as in compose.yaml).

    Several `serve` processes of one agent share its work queue: each command goes to one of
    them. An executor takes only the targets named in KG_EXECUTOR_TARGETS (empty: all).
    SIGTERM drains: in-flight commands finish (or go back to the queue), then it exits.
    """
    from bus.registry import RECORDER

    if nats is None:
        fail("serve needs --nats URL (or KG_NATS_URL): the server the other services use")
    if agent == RECORDER and db is None:
        fail("serve recorder needs --db PATH: the log it writes")
    if agent != RECORDER and db is not None:
        fail(f"--db is for the recorder; agent {agent!r} never writes the log")
    from tools.sandbox.policy import CANDIDATE_AGENTS

    if agent in CANDIDATE_AGENTS:
        sandbox_gate(allow_weak_sandbox)
    _setup_logging(verbose)
    log = logging.getLogger("kernelgraph.serve")

    async def main(stop: asyncio.Event) -> dict[str, Any]:
        from bus.connection import connect
        from bus.registry import get, load_agents
        from bus.streams import BusSettings
        from kernelgraph.runtime import AGENT_MODULES

        settings = BusSettings.from_env()
        service: Any
        if agent == RECORDER:
            from bus.recorder import Recorder
            from eventstore.log import EventLog

            assert db is not None
            db.parent.mkdir(parents=True, exist_ok=True)
            event_log = EventLog(db)
            nc = await connect(nats, name=f"kernelgraph-{agent}", wait_s=SERVE_WAIT_S)
            service = Recorder(nc, event_log, settings=settings)
        else:
            load_agents(AGENT_MODULES)
            cls = get(agent)
            event_log = None
            nc = await connect(nats, name=f"kernelgraph-{agent}", wait_s=SERVE_WAIT_S)
            service = cls(nc, settings=settings, concurrency=concurrency)
        try:
            await service.start()
            consumers = ", ".join(getattr(service, "consumers", ()))  # an executor's: one per target
            log.info("serving %s on %s (pid %d)%s", agent, nats, os.getpid(),
                     f"; consumers {consumers}" if consumers else "")
            waiter = asyncio.ensure_future(stop.wait())
            if agent == RECORDER:
                assert service._task is not None
                await asyncio.wait([waiter, service._task], return_when=asyncio.FIRST_COMPLETED)
            else:
                await waiter
            log.info("stopping %s: draining", agent)
        finally:
            await service.stop()
            with contextlib.suppress(Exception):
                await nc.drain()
            if event_log is not None:
                event_log.close()
        if agent == RECORDER and service.failed is not None:
            raise service.failed
        return {"agent": agent, "nats_url": nats, **service.stats.as_dict()}

    result = _run_until_signal(main)
    if json:
        emit_json(result)


@app.command("nats-server")
def nats_server(
    port: Annotated[int, typer.Option("--port", help="Port to listen on [default: a free one].",
                                      show_default=False)] = 0,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    data_dir: Annotated[
        Path | None,
        typer.Option("--data-dir", help="JetStream storage [default: a temporary directory, removed at exit].",
                     show_default=False),
    ] = None,
    json: JsonOpt = False,
) -> None:
    """Run the embedded nats-server (JetStream on) in the foreground until Ctrl-C.

    Clients authenticate with KG_NATS_TOKEN when it is set in this environment; without it
    the server takes anyone who can reach HOST:PORT (loopback by default).
    """
    from bus.connection import TOKEN_ENV
    from bus.server import EmbeddedNats

    server = EmbeddedNats(data_dir, host=host, port=port or None, token=os.environ.get(TOKEN_ENV) or None)

    async def main(stop: asyncio.Event) -> dict[str, Any]:
        server.start()
        try:
            auth = f"token from ${TOKEN_ENV}" if server.token else "no auth"
            err_console.print(
                f"nats-server {server.url} ({auth}), JetStream in {server.data_dir}, "
                f"ready in {server.start_s:.3f}s; Ctrl-C stops"
            )
            if json:
                emit_json({"url": server.url, "data_dir": str(server.data_dir), "start_s": server.start_s,
                           "pid": server.process.pid if server.process else None})
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.5)
                if not server.running:
                    raise ConnectionError(f"nats-server exited; see {server.log_path}")
            return {}
        finally:
            server.stop()

    _run_until_signal(main)


@app.command()
def agents(json: JsonOpt = False) -> None:
    """List the registered agents and the commands each takes."""
    from bus.registry import load_agents
    from bus.service import describe
    from kernelgraph.runtime import AGENT_MODULES

    try:
        registry = load_agents(AGENT_MODULES)
    except ImportError as exc:
        fail(str(exc))
    rows = describe(list(dict(sorted(registry.items())).values()))
    if json:
        emit_json({"agents": rows})
        return
    from rich.table import Table

    table = Table(title="registered agents")
    for column in ("agent", "version", "commands", "class"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["agent"], row["version"], ", ".join(row["commands"]), row["class"])
    console.print(table)


@app.command()
def ping(
    nats: NatsOpt = None,
    count: Annotated[int, typer.Option("--count", "-n", min=1, help="Pings to send, one after another.")] = 10,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for each answer.")] = 10.0,
    json: JsonOpt = False,
) -> None:
    """Round-trip Pings through the echo agent: command out, event back.

    With --nats it checks a running bus (an echo agent must be serving there); without, it
    starts an embedded server and echo agent just for the check.
    """
    from bus.commands import Ping
    from eventstore.events import new_event_id

    async def main(stop: asyncio.Event) -> dict[str, Any]:
        from bus.client import BusClient
        from bus.connection import connect
        from kernelgraph.runtime import Runtime, RuntimeConfig

        runtime: Runtime | None = None
        if nats is None:
            runtime = await Runtime(RuntimeConfig(agents=["echo"])).start()
            assert runtime.client is not None
            client, nc = runtime.client, None
        else:
            nc = await connect(nats, name="kernelgraph-ping")
            client = BusClient(nc)
        run_id = f"ping-{new_event_id()}"
        latencies: list[float] = []
        try:
            for seq in range(count):
                if stop.is_set():
                    break
                started = time.perf_counter()
                try:
                    await client.request(Ping.create(run_id=run_id, seq=seq), timeout=timeout)
                except TimeoutError:
                    raise ConnectionError(
                        f"no answer to ping {seq} within {timeout}s: is an echo agent serving on {nats}?"
                    ) from None
                latencies.append((time.perf_counter() - started) * 1000)
        finally:
            if runtime is not None:
                await runtime.stop()
            if nc is not None:
                await client.close()
                await nc.drain()
        return {
            "nats_url": nats or "embedded",
            "pings": len(latencies),
            "p50_ms": round(statistics.median(latencies), 3) if latencies else None,
            "max_ms": round(max(latencies), 3) if latencies else None,
        }

    result = _run_until_signal(main)
    if json:
        emit_json(result)
    else:
        console.print(
            f"{result['pings']} pings via {result['nats_url']}: p50 {result['p50_ms']} ms, max {result['max_ms']} ms"
        )


@app.command("bus-status")
def bus_status(nats: NatsOpt = None, json: JsonOpt = False) -> None:
    """Show the bus's streams and consumers: messages waiting, in flight, redelivered."""
    if nats is None:
        fail("bus-status needs --nats URL (or KG_NATS_URL)")

    async def main(stop: asyncio.Event) -> dict[str, Any]:
        from nats.js.errors import NotFoundError

        from bus import subjects
        from bus.connection import connect

        nc = await connect(nats, name="kernelgraph-status")
        js = nc.jetstream()
        out: dict[str, Any] = {"nats_url": nats, "streams": {}}
        try:
            for stream in (subjects.COMMANDS_STREAM, subjects.EVENTS_STREAM, subjects.ARTIFACTS_STREAM):
                try:
                    info = await js.stream_info(stream)
                except NotFoundError:
                    out["streams"][stream] = None
                    continue
                consumers = {}
                for c in await js.consumers_info(stream):
                    consumers[c.name] = {
                        "waiting_to_deliver": c.num_pending,
                        "in_flight": c.num_ack_pending,
                        "redelivered": c.num_redelivered,
                        "pull_requests": c.num_waiting,
                    }
                out["streams"][stream] = {
                    "messages": info.state.messages, "bytes": info.state.bytes, "consumers": consumers,
                }
        finally:
            await nc.drain()
        return out

    result = _run_until_signal(main)
    if json:
        emit_json(result)
        return
    from rich.table import Table

    table = Table(title=f"bus at {nats}")
    for column in ("stream", "messages", "consumer", "waiting", "in flight", "redelivered", "pull requests"):
        table.add_column(column)
    for stream, info in result["streams"].items():
        if info is None:
            table.add_row(stream, "(absent)", "", "", "", "", "")
            continue
        table.add_row(stream, str(info["messages"]), "", "", "", "", "")
        for name, c in info["consumers"].items():
            table.add_row("", "", name, str(c["waiting_to_deliver"]), str(c["in_flight"]),
                          str(c["redelivered"]), str(c["pull_requests"]))
    console.print(table)
