"""`auditor`: recomputes a run's claims from the log, so that a run ends only on a clean audit.

For an `AuditRun` it

1. reads the run's events from the events stream, up to the end of what the stream holds
   (what the command's sender could see, at least);
2. asks the recorder (`kg.log.verify`, `bus.logverify`) for the chain's verification, the
   run's recorded events and which cited artifacts the log lacks, again and again until
   the log holds every event it read and it holds a copy of every recorded one (the
   recorder commits in batches; it waits at most `KG_AUDIT_LOG_WAIT_S`, default 60 s);
3. audits exactly the recorded events, in log order (`projections.audit`), with its stream
   copies only once the recorder's digest proves them identical to the recorded bodies, and
   artifacts read from the bus that count as present only where the log holds them;
4. yields `RunAudited` (`findings`: {check, message, event_id}).

It fails closed. When no recorder answers within the wait (or it cannot answer), the audit
is not clean: `chain_ok` is false and the finding `log` says "log unavailable: ..."; the
other checks still run, on the stream's copy, so their findings are known too. Events
on the stream that the log never recorded, recorded events the stream does not carry
(undecodable, or no longer retained) and copies that differ from the recorded bodies are
findings of the check `recorded`. Receipts must be signed by this installation's key (the
verifier's: compose.yaml gives both services the same key volume).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import ClassVar

from agents.base import Agent, AgentContext
from agents.calls import RunHistory
from agents.commands import AuditRun
from bus.artifacts import ArtifactNotFound
from bus.logverify import LogUnavailable, LogVerified, ask_log, events_digest
from bus.registry import register
from eventstore.codec import encode_event
from eventstore.events import Event, RunAudited
from projections.audit import (
    AuditReport,
    ChainStatus,
    Finding,
    audit_run,
    cited_artifacts,
    default_checks,
)
from tools import api

LOG_WAIT_ENV = "KG_AUDIT_LOG_WAIT_S"
"""How long an audit waits for the recorder to have recorded what it read (default 60 s)."""
ASK_TIMEOUT_S = 5.0
POLL_S = 0.2


def log_wait_s() -> float:
    return float(os.environ.get(LOG_WAIT_ENV, "60"))


@register
class AuditorAgent(Agent[AuditRun]):
    agent: ClassVar[str] = "auditor"
    commands: ClassVar[tuple[type, ...]] = (AuditRun,)
    produces: ClassVar[tuple[type[Event], ...]] = (RunAudited,)

    async def _run(self, ctx: AgentContext[AuditRun]) -> AsyncIterator[Event]:
        cmd = ctx.cmd
        async with RunHistory(self.nc, cmd.run_id) as history:
            await history.caught_up()
            seen = list(copies(history))
            reply, problem = await self.recorded(cmd.run_id, history, set(seen))
            stream = copies(history)
            if reply is None:
                events = [stream[i] for i in seen]
                chain = ChainStatus(ok=False, reason=f"log unavailable: {problem}")
                found = [Finding("log", f"log unavailable: {problem}")]
                missing: set[str] = set()
            else:
                events = [stream[i] for i in reply.event_ids if i in stream]
                chain = ChainStatus(reply.chain_ok, reply.rows_checked, reply.reason)
                found = recording_findings(reply, stream, seen, events)
                missing = set(reply.missing_artifacts)
        artifacts, unreachable = await self.artifacts(cited_artifacts(events) - missing)
        found += [Finding("log", f"artifact {sha[:12]} is in the log but no longer on the bus; "
                          "it cannot be audited") for sha in sorted(unreachable)]
        checks = {name: fn for name, fn in default_checks().items()
                  if reply is not None or name != "chain"}  # "log unavailable" says it
        report: AuditReport = await ctx.run_tool(
            audit_run, events, fetch=artifacts.get, chain=chain,
            receipt_problems=api.receipt_problems, final=cmd.final, checks=checks)
        findings = [*found, *report.findings]
        yield self.event(RunAudited, cmd, clean=not findings, final=cmd.final,
                         chain_ok=chain.ok, events_checked=len(events),
                         findings=[{"check": f.check, "message": f.message,
                                    "event_id": f.event_id} for f in findings])

    async def recorded(self, run_id: str, history: RunHistory,
                       seen: set[str]) -> tuple[LogVerified | None, str]:
        """The recorder's answer once the log holds what was seen and the stream holds what
        was recorded (or the last answer when the wait is over); None and why if it is silent."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + log_wait_s()
        reply: LogVerified | None = None
        problem = ""
        while True:
            stream = copies(history)
            asked = cited_artifacts(list(stream.values()))
            try:
                reply = await ask_log(self.nc, run_id, sorted(asked),
                                      timeout=max(0.5, min(ASK_TIMEOUT_S, deadline - loop.time())))
                problem = ""
            except LogUnavailable as exc:
                reply, problem = None, str(exc)
            if reply is not None:
                recorded = reply.event_ids
                have = [stream[i] for i in recorded if i in stream]
                if (seen <= set(recorded) and len(have) == len(recorded)
                        and cited_artifacts(have) <= asked):
                    return reply, ""
            if loop.time() >= deadline:
                return reply, problem
            await asyncio.sleep(POLL_S)

    async def artifacts(self, wanted: set[str]) -> tuple[dict[str, bytes], set[str]]:
        """The wanted artifacts from the bus, and those it no longer carries."""
        async def one(sha: str) -> bytes | None:
            try:
                return await self.get_artifact(sha)
            except ArtifactNotFound:
                return None

        ordered = sorted(wanted)
        found = await asyncio.gather(*(one(sha) for sha in ordered))
        got = {sha: data for sha, data in zip(ordered, found, strict=True) if data is not None}
        return got, set(ordered) - set(got)


def copies(history: RunHistory) -> dict[str, Event]:
    """The run's events read from the stream so far, by id (the first copy of each), in
    stream order; an event that does not decode is missing here (the recorder dead-letters it)."""
    found: dict[str, Event] = {}
    for event in history.events:
        if event.run_id == history.run_id:
            found.setdefault(event.event_id, event)
    return found


def recording_findings(reply: LogVerified, stream: dict[str, Event], seen: list[str],
                       events: list[Event]) -> list[Finding]:
    """Where the stream's copy and the log disagree: unrecorded, unknown or altered events."""
    found: list[Finding] = []
    recorded = set(reply.event_ids)
    unrecorded = [i for i in seen if i not in recorded]
    if unrecorded:
        found.append(Finding("recorded", f"{len(unrecorded)} event(s) read from the bus are not "
                             f"in the log after {log_wait_s():g} s", unrecorded[0]))
    unknown = [i for i in reply.event_ids if i not in stream]
    if unknown:
        found.append(Finding("recorded", f"the log holds {len(unknown)} event(s) of this run "
                             "that the bus does not carry (undecodable, or no longer retained)",
                             unknown[0]))
    elif events_digest(encode_event(e) for e in events) != reply.events_sha256:
        found.append(Finding("recorded", "the log's bodies of this run's events differ from "
                             "the copies on the bus"))
    return found
