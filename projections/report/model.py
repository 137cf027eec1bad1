"""What a report shows, folded from the log: runs, their graphs, kernels, winners.

Everything here comes from one pass over the log's events (the same folds `replay` uses:
`SearchGraph`, `BestOfN`, `Metrics`) plus the artifacts the events name (the winner's
source, its receipt). Nothing is computed twice: run speedups, rates and fast_p are the
`Metrics` projection's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eventstore.events import (
    Event,
    IterationFinished,
    LlmCalled,
    RunFinished,
    RunRequested,
    WinnerVerified,
)
from eventstore.log import EventLog
from kernelgraph.errors import KernelgraphError
from projections.metrics import Metrics, RunStats
from projections.replay import LogView
from projections.searchgraph import SearchGraph


class ReportError(KernelgraphError):
    """The log cannot be reported on as asked (no runs, an unknown run)."""


@dataclass(frozen=True, slots=True)
class KernelPoint:
    """One candidate kernel (an iteration) in the order the run produced it."""

    order: int
    node_id: str
    iteration: int
    depth: int
    valid: bool
    compiled: bool
    speedup: float | None
    failed_phase: str | None
    error: str


@dataclass(slots=True)
class Winner:
    node_id: str
    verdict: str
    speedup: float | None
    measured_on: str
    reasons: list[str]
    code_sha256: str | None
    code: str | None
    config: dict[str, Any]
    receipt_sha256: str
    receipt: dict[str, Any] | None
    receipt_text: str | None


@dataclass(slots=True)
class RunReport:
    run_id: str
    task: str
    policy: str
    target: str
    provider: str
    graph: SearchGraph
    stats: RunStats
    status: str = "open"
    reason: str = ""
    first_ts: float = 0.0
    last_ts: float = 0.0
    tokens: int = 0
    kernels: list[KernelPoint] = field(default_factory=list)
    winner: Winner | None = None
    weak_sandbox: bool = False  # its candidates ran without the full sandbox (opted in)

    @property
    def label(self) -> str | None:
        """simulated or real: where every speedup of this run comes from."""
        return self.stats.label

    @property
    def wall_s(self) -> float:
        return max(0.0, self.last_ts - self.first_ts)

    def node_failure(self, node_id: str) -> tuple[str, str] | None:
        """(phase, error) of the node's last failed kernel, when the node has no valid one."""
        for point in reversed(self.kernels):
            if point.node_id == node_id and not point.valid:
                return point.failed_phase or "unknown", point.error
        return None


@dataclass(slots=True)
class ReportData:
    db: Path
    runs: list[RunReport]
    metrics: Metrics


class _RunFacts:
    """What a report needs beyond the projections: the request, the end, the kernel order."""

    def __init__(self) -> None:
        self.request: RunRequested | None = None
        self.finished: RunFinished | None = None
        self.verified: WinnerVerified | None = None
        self.iterations: list[IterationFinished] = []
        self.first_ts = float("inf")
        self.last_ts = 0.0
        self.tokens = 0

    def apply(self, event: Event) -> None:
        self.first_ts = min(self.first_ts, event.ts)
        self.last_ts = max(self.last_ts, event.ts)
        if isinstance(event, RunRequested):
            self.request = self.request or event
        elif isinstance(event, IterationFinished):
            self.iterations.append(event)
        elif isinstance(event, RunFinished):
            self.finished = event
        elif isinstance(event, WinnerVerified):
            self.verified = event
        elif isinstance(event, LlmCalled):
            self.tokens += event.tokens_in + event.tokens_out


def load(log: EventLog, run_id: str | None = None) -> ReportData:
    """Fold the log (or one run of it) into what the report shows."""
    records = list(log.read(run_id=run_id))
    view = LogView(run_id).apply_records(records)
    facts: dict[str, _RunFacts] = {}
    for _, event in records:
        facts.setdefault(event.run_id, _RunFacts()).apply(event)
    runs = [_run_report(log, rid, view, f) for rid, f in facts.items() if f.request is not None]
    if not runs:
        where = f"run {run_id!r}" if run_id else "runs"
        raise ReportError(f"no {where} in {log.path}" + ("" if run_id else " (nothing to report)"))
    return ReportData(db=log.path, runs=runs, metrics=view.metrics)


def _run_report(log: EventLog, run_id: str, view: LogView, facts: _RunFacts) -> RunReport:
    request = facts.request
    assert request is not None
    graph = view.graphs.get(run_id) or SearchGraph(run_id)
    stats = view.metrics.state.runs.get(run_id) or RunStats(run_id=run_id)
    report = RunReport(
        run_id=run_id, task=request.task_name, policy=request.policy, target=request.target,
        provider=request.provider, graph=graph, stats=stats, first_ts=facts.first_ts,
        last_ts=facts.last_ts, tokens=facts.tokens,
    )
    if facts.finished is not None:
        report.status, report.reason = facts.finished.status, facts.finished.reason
    report.kernels = list(_kernel_points(graph, facts.iterations))
    if facts.verified is not None:
        report.winner = _winner(log, graph, facts.verified)
    environment = ((report.winner.receipt or {}).get("environment") or {}) if report.winner else {}
    report.weak_sandbox = request.weak_sandbox or bool(environment.get("weak_sandbox"))
    return report


def _kernel_points(graph: SearchGraph, iterations: Iterable[IterationFinished]) -> Iterable[KernelPoint]:
    """One point per kernel written (a plan that wrote none, `no_gain`, is no kernel)."""
    written = (e for e in iterations if not e.no_gain)
    for order, e in enumerate(written, start=1):
        node = graph.state.nodes.get(e.node_id or "")
        yield KernelPoint(
            order=order, node_id=e.node_id or "", iteration=e.iteration,
            depth=node.depth if node is not None else 1, valid=e.valid, compiled=e.compiled,
            speedup=e.speedup if e.valid else None, failed_phase=e.failed_phase, error=e.error,
        )


def _artifact_text(log: EventLog, sha256: str | None) -> str | None:
    """The artifact as text, or None when the log does not hold it (a synthetic log)."""
    if not sha256 or not log.has_artifact(sha256):
        return None
    return log.get_artifact(sha256).decode("utf-8", errors="replace")


def _winner(log: EventLog, graph: SearchGraph, e: WinnerVerified) -> Winner:
    node = graph.state.nodes.get(e.node_id or "")
    code_sha = node.code_sha256 if node is not None else None
    receipt_text = _artifact_text(log, e.receipt_sha256)
    receipt: dict[str, Any] | None = None
    if receipt_text is not None:
        try:
            parsed = json.loads(receipt_text)
        except json.JSONDecodeError:
            parsed = None
        receipt = parsed if isinstance(parsed, dict) else None
    if receipt is not None:
        code_sha = (receipt.get("candidate") or {}).get("sha256") or code_sha
    config = dict((receipt or {}).get("candidate", {}).get("config") or (node.tunables if node else {}))
    return Winner(
        node_id=e.node_id or "", verdict=e.verdict, speedup=e.speedup, measured_on=e.measured_on,
        reasons=list(e.reasons), code_sha256=code_sha, code=_artifact_text(log, code_sha),
        config=config, receipt_sha256=e.receipt_sha256, receipt=receipt, receipt_text=receipt_text,
    )
