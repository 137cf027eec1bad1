"""The verifier's answer: pass or fail, every reason, and the evidence behind them.

Kept apart from the pipeline (:mod:`tools.verification.verify`) so that readers of a
verdict (the CLI, the facade, agents) need not import the pipeline's machinery.
"""

from __future__ import annotations

from typing import Any

import msgspec

from tools.correctness.compare import CaseCheck
from tools.lowered.audit import AuditReport
from tools.sandbox import wire


class Verdict(msgspec.Struct):
    verdict: str  # "pass" | "fail"
    reasons: list[str]
    task: str
    candidate: str
    config: dict[str, Any]
    target: str
    suite_sha256: str
    cases: list[CaseCheck]
    audit: AuditReport | None
    compile_report: Any  # tools.lowered.compile_check.CompileReport | None
    measurement: Any  # tools.performance.executors.Measurement | None
    diagnostics: list[wire.Diagnostic]
    timings: dict[str, float]
    receipt: dict[str, Any]

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    @property
    def speedup(self) -> float | None:
        return None if self.measurement is None else float(self.measurement.speedup)

    @property
    def measured_on(self) -> str | None:
        return None if self.measurement is None else str(self.measurement.measured_on)

    @property
    def receipt_sha256(self) -> str:
        return str(self.receipt["sha256"])

    @property
    def weak_sandbox(self) -> bool:
        """Whether the candidate ran without the full sandbox (the user opted in)."""
        return bool(self.receipt.get("environment", {}).get("weak_sandbox", False))

    def summary(self) -> dict[str, Any]:
        """The JSON object `kernelgraph verify --json` prints."""
        return {
            "verdict": self.verdict,
            "reasons": self.reasons,
            "speedup": self.speedup,
            "measured_on": self.measured_on,
            "receipt_sha256": self.receipt_sha256,
            "task": self.task,
            "candidate": self.candidate,
            "config": self.config,
            "target": self.target,
            "suite_sha256": self.suite_sha256,
            "cases": [{"id": c.case_id, "kind": c.kind, "passed": c.passed,
                       "max_abs": [o.max_abs for o in c.outputs],
                       "floor_max_abs": [o.floor_max_abs for o in c.outputs],
                       "problems": [*c.problems, *(p for o in c.outputs for p in o.problems)],
                       "error": c.error} for c in self.cases],
            "diagnostics": [msgspec.to_builtins(d) for d in self.diagnostics],
            # who judged the compile: "emulated compile check" or the TPU compiler
            "compile_check": getattr(self.compile_report, "checker", None),
            "timings": self.timings,
            "weak_sandbox": self.weak_sandbox,
        }


__all__ = ["Verdict"]
