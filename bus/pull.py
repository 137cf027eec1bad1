"""A JetStream pull consumer client that returns as soon as messages are there.

nats-py's `fetch(n)` waits out its whole timeout when fewer than `n` messages exist, which
would make every command wait and every recorder batch stall on a quiet bus. Here each
request asks for `{"batch": n, "expires": t, "no_wait": true}`: the server answers at once
with what it has (up to `n`), or waits up to `t` for the first message and then answers
with what it has, and closes the request with a status (404/408) unless it sent all `n`.
Each request gets its own reply subject under one wildcard inbox, so a late status from an
abandoned request can never end a newer one; messages are always kept (they were
delivered to this client and must be acked or handed back).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import logging
import time

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

log = logging.getLogger("kernelgraph.bus")

_STATUS = "Status"
_HEARTBEAT = "100"


class PullConsumer:
    """Fetch from one durable consumer of one stream through one reply inbox."""

    def __init__(self, nc: NATS, stream: str, consumer: str, *, api_prefix: str = "$JS.API") -> None:
        self.nc = nc
        self.stream = stream
        self.consumer = consumer
        self._next_subject = f"{api_prefix}.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self._inbox = ""
        self._sub: Subscription | None = None
        self._buffer: collections.deque[Msg] = collections.deque()
        self._current = ""
        self._ended = False
        self._arrived = asyncio.Event()
        self._tokens = itertools.count(1)

    async def open(self) -> PullConsumer:
        self._inbox = self.nc.new_inbox()
        self._sub = await self.nc.subscribe(f"{self._inbox}.*", cb=self._on_message)
        return self

    async def _on_message(self, msg: Msg) -> None:
        status = msg.headers.get(_STATUS) if msg.headers else None
        if status is None:
            self._buffer.append(msg)
        elif status != _HEARTBEAT:
            if msg.subject.rpartition(".")[2] == self._current:
                self._ended = True
            if status == "409":
                log.warning("%s/%s: pull request ended: %s", self.stream, self.consumer,
                            msg.headers.get("Description", "") if msg.headers else "")
        self._arrived.set()

    async def fetch(self, batch: int, *, wait_s: float, max_bytes: int | None = None) -> list[Msg]:
        """Up to `batch` messages: those available now, or the first ones to come within `wait_s`.

        `wait_s=0` never waits for new messages (an empty list means none were waiting).
        `max_bytes` bounds the payload bytes of one answer (keep it above the server's max_payload).
        """
        if self._sub is None:
            raise RuntimeError("open() the consumer first")
        if batch < 1:
            raise ValueError(f"{batch=} must be >= 1")
        if self._buffer:  # delivered after an earlier request was given up on: take them first
            return self._take(batch)
        token = str(next(self._tokens))
        request: dict[str, object] = {"batch": batch, "no_wait": True}
        if wait_s > 0:
            request["expires"] = max(int(wait_s * 1e9), 1_000_000)
        if max_bytes is not None:
            request["max_bytes"] = max_bytes
        self._current, self._ended = token, False
        self._arrived.clear()
        await self.nc.publish(self._next_subject, json.dumps(request).encode(), reply=f"{self._inbox}.{token}")
        deadline = time.monotonic() + wait_s + 2.0  # the server's own status normally ends it first
        msgs: list[Msg] = []
        while len(msgs) < batch:
            if self._buffer:
                msgs.extend(self._take(batch - len(msgs)))
                continue
            if self._ended:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), timeout=remaining)
            except TimeoutError:
                break
        self._current = ""
        return msgs

    def _take(self, n: int) -> list[Msg]:
        out = []
        while self._buffer and len(out) < n:
            out.append(self._buffer.popleft())
        return out

    def take_buffered(self) -> list[Msg]:
        """Messages delivered but not yet fetched (to hand back on shutdown)."""
        out = list(self._buffer)
        self._buffer.clear()
        return out

    async def close(self) -> None:
        if self._sub is not None:
            sub, self._sub = self._sub, None
            try:
                await sub.unsubscribe()
            except Exception as exc:  # closing connection: nothing left to unsubscribe from
                log.debug("unsubscribe %s: %s", self._inbox, exc)
