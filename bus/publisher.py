"""Asynchronous JetStream publishing with per-message acks, lean enough for the event path.

Same protocol as nats-py's `publish_async` (a PUB with a reply subject; JetStream answers
with a PubAck), but one wildcard reply subscription, a counter for reply tokens and a
msgspec-decoded PubAck: an event's publish path costs a few microseconds instead of tens,
which is most of what a service spends per event. `pending_limit` bounds the unacked
messages in flight (a publisher faster than the server waits instead of growing memory).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping

import msgspec
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from bus import subjects
from kernelgraph.errors import KernelgraphError


class PublishError(KernelgraphError, RuntimeError):
    """JetStream refused the message (no stream for the subject, limits, wrong sequence...)."""


class _ApiError(msgspec.Struct):
    code: int = 0
    err_code: int = 0
    description: str = ""


class PubAck(msgspec.Struct):
    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    error: _ApiError | None = None


_decode_ack = msgspec.json.Decoder(PubAck).decode


class JetStreamPublisher:
    def __init__(self, nc: NATS, *, pending_limit: int = 8192) -> None:
        self.nc = nc
        self.pending_limit = pending_limit
        self._prefix = ""
        self._sub: Subscription | None = None
        self._futures: dict[str, asyncio.Future[PubAck]] = {}
        self._tokens = itertools.count(1)
        self._room = asyncio.Event()
        self._room.set()

    async def open(self) -> JetStreamPublisher:
        if self._sub is None:
            self._prefix = self.nc.new_inbox() + "."
            self._sub = await self.nc.subscribe(self._prefix + "*", cb=self._on_ack)
        return self

    async def _on_ack(self, msg: Msg) -> None:
        future = self._futures.pop(msg.subject[len(self._prefix):], None)
        if len(self._futures) < self.pending_limit:
            self._room.set()
        if future is None or future.done():
            return
        if msg.headers and msg.headers.get("Status") == "503":
            future.set_exception(PublishError(f"no stream takes subject {msg.subject!r}"))
            return
        try:
            ack = _decode_ack(msg.data)
        except msgspec.DecodeError as exc:
            future.set_exception(PublishError(f"unreadable PubAck: {exc}"))
            return
        if ack.error is not None:
            future.set_exception(PublishError(f"JetStream: {ack.error.description} ({ack.error.err_code})"))
        else:
            future.set_result(ack)

    async def publish(
        self, subject: str, payload: bytes, *, msg_id: str | None = None, headers: Mapping[str, str] | None = None
    ) -> asyncio.Future[PubAck]:
        """Send one message; the returned future resolves with JetStream's PubAck."""
        if self._sub is None:
            await self.open()
        while len(self._futures) >= self.pending_limit:
            self._room.clear()
            await self._room.wait()
        token = str(next(self._tokens))
        future: asyncio.Future[PubAck] = asyncio.get_running_loop().create_future()
        self._futures[token] = future
        hdrs = dict(headers) if headers else {}
        if msg_id is not None:
            hdrs[subjects.MSG_ID_HEADER] = msg_id
        try:
            await self.nc.publish(subject, payload, reply=self._prefix + token, headers=hdrs or None)
        except BaseException:
            self._futures.pop(token, None)
            raise
        return future

    async def wait(self, futures: list[asyncio.Future[PubAck]], *, timeout: float) -> list[PubAck]:
        """All PubAcks, or TimeoutError (and the futures are forgotten) after `timeout` seconds."""
        if not futures:
            return []
        try:
            return await asyncio.wait_for(asyncio.gather(*futures), timeout)
        except TimeoutError:
            lost = set(map(id, futures))
            for token in [t for t, f in self._futures.items() if id(f) in lost]:
                self._futures.pop(token, None)
            if len(self._futures) < self.pending_limit:
                self._room.set()
            raise

    def fail_pending(self, reason: str) -> None:
        """Fail every unacked publish (the connection is gone; their fate is unknown)."""
        futures, self._futures = self._futures, {}
        for future in futures.values():
            if not future.done():
                future.set_exception(PublishError(reason))
        self._room.set()

    async def close(self) -> None:
        if self._sub is not None:
            sub, self._sub = self._sub, None
            try:
                await sub.unsubscribe()
            finally:
                self.fail_pending("publisher closed")
