"""Agents that answer the search orchestrator's commands at once, with made-up results.

They replace the suite, baseline, trajectory, verifier and auditor agents when what is
measured or tested is the orchestration itself (the bus, the policy, the bookkeeping):
`benchmarks/search.py` times the orchestrator with them and the orchestrator's tests use
them to run every policy in seconds. A trajectory's speedup is drawn from its node id;
`FAIL_HINT` in a node's strategy makes its agent give up on it.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import ClassVar

from agents.commands import AuditRun, ExpandNode, FreezeSuite, MeasureBaseline, VerifyWinner
from bus.service import PermanentError, Service
from eventstore.events import (
    BaselineMeasured,
    Event,
    IterationFinished,
    NodeEvaluated,
    RunAudited,
    TestSuiteFrozen,
    WinnerVerified,
)

FAKE_SHA = "0" * 64
FAIL_HINT = "instant:fail"

class _Instant(Service):
    """Answers its commands at once with the events the search waits for."""

    version: ClassVar[str] = "instant"


class InstantSuite(_Instant):
    agent: ClassVar[str] = "test_synth"
    commands: ClassVar[tuple[type, ...]] = (FreezeSuite,)

    async def handle(self, cmd: FreezeSuite) -> AsyncIterator[Event]:  # type: ignore[override]
        yield self.event(TestSuiteFrozen, cmd, suite_sha256=FAKE_SHA, n_cases=1,
                         recipe_sha256=FAKE_SHA)


class InstantBaseline(_Instant):
    agent: ClassVar[str] = "baseline"
    commands: ClassVar[tuple[type, ...]] = (MeasureBaseline,)

    async def handle(self, cmd: MeasureBaseline) -> AsyncIterator[Event]:  # type: ignore[override]
        yield self.event(BaselineMeasured, cmd, latency_s=1e-3, measured_on="simulated",
                         target=cmd.target_name)


class InstantTrajectory(_Instant):
    agent: ClassVar[str] = "auto"
    commands: ClassVar[tuple[type, ...]] = (ExpandNode,)

    async def handle(self, cmd: ExpandNode) -> AsyncIterator[Event]:  # type: ignore[override]
        if FAIL_HINT in cmd.hint:
            raise PermanentError("this node was told to fail")
        speedup = 1.0 + random.Random(cmd.node_id).random()
        for it in range(1, cmd.iterations + 1):
            yield self.event(IterationFinished, cmd, iteration=it, valid=True, compiled=True,
                             code_sha256=FAKE_SHA, latency_s=1e-3 / speedup, speedup=speedup)
        yield self.event(NodeEvaluated, cmd, valid=True, compiled=True, best_iteration=1,
                         iterations=cmd.iterations, code_sha256=FAKE_SHA, latency_s=1e-3 / speedup,
                         speedup=speedup, parent_id=cmd.parent_id, strategy=cmd.hint)


class InstantVerifier(_Instant):
    agent: ClassVar[str] = "verifier"
    commands: ClassVar[tuple[type, ...]] = (VerifyWinner,)

    async def handle(self, cmd: VerifyWinner) -> AsyncIterator[Event]:  # type: ignore[override]
        yield self.event(WinnerVerified, cmd, verdict="pass", receipt_sha256=FAKE_SHA, speedup=1.5)


class InstantAuditor(_Instant):
    agent: ClassVar[str] = "auditor"
    commands: ClassVar[tuple[type, ...]] = (AuditRun,)

    async def handle(self, cmd: AuditRun) -> AsyncIterator[Event]:  # type: ignore[override]
        yield self.event(RunAudited, cmd, clean=True, final=cmd.final)


INSTANT_AGENTS: tuple[type[Service], ...] = (
    InstantSuite, InstantBaseline, InstantTrajectory, InstantVerifier, InstantAuditor)
