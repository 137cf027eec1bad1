"""The final audit every run ends with (Auto, search, HITL): how long to wait for it and
what its answer means. A run is marked completed only when the audit is clean."""

from __future__ import annotations

import os

from eventstore.events import RunAudited

AUDIT_TIMEOUT_ENV = "KG_AUDIT_TIMEOUT_S"
"""How long a run waits for its final audit (default 300 s); no answer fails the run."""


def audit_timeout_s() -> float:
    return float(os.environ.get(AUDIT_TIMEOUT_ENV, "300"))


def audit_problem(audited: RunAudited) -> str | None:
    """None for a clean audit, else what it found, in one line."""
    if audited.clean:
        return None
    first = audited.findings[0] if audited.findings else {}
    return (f"the audit found {len(audited.findings)} problem(s): "
            f"{first.get('check', '?')}: {first.get('message', '')}")
