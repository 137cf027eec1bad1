"""The log's one question over the bus: what is recorded of a run, and does the chain hold?

Only the recorder opens the DuckDB file, so a process that audits a run asks it on
`kg.log.verify` (core NATS request-reply: a `LogVerifyRequest`, answered by a `LogVerified`):

- the hash chain's verification (the whole log; recomputed only when rows were appended
  since the last request: while the recorder runs it holds the file's lock, so nobody else
  can rewrite a row it has verified);
- the run's recorded event ids in log order, and a digest of their bodies
  (`events_digest`), so the asker can prove that the copies it read from the events
  stream are, byte for byte, the recorded ones;
- which of the named artifacts the log does not hold.

The recorder answers on its own database thread (`Recorder.read`), between commits. A
request it cannot read, or an answer too large for one message, is answered with `error`;
`ask_log` turns that, and silence, into `LogUnavailable`. What to conclude from silence is
the asker's decision (the auditor fails closed).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TypeVar

import msgspec
import nats.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from bus import subjects
from eventstore.log import EventLog
from kernelgraph.errors import KernelgraphError

log = logging.getLogger("kernelgraph.recorder")

T = TypeVar("T")

REPLY_MARGIN = 4096
"""Bytes left under the server's max_payload for the reply's framing."""


class LogVerifyRequest(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str
    artifacts: list[str] = []
    """Artifacts (sha256) whose presence in the log the asker wants to know."""


class LogVerified(msgspec.Struct, frozen=True, kw_only=True):
    chain_ok: bool = False
    rows_checked: int = 0
    reason: str = ""
    """Why the chain does not verify ("" when it does)."""
    event_ids: list[str] = []
    """The run's recorded events, in log order."""
    events_sha256: str = ""
    """`events_digest` of those events' recorded bodies, in the same order."""
    missing_artifacts: list[str] = []
    error: str = ""
    """Set when the request could not be answered; every other field is then empty."""


class LogUnavailable(KernelgraphError):
    """No recorder answered in time, or it could not answer this request."""


def events_digest(bodies: Iterable[bytes]) -> str:
    """sha256 over the sha256 of each event body (`eventstore.codec.encode_event`), in order."""
    digest = hashlib.sha256()
    for body in bodies:
        digest.update(hashlib.sha256(body).digest())
    return digest.hexdigest()


class LogVerifier:
    """The recorder's side: `on_request` is the subscription callback."""

    def __init__(self, read: Callable[[Callable[[EventLog], T]], Awaitable[T]],
                 max_payload: int) -> None:
        self._read = read
        self._max_payload = max_payload
        self._verified_seq = -1
        self._chain: tuple[bool, int, str] = (False, 0, "")

    def answer(self, event_log: EventLog, request: LogVerifyRequest) -> LogVerified:
        """Runs on the recorder's database thread."""
        if self._verified_seq != event_log.last_seq:
            report = event_log.verify()
            self._chain = (report.ok, report.rows_checked, report.reason)
            self._verified_seq = event_log.last_seq
        rows = event_log.sql("SELECT event_id, body FROM events WHERE run_id = ? ORDER BY seq",
                             [request.run_id])
        wanted = list(dict.fromkeys(request.artifacts))
        present = {r[0] for r in event_log.sql(
            "SELECT sha256 FROM artifacts WHERE sha256 IN (SELECT unnest(?::VARCHAR[]))",
            [wanted])} if wanted else set()
        ok, checked, reason = self._chain
        return LogVerified(
            chain_ok=ok, rows_checked=checked, reason=reason,
            event_ids=[str(r[0]) for r in rows],
            events_sha256=events_digest(str(r[1]).encode() for r in rows),
            missing_artifacts=[sha for sha in wanted if sha not in present])

    async def on_request(self, msg: Msg) -> None:
        try:
            request = msgspec.json.decode(msg.data, type=LogVerifyRequest)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            reply = LogVerified(error=f"not a LogVerifyRequest: {exc}")
        else:
            try:
                reply = await self._read(lambda event_log: self.answer(event_log, request))
            except Exception as exc:  # the asker gets the cause; the recorder goes on recording
                log.warning("recorder: %s for run %s failed: %s", subjects.LOG_VERIFY,
                            request.run_id, exc)
                reply = LogVerified(error=f"the recorder could not read the log: {exc}")
        data = msgspec.json.encode(reply)
        if len(data) > self._max_payload - REPLY_MARGIN:
            data = msgspec.json.encode(LogVerified(error=(
                f"run {request.run_id} has {len(reply.event_ids)} events, too many for one "
                f"reply within max_payload={self._max_payload} bytes")))
        try:
            await msg.respond(data)
        except nats.errors.Error as exc:
            log.warning("recorder: could not answer %s: %s", subjects.LOG_VERIFY, exc)


async def ask_log(nc: NATS, run_id: str, artifacts: Sequence[str] = (), *,
                  timeout: float = 10.0) -> LogVerified:
    """Ask the recorder; `LogUnavailable` when none answers within `timeout` or it cannot."""
    request = LogVerifyRequest(run_id=run_id, artifacts=list(artifacts))
    try:
        msg = await nc.request(subjects.LOG_VERIFY, msgspec.json.encode(request), timeout=timeout)
    except nats.errors.NoRespondersError:
        raise LogUnavailable(f"no recorder listens on {subjects.LOG_VERIFY}") from None
    except (nats.errors.TimeoutError, TimeoutError):
        raise LogUnavailable(f"the recorder did not answer on {subjects.LOG_VERIFY} within "
                             f"{timeout:g} s") from None
    try:
        reply = msgspec.json.decode(msg.data, type=LogVerified)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise LogUnavailable(f"the recorder's answer cannot be read: {exc}") from None
    if reply.error:
        raise LogUnavailable(reply.error)
    return reply


__all__ = ["LogUnavailable", "LogVerified", "LogVerifier", "LogVerifyRequest", "ask_log",
           "events_digest"]
