"""The audit of one run: every claim recomputed from the run's events and the artifacts they cite.

The inputs, and nothing else: the run's events in log order, a function that returns an
artifact's bytes by sha256 (None when the log does not hold it), the log's hash-chain
verification, and a receipt checker (the problems of a receipt, none when its hash,
signature, verdict and speedup hold; the evaluator provides it, so this stays a pure fold
over the log). The checks themselves are a table of named functions in
`projections.auditchecks`; a run is clean when none of them finds anything.

```python
report = audit_run(events, fetch=log_artifact, chain=ChainStatus(ok=True),
                   receipt_problems=api.receipt_problems)
report.clean, report.findings      # [Finding(check, message, event_id), ...]
```

Every artifact a check may read is named by `cited_artifacts(events)`, so an auditor that
reads artifacts over a network fetches them first and hands over a dictionary lookup.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from eventstore.events import (
    BaselineMeasured,
    Event,
    ExpansionRequested,
    NodeEvaluated,
    RunFinished,
    RunRequested,
    TestSuiteFrozen,
)

Fetch = Callable[[str], bytes | None]
"""An artifact's bytes by sha256, or None when the log does not hold it."""
class ReceiptChecker(Protocol):
    """Why a receipt does not hold (empty: it does); given the bytes of the candidate file
    (and of the task file), also whether they are the files it signed."""

    def __call__(self, receipt: Mapping[str, Any], *, candidate: bytes | None = None,
                 task: bytes | None = None) -> Sequence[str]: ...

REL_TOL = 1e-9
"""Figures travel as JSON floats (exact round trips); this only absorbs a recomputed ratio."""


class Finding(msgspec.Struct, frozen=True):
    """One failed check: which, why, and the event it is about (None: the run or the log)."""

    check: str
    message: str
    event_id: str | None = None


class ChainStatus(msgspec.Struct, frozen=True):
    """The log's hash-chain verification, as the audit needs it."""

    ok: bool
    rows_checked: int = 0
    reason: str = ""


class AuditReport(msgspec.Struct, frozen=True):
    run_id: str
    clean: bool
    chain_ok: bool
    events_checked: int
    findings: list[Finding]

    def findings_json(self) -> list[dict[str, Any]]:
        return [msgspec.structs.asdict(f) for f in self.findings]


def same(a: float | None, b: float | None) -> bool:
    """Equal figures: both absent, or equal within float noise."""
    if a is None or b is None:
        return a is None and b is None
    try:
        return math.isclose(float(a), float(b), rel_tol=REL_TOL)
    except (TypeError, ValueError):
        return False


def get(value: Any, *path: str) -> Any:
    """`value[path[0]][path[1]]...`, None where a step is missing or not a dict."""
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


UNREADABLE = object()
"""What `Audit.artifact_json` returns for an artifact that is present but not JSON."""


