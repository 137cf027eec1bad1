"""JetStream streams and consumers, created idempotently at start-up by every process.

- KG_CMD (`kg.cmd.>`): work-queue retention, so a command leaves the stream once a worker
  acks it; one durable pull consumer per agent kind, shared by all its workers (the queue
  group), explicit ack, `max_deliver` deliveries with growing ack-timeout backoff. A routed
  agent (the executor) has one consumer per route instead (`kg.cmd.executor.<target>`) and
  no consumer on `kg.cmd.<agent>` itself: a work-queue stream refuses consumers whose
  filters overlap, so there is never a wildcard consumer beside the per-route ones. A command
  whose route no consumer filters stays in the stream until a worker for it starts.
- KG_EVT (`kg.evt.>`): limits retention (kept `events_max_age`), deduplicated on
  Nats-Msg-Id = event_id; the recorder's durable consumer acks whole batches (ack-all).
- KG_ART (`kg.art.<sha256>`): one message per artifact, kept `artifacts_max_age` so agents
  can read artifacts back by hash; the recorder copies each into the log.

A second start with the same settings changes nothing; changed settings update the stream
or consumer in place.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import BadRequestError, NotFoundError

from bus import subjects
from bus.connection import BusConfigError

_STREAM_NAME_IN_USE = 10058
DAY_S = 24 * 3600.0


@dataclass(frozen=True)
class BusSettings:
    """Delivery settings shared by every process on one bus (tests shrink the timings)."""

    ack_wait_s: float = 30.0
    """A worker that neither acks nor reports progress for this long is presumed dead."""
    max_deliver: int = 5
    """Deliveries of one command before its agent gives up with AgentFailed."""
    max_backoff_s: float = 300.0
    duplicate_window_s: float = 600.0
    events_max_age_s: float = 7 * DAY_S
    artifacts_max_age_s: float = 7 * DAY_S
    commands_max_age_s: float = 7 * DAY_S
    max_ack_pending: int = 10_000
    memory_storage: bool = False

    def __post_init__(self) -> None:
        if self.ack_wait_s <= 0:
            raise BusConfigError(f"ack_wait_s={self.ack_wait_s} must be > 0")
        if self.max_deliver < 1:
            raise BusConfigError(f"max_deliver={self.max_deliver} must be >= 1")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> BusSettings:
        """Settings from KG_BUS_<FIELD> variables (e.g. KG_BUS_ACK_WAIT_S=5), then `overrides`.

        Every process on one bus must agree (the last to start rewrites the consumers), so
        compose passes the same environment to all of them.
        """
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            raw = env.get(f"KG_BUS_{field.name.upper()}")
            if raw is None or raw == "":
                continue
            kind = type(field.default)
            try:
                values[field.name] = raw.lower() in ("1", "true", "yes") if kind is bool else kind(raw)
            except ValueError:
                raise BusConfigError(f"KG_BUS_{field.name.upper()}={raw!r} is not a {kind.__name__}") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    @property
    def backoff_s(self) -> list[float]:
        """Ack-timeout redelivery delays: ack_wait, then doubling, capped (one fewer than deliveries)."""
        return [
            min(self.ack_wait_s * 2**i, max(self.max_backoff_s, self.ack_wait_s))
            for i in range(self.max_deliver - 1)
        ]

    def retry_delay_s(self, delivered: int, base_s: float) -> float:
        """Nak delay after the `delivered`-th delivery failed."""
        return min(base_s * 2 ** max(delivered - 1, 0), self.max_backoff_s)

    @property
    def _storage(self) -> StorageType:
        return StorageType.MEMORY if self.memory_storage else StorageType.FILE


def stream_configs(settings: BusSettings) -> list[StreamConfig]:
    return [
        StreamConfig(
            name=subjects.COMMANDS_STREAM,
            subjects=[subjects.COMMANDS_WILDCARD],
            retention=RetentionPolicy.WORK_QUEUE,
            storage=settings._storage,
            discard=DiscardPolicy.OLD,
            max_age=settings.commands_max_age_s,
            duplicate_window=settings.duplicate_window_s,
        ),
        StreamConfig(
            name=subjects.EVENTS_STREAM,
            subjects=[subjects.EVENTS_WILDCARD],
            retention=RetentionPolicy.LIMITS,
            storage=settings._storage,
            discard=DiscardPolicy.OLD,
            max_age=settings.events_max_age_s,
            duplicate_window=settings.duplicate_window_s,
        ),
        StreamConfig(
            name=subjects.ARTIFACTS_STREAM,
            subjects=[subjects.ARTIFACTS_WILDCARD],
            retention=RetentionPolicy.LIMITS,
            storage=settings._storage,
            discard=DiscardPolicy.OLD,
            max_age=settings.artifacts_max_age_s,
            max_msgs_per_subject=1,
            duplicate_window=settings.duplicate_window_s,
            allow_direct=True,
        ),
    ]


async def ensure_streams(js: JetStreamContext, settings: BusSettings) -> None:
    for config in stream_configs(settings):
        try:
            await js.add_stream(config)
        except BadRequestError as exc:
            if exc.err_code != _STREAM_NAME_IN_USE:
                raise
            await js.update_stream(config)


def agent_consumer_config(agent: str, settings: BusSettings, route: str | None = None) -> ConsumerConfig:
    name = subjects.agent_consumer(agent, route)
    return ConsumerConfig(
        name=name,
        durable_name=name,
        description=f"workers of agent {agent}" + ("" if route is None else f" taking route {route}"),
        filter_subject=subjects.command_subject(agent, route),
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        ack_wait=settings.ack_wait_s,
        max_deliver=settings.max_deliver,
        backoff=settings.backoff_s or None,
        max_ack_pending=settings.max_ack_pending,
        max_waiting=4096,
    )


async def ensure_agent_consumer(
    js: JetStreamContext, agent: str, settings: BusSettings, route: str | None = None
) -> str:
    config = agent_consumer_config(agent, settings, route)
    await js.add_consumer(subjects.COMMANDS_STREAM, config)
    assert config.durable_name is not None
    return config.durable_name


def recorder_consumer_config(
    name: str, filter_subject: str, settings: BusSettings, *, start_seq: int = 0
) -> ConsumerConfig:
    return ConsumerConfig(
        name=name,
        durable_name=name,
        description="the recorder: copies the stream into the DuckDB log",
        filter_subject=filter_subject,
        ack_policy=AckPolicy.ALL,
        deliver_policy=DeliverPolicy.BY_START_SEQUENCE if start_seq > 1 else DeliverPolicy.ALL,
        opt_start_seq=start_seq if start_seq > 1 else None,
        ack_wait=max(settings.ack_wait_s, 30.0),
        max_deliver=-1,
        max_ack_pending=100_000,
        max_waiting=512,
    )


async def reset_recorder_consumer(
    js: JetStreamContext, stream: str, name: str, filter_subject: str, settings: BusSettings
) -> int:
    """(Re)create the recorder's consumer just after the last batch it acked; returns that start.

    The recorder acks a whole batch with one ack-all, only after the batch is committed, so
    the consumer's ack floor is exactly what the log holds. A recorder killed mid-batch leaves
    that batch delivered but unacked; left alone, an ack-all for a later batch would ack it
    too and lose it. Restarting the consumer at ack floor + 1 redelivers it at once instead
    (the log drops whatever it had already committed).
    """
    start_seq = 0
    try:
        info = await js.consumer_info(stream, name)
    except NotFoundError:
        info = None
    if info is not None:
        start_seq = (info.ack_floor.stream_seq if info.ack_floor else 0) + 1
        await js.delete_consumer(stream, name)
    await js.add_consumer(stream, recorder_consumer_config(name, filter_subject, settings, start_seq=start_seq))
    return max(start_seq, 1)


async def reset_recorder_consumers(js: JetStreamContext, settings: BusSettings) -> None:
    await reset_recorder_consumer(
        js, subjects.EVENTS_STREAM, subjects.RECORDER_EVENTS_CONSUMER, subjects.EVENTS_WILDCARD, settings
    )
    await reset_recorder_consumer(
        js, subjects.ARTIFACTS_STREAM, subjects.RECORDER_ARTIFACTS_CONSUMER,
        subjects.ARTIFACTS_WILDCARD, settings,
    )
