"""The `Service` base class: one agent kind, taking commands from JetStream, yielding events.

A subclass declares `agent` and `commands` and implements `handle(cmd)`, an async generator
of events. For each command the base class:

1. decodes it with msgspec (a message it cannot decode is dead-lettered: a
   `MessageDeadLettered` event keeps the raw bytes, the message is terminated, the
   service goes on);
2. runs the handler, publishing each event as it is yielded on `kg.evt.<run_id>.<type>`
   with `Nats-Msg-Id = event_id`, while telling JetStream the command is in progress;
3. waits for JetStream's ack of every event, then acks the command.

Event ids are derived from the command id and the event's position (`bus.codec`), so a
command redelivered after its worker died yields the same ids and nothing is recorded
twice. A handler error naks the command with a growing delay; on the last delivery the
service publishes `AgentFailed` and terminates the command. `PermanentError` skips the
retries. `stop()` stops taking commands, lets in-flight ones finish (up to the drain
timeout) and naks the rest for another worker, so shutdown loses nothing.

A service takes its commands from one durable consumer per route it serves (`routes()`):
by default the agent's own subject, `kg.cmd.<agent>`; a routed agent (the executor, one
route per target) overrides it. With several consumers the service polls them in turn,
each for a share of the fetch timeout, so a command on any of them waits at most about
that long for its turn and the service never holds more commands than its concurrency.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import traceback
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, TypeVar

import msgspec
import nats.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from bus import artifacts, subjects
from bus.codec import (
    FAILURE_INDEX,
    MAX_EVENTS_PER_COMMAND,
    DerivedIds,
    command_decoder,
    derived_event_id,
    encode,
    salvage_run_id,
)
from bus.commands import Command
from bus.publisher import JetStreamPublisher
from bus.pull import PullConsumer
from bus.streams import BusSettings, ensure_agent_consumer, ensure_streams
from eventstore.events import AgentFailed, Event, MessageDeadLettered
from kernelgraph.errors import KernelgraphError

log = logging.getLogger("kernelgraph.bus")

E = TypeVar("E", bound=Event)

_MAX_ERROR_CHARS = 4000


class PermanentError(KernelgraphError):
    """The command cannot succeed however often it is retried: fail it now."""


def unwrapped(error: str) -> str:
    """An `AgentFailed` error in the agent's own words: without `PermanentError`'s class
    path, which the give-up carries in front of them."""
    return error.removeprefix(f"{PermanentError.__module__}.PermanentError: ")


@dataclass
class ServiceStats:
    received: int = 0
    completed: int = 0
    retried: int = 0
    failed: int = 0
    dead_lettered: int = 0
    events_published: int = 0
    in_flight: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class Service:
    """Base class of every agent service; see the module docstring for the contract."""

    agent: ClassVar[str]
    commands: ClassVar[tuple[type[Command], ...]]
    version: ClassVar[str] = "1"
    retry_base_s: ClassVar[float] = 1.0
    """First nak delay after a handler error; doubles per delivery (capped by the settings)."""
    handler_timeout_s: ClassVar[float | None] = None
    """A handler running longer than this counts as failed (and is retried)."""
    publish_timeout_s: ClassVar[float] = 30.0
    """JetStream must ack a command's events within this; otherwise the command is retried."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "agent" in cls.__dict__:
            subjects.check_agent(cls.agent)
        if "commands" in cls.__dict__:
            if not cls.commands:
                raise TypeError(f"{cls.__qualname__}.commands is empty")
            for command in cls.commands:
                if not (isinstance(command, type) and issubclass(command, Command)):
                    raise TypeError(f"{cls.__qualname__}.commands holds {command!r}, not a Command class")
                if not isinstance(command.__struct_config__.tag, str):
                    raise TypeError(f"{command.__qualname__} has no tag; declare tag=\"Name\"")

    def __init__(
        self,
        nc: NATS,
        *,
        settings: BusSettings | None = None,
        concurrency: int = 1,
        fetch_timeout_s: float = 0.5,
        drain_timeout_s: float = 30.0,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"{concurrency=} must be >= 1")
        for attribute in ("agent", "commands"):
            if not hasattr(type(self), attribute):
                raise TypeError(f"{type(self).__qualname__} must declare `{attribute}`")
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream()
        self.publisher = JetStreamPublisher(nc)
        self.settings = settings or BusSettings()
        self.concurrency = concurrency
        self.fetch_timeout_s = fetch_timeout_s
        self.drain_timeout_s = drain_timeout_s
        self.stats = ServiceStats()
        self._decoder = command_decoder(self.commands)
        self._max_deliver = self.settings.max_deliver
        self._stopping = asyncio.Event()
        self._slot_freed = asyncio.Event()
        self._pulls: list[PullConsumer] = []
        self.consumers: tuple[str, ...] = ()
        """The durable consumers this service takes commands from (known once started)."""
        self._dispatcher: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._in_flight: dict[int, tuple[Msg, float]] = {}
        self._handling: set[str] = set()
        self._heartbeat: asyncio.Task[None] | None = None
        self._started = False

    @property
    def producer(self) -> str:
        return f"{self.agent}@{self.version}"

    # --- what subclasses write ------------------------------------------------------------

    def handle(self, cmd: Any) -> AsyncIterator[Event]:
        """Carry out one command, yielding its events in order (an async generator)."""
        raise NotImplementedError(f"{type(self).__qualname__} must implement handle()")

    async def setup(self) -> None:
        """Called once before the first command (load models, open clients)."""

    async def teardown(self) -> None:
        """Called once after the last command."""

    def routes(self) -> Sequence[str | None]:
        """The routes this service takes commands from, one durable consumer each.

        None is the agent's own subject (`kg.cmd.<agent>`, every agent but a routed one); a
        name is `kg.cmd.<agent>.<name>`, where commands of a class with a `route_field` go.
        Every worker taking a route shares its consumer; the filters of one agent's routes
        never overlap, as a work-queue stream requires.
        """
        return (None,)

    # --- helpers for handlers -------------------------------------------------------------

    def event(self, cls: type[E], cmd: Command, **payload: Any) -> E:
        """A new event of `cls` caused by `cmd` (its run, node and id as causation).

        Its event_id is left blank: the base class gives every yielded event an id derived
        from the command and the event's position among those the handler yields. A handler
        whose events come in an order that depends on timing names them itself (`event_id`
        in `payload`, derived from what the event is), so a redelivered command still
        yields the same ids.
        """
        payload.setdefault("node_id", cmd.node_id)
        payload.setdefault("event_id", "")
        return cls(
            run_id=cmd.run_id, ts=time.time(), producer=self.producer,
            causation_id=cmd.command_id, **payload,
        )

    async def put_artifacts(self, items: Iterable[tuple[bytes, str]]) -> list[str]:
        """Publish artifacts before the events that name them; returns their sha256 hashes."""
        return await artifacts.publish_artifacts(self.js, items, max_payload=self.nc.max_payload)

    async def put_artifact(self, data: bytes, kind: str) -> str:
        return (await self.put_artifacts([(data, kind)]))[0]

    async def get_artifact(self, sha256: str) -> bytes:
        return (await artifacts.fetch_artifact(self.js, sha256))[0]

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        if self._started:
            raise RuntimeError(f"service {self.agent} already started")
        self._started = True
        await ensure_streams(self.js, self.settings)
        routes = list(dict.fromkeys(self.routes()))
        if not routes:
            raise ValueError(f"service {self.agent} serves no route")
        self.consumers = tuple([await ensure_agent_consumer(self.js, self.agent, self.settings, route)
                                for route in routes])
        info = await self.js.consumer_info(subjects.COMMANDS_STREAM, self.consumers[0])
        self._max_deliver = info.config.max_deliver or self.settings.max_deliver
        await self.publisher.open()
        await self.setup()
        for consumer in self.consumers:
            self._pulls.append(await PullConsumer(self.nc, subjects.COMMANDS_STREAM, consumer).open())
        self._dispatcher = asyncio.create_task(self._dispatch(self._pulls), name=f"{self.agent}-dispatch")
        self._heartbeat = asyncio.create_task(self._heartbeat_loop(), name=f"{self.agent}-heartbeat")

    async def stop(self, drain_timeout_s: float | None = None) -> None:
        """Stop taking commands, finish in-flight ones, nak what did not finish in time."""
        if not self._started or self._stopping.is_set():
            return
        self._stopping.set()
        self._slot_freed.set()
        timeout = self.drain_timeout_s if drain_timeout_s is None else drain_timeout_s
        if self._dispatcher is not None:  # its last fetch ends within fetch_timeout_s
            await asyncio.gather(self._dispatcher, return_exceptions=True)
        if self._tasks:
            _, unfinished = await asyncio.wait(self._tasks, timeout=max(timeout, 0.0))
            for task in unfinished:  # cancelled handlers nak their command for another worker
                task.cancel()
            await asyncio.gather(*unfinished, return_exceptions=True)
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            await asyncio.gather(self._heartbeat, return_exceptions=True)
        for pull in self._pulls:
            for msg in pull.take_buffered():
                with contextlib.suppress(Exception):
                    await msg.nak()
            await pull.close()
        with contextlib.suppress(Exception):
            await self.nc.flush(timeout=2)
        with contextlib.suppress(Exception):
            await self.publisher.close()
        await self.teardown()

    async def run(self, stop: asyncio.Event) -> None:
        """Start, serve until `stop` is set, then drain."""
        await self.start()
        try:
            await stop.wait()
        finally:
            await self.stop()

    # --- the work loop --------------------------------------------------------------------

    async def _dispatch(self, pulls: Sequence[PullConsumer]) -> None:
        # One consumer: a long poll of fetch_timeout_s. Several: in turn, each for its share
        # (one poll at a time, so never more commands taken than free slots).
        wait_s = self.fetch_timeout_s / len(pulls)
        turn = 0
        while not self._stopping.is_set():
            free = self.concurrency - len(self._tasks)
            if free <= 0:
                self._slot_freed.clear()
                await self._slot_freed.wait()
                continue
            pull = pulls[turn % len(pulls)]
            turn += 1
            try:
                msgs = await pull.fetch(free, wait_s=wait_s)
            except nats.errors.ConnectionClosedError:
                return
            except (nats.errors.Error, OSError) as exc:
                log.warning("%s: fetch failed (%s); retrying", self.agent, exc)
                await asyncio.sleep(0.5)
                continue
            for msg in msgs:
                task = asyncio.create_task(self._process(msg))
                self._tasks.add(task)
                task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._slot_freed.set()
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: command processing crashed", self.agent, exc_info=task.exception())

    async def _heartbeat_loop(self) -> None:
        period = max(self.settings.ack_wait_s / 3, 0.05)
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            for msg, since in list(self._in_flight.values()):
                if now - since >= period and not msg.is_acked:
                    with contextlib.suppress(Exception):
                        await msg.in_progress()

    async def _process(self, msg: Msg) -> None:
        self.stats.received += 1
        try:
            cmd: Command = self._decoder.decode(msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            await self._dead_letter(msg, exc)
            return
        if cmd.command_id in self._handling:
            # A second copy of a command this process is carrying out (a resent command
            # outside the duplicate window, or a redelivery racing its resend): the
            # running handler answers it, and its events would carry the same ids anyway.
            log.info("%s: %s is already being handled here; dropping a duplicate delivery",
                     self.agent, cmd.command_id)
            await msg.ack()
            return
        self._handling.add(cmd.command_id)
        self.stats.in_flight += 1
        key = id(msg)
        self._in_flight[key] = (msg, time.monotonic())
        pending: list[asyncio.Future[Any]] = []
        try:
            try:
                if self.handler_timeout_s is not None:
                    async with asyncio.timeout(self.handler_timeout_s):
                        await self._run_handler(cmd, pending)
                else:
                    await self._run_handler(cmd, pending)
                await self.publisher.wait(pending, timeout=self.publish_timeout_s)
            except asyncio.CancelledError:
                await asyncio.gather(*pending, return_exceptions=True)
                with contextlib.suppress(Exception):
                    await msg.nak()
                raise
            except Exception as exc:
                await asyncio.gather(*pending, return_exceptions=True)
                await self._handler_failed(msg, cmd, exc)
            else:
                await msg.ack()
                self.stats.completed += 1
        finally:
            self._in_flight.pop(key, None)
            self._handling.discard(cmd.command_id)
            self.stats.in_flight -= 1

    async def _run_handler(self, cmd: Command, pending: list[asyncio.Future[Any]]) -> None:
        ids = DerivedIds(cmd.command_id, fallback_ms=int(cmd.ts * 1000))
        index = yielded = 0
        async for event in self.handle(cmd):
            if not isinstance(event, Event):
                raise PermanentError(f"handler yielded {type(event).__qualname__}, not an Event")
            if yielded >= MAX_EVENTS_PER_COMMAND:
                raise PermanentError(f"handler yielded more than {MAX_EVENTS_PER_COMMAND} events")
            if event.event_id:  # named by the handler: takes no position, so an event that
                event_id = event.event_id  # happens on one delivery only shifts no other id
            else:
                event_id = ids[index]
                index += 1
            if event.causation_id is None:
                event = msgspec.structs.replace(event, event_id=event_id, causation_id=cmd.command_id)
            else:
                event = msgspec.structs.replace(event, event_id=event_id)
            pending.append(await self._publish(event))
            yielded += 1

    async def _publish(self, event: Event) -> asyncio.Future[Any]:
        future = await self.publisher.publish(
            subjects.event_subject(event.run_id, event.type_name), encode(event), msg_id=event.event_id
        )
        self.stats.events_published += 1
        return future

    async def _handler_failed(self, msg: Msg, cmd: Command, exc: Exception) -> None:
        delivered = msg.metadata.num_delivered
        permanent = isinstance(exc, PermanentError)
        if not permanent and delivered < self._max_deliver:
            delay = self.settings.retry_delay_s(delivered, self.retry_base_s)
            log.info("%s: %s %s failed on delivery %d (%s); retry in %.2fs",
                     self.agent, cmd.type_name, cmd.command_id, delivered, exc, delay)
            await msg.nak(delay=delay)
            self.stats.retried += 1
            return
        if permanent and (exc.__cause__ is None or isinstance(exc.__cause__, KernelgraphError)):
            # a give-up with its reason (a bad task, a vacuous suite): one line, no traceback,
            # and at info: the AgentFailed event carries it to whoever asked, who says it once
            log.info("%s: %s %s failed for good after %d deliveries: %s", self.agent,
                     cmd.type_name, cmd.command_id, delivered, exc)
        else:
            log.error("%s: %s %s failed for good after %d deliveries", self.agent,
                      cmd.type_name, cmd.command_id, delivered, exc_info=exc)
        error = "".join(traceback.format_exception_only(exc)).strip()
        failed = AgentFailed(
            event_id=derived_event_id(cmd.command_id, FAILURE_INDEX, fallback_ms=int(cmd.ts * 1000)),
            run_id=cmd.run_id,
            node_id=cmd.node_id,
            causation_id=cmd.command_id,
            producer=self.producer,
            ts=time.time(),
            agent=self.agent,
            command_type=cmd.type_name,
            error=error[:_MAX_ERROR_CHARS],
            deliveries=delivered,
            command_id=cmd.command_id,
        )
        try:
            await self.publisher.wait([await self._publish(failed)], timeout=self.publish_timeout_s)
        except Exception as publish_exc:  # leave the command to its ack-wait; it comes back
            log.error("%s: could not publish AgentFailed for %s: %s", self.agent, cmd.command_id, publish_exc)
            return
        await msg.term()
        self.stats.failed += 1

    async def _dead_letter(self, msg: Msg, exc: Exception) -> None:
        meta = msg.metadata
        seed = f"{meta.stream}:{meta.sequence.stream}"
        letter = MessageDeadLettered(
            event_id=derived_event_id(seed, 0, fallback_ms=int(meta.timestamp.timestamp() * 1000)),
            run_id=salvage_run_id(msg.data),
            producer=self.producer,
            ts=time.time(),
            subject=msg.subject,
            error=f"{type(exc).__name__}: {exc}"[:_MAX_ERROR_CHARS],
            raw=bytes(msg.data),
        )
        log.warning("%s: dead-lettered message %s on %s: %s", self.agent, seed, msg.subject, exc)
        try:
            await self.publisher.wait([await self._publish(letter)], timeout=self.publish_timeout_s)
        except Exception as publish_exc:
            log.error("%s: could not publish the dead letter for %s: %s", self.agent, seed, publish_exc)
            await msg.nak(delay=self.retry_base_s)
            return
        await msg.term()
        self.stats.dead_lettered += 1


def describe(services: Sequence[type[Service]]) -> list[dict[str, Any]]:
    """Agent name, version and command tags of service classes (for `kernelgraph agents`)."""
    return [
        {
            "agent": cls.agent,
            "version": cls.version,
            "class": f"{cls.__module__}.{cls.__qualname__}",
            "commands": [c.__struct_config__.tag for c in cls.commands],
        }
        for cls in services
    ]