@dataclass
class Audit:
    """One run's events indexed once, with cached artifact reads: what every check receives."""

    events: list[Event]
    fetch: Fetch
    chain: ChainStatus
    receipt_problems: ReceiptChecker
    final: bool = False
    position: dict[str, int] = field(default_factory=dict)
    requested: RunRequested | None = None
    suites: list[TestSuiteFrozen] = field(default_factory=list)
    baseline: BaselineMeasured | None = None
    expansions: dict[str, ExpansionRequested] = field(default_factory=dict)
    evaluated: dict[str, NodeEvaluated] = field(default_factory=dict)
    finished: RunFinished | None = None
    _json: dict[str, Any] = field(default_factory=dict)
    _present: dict[str, bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for index, event in enumerate(self.events):
            self.position.setdefault(event.event_id, index)
            node = event.node_id or ""
            if isinstance(event, RunRequested) and self.requested is None:
                self.requested = event
            elif isinstance(event, TestSuiteFrozen):
                self.suites.append(event)
            elif isinstance(event, BaselineMeasured) and self.baseline is None:
                self.baseline = event
            elif isinstance(event, ExpansionRequested):
                self.expansions.setdefault(node, event)
            elif isinstance(event, NodeEvaluated):
                self.evaluated.setdefault(node, event)
            elif isinstance(event, RunFinished) and self.finished is None:
                self.finished = event

    @property
    def root_id(self) -> str | None:
        return self.requested.node_id if self.requested else None

    @property
    def suite_sha256(self) -> str | None:
        return self.suites[0].suite_sha256 if self.suites else None

    def of(self, *types: type[Event]) -> Iterator[Any]:
        return (e for e in self.events if isinstance(e, types))

    def index(self, event: Event) -> int:
        return self.position[event.event_id]

    def has(self, sha256: str) -> bool:
        if sha256 not in self._present:
            self._present[sha256] = self.fetch(sha256) is not None
        return self._present[sha256]

    def artifact_json(self, sha256: str) -> Any:
        """The artifact decoded as JSON; None when absent, `UNREADABLE` when not JSON."""
        if sha256 not in self._json:
            data = self.fetch(sha256)
            value: Any = None
            if data is not None:
                try:
                    value = json.loads(data)
                except (UnicodeDecodeError, ValueError):
                    value = UNREADABLE
            self._json[sha256] = value
        return self._json[sha256]

    def verdict(self, sha256: str | None) -> dict[str, Any] | None:
        """A readable verdict record, or None (the `verdicts` check says why)."""
        value = self.artifact_json(sha256) if sha256 else None
        return value if isinstance(value, dict) and "verdict" in value else None

    def receipt(self, sha256: str | None) -> dict[str, Any] | None:
        """A readable receipt, or None (the `winner` check says why)."""
        value = self.artifact_json(sha256) if sha256 else None
        return value if isinstance(value, dict) and "checks" in value else None


CheckFn = Callable[[Audit], Iterator[Finding]]


def default_checks() -> Mapping[str, CheckFn]:
    """The table of every check (`projections.auditchecks.CHECKS`)."""
    from projections.auditchecks import CHECKS

    return CHECKS


def audit_run(
    events: Sequence[Event],
    *,
    fetch: Fetch,
    chain: ChainStatus,
    receipt_problems: ReceiptChecker,
    final: bool = False,
    checks: Mapping[str, CheckFn] | None = None,
) -> AuditReport:
    """Run every check (or those given) over one run's events, in log order.

    `final`: the audit that gates `RunFinished`; the search is over, so what the policy
    decided must all have been requested.
    """
    run_ids = {e.run_id for e in events}
    if len(run_ids) > 1:
        raise ValueError(f"audit_run takes one run's events, got runs {sorted(run_ids)}")
    audit = Audit(list(events), fetch, chain, receipt_problems, final)
    findings = [Finding(name, f.message, f.event_id)
                for name, fn in (checks or default_checks()).items() for f in fn(audit)]
    return AuditReport(run_id=next(iter(run_ids), ""), clean=not findings, chain_ok=chain.ok,
                       events_checked=len(events), findings=findings)


def cited_artifacts(events: Sequence[Event]) -> set[str]:
    """Every artifact a check may read: fetch these before an audit."""
    cited: set[str] = set()
    for event in events:
        if isinstance(event, RunRequested | TestSuiteFrozen) and event.task_sha256:
            cited.add(event.task_sha256)  # the task file a receipt is bound to
        for name in ("verdict_sha256", "receipt_sha256", "recipe_sha256"):
            value = getattr(event, name, None)
            if isinstance(value, str) and value:
                cited.add(value)
        if isinstance(event, NodeEvaluated) and event.code_sha256:
            cited.add(event.code_sha256)
    return cited


__all__ = [
    "UNREADABLE",
    "Audit",
    "AuditReport",
    "ChainStatus",
    "CheckFn",
    "Fetch",
    "Finding",
    "ReceiptChecker",
    "audit_run",
    "cited_artifacts",
    "default_checks",
    "get",
    "same",
]
