"""The end of a HITL session, held to the rules the auditor holds an Auto run to.

1. An iteration ends with an `IterationFinished` when the next plan arrives, or when the
   session does (`close_iterations`). A valid one is its fastest tuned kernel, and its
   speedup cites the verdict behind it and the test run or tuning sweep that reported it.
2. `verify` first ends the node (`evaluate`: the open iterations, then `NodeEvaluated` on
   the fastest valid iteration, best-of-N), then re-verifies that kernel (`WinnerVerified`),
   asks for the final audit (`audit_command`, `AuditRun(final=True)`) and records
   `RunFinished` (`finish_session`), which says completed only after a clean audit.

The events built here have ids derived from the session and what they are, so a step
repeated after a crash records each of them once (the log ignores an id it holds).
"""

from __future__ import annotations

import time
from typing import Any, TypeVar

from agents.commands import AuditRun
from agents.hitl import Attempt, HitlState, derived, session_origin
from agents.steps import step_command
from eventstore.events import (
    Event,
    IterationFinished,
    NodeEvaluated,
    RunFinished,
    WinnerVerified,
)

PRODUCER = "hitl@1"
E = TypeVar("E", bound=Event)


def iteration_end(state: HitlState, iteration: int) -> dict[str, Any]:
    """The `IterationFinished` fields of an iteration: its fastest valid kernel with the
    verdict and event behind the figure, else what it got to and its last failure."""
    attempt = state.attempts.get(iteration, Attempt())
    kernels = [v for v in state.valid if v.iteration == iteration]
    if kernels:
        timed = [v for v in kernels if v.latency_s is not None]
        best = min(timed, key=lambda v: v.latency_s or 0.0) if timed else kernels[-1]
        return {"valid": True, "compiled": True, "code_sha256": best.code_sha256,
                "plan_sha256": best.plan_sha256, "latency_s": best.latency_s,
                "speedup": best.speedup, "measured_on": best.measured_on,
                "tunables": dict(best.config), "verdict_sha256": best.verdict_sha256,
                "proof_event_id": best.proof_event_id}
    real = state.request is not None and not state.request.target.startswith("sim-")
    return {"valid": False, "compiled": attempt.compiled, "code_sha256": attempt.code_sha256,
            "plan_sha256": attempt.plan_sha256, "measured_on": "real" if real else "simulated",
            "failed_phase": attempt.failed_phase,
            "error": attempt.error or "the session moved on before a tested, tuned kernel"}


def _event(state: HitlState, cls: type[E], key: str, **payload: Any) -> E:
    """An event of the session's own, its id derived from the session and `key`."""
    assert state.request is not None
    payload.setdefault("node_id", state.node_id)
    return cls(event_id=derived(state, key), run_id=state.run_id, ts=time.time(),
               producer=PRODUCER, causation_id=state.request.event_id, **payload)


def close_iterations(state: HitlState, through: int) -> list[IterationFinished]:
    """`IterationFinished` for each iteration up to `through` that has none yet, folded
    into `state`."""
    closing = [_event(state, IterationFinished, f"iteration/{it}", iteration=it,
                      **iteration_end(state, it))
               for it in sorted(state.attempts) if it <= through and it not in state.closed]
    for event in closing:
        state.apply(event)
    return closing


def evaluate(state: HitlState) -> list[Event]:
    """What ends the node before its winner is re-verified, folded into `state`: the open
    iterations' `IterationFinished`, then `NodeEvaluated` (nothing once it is recorded)."""
    if state.evaluated is not None:
        return []
    assert state.request is not None
    closing: list[Event] = [*close_iterations(state, state.iteration)]
    finished = [state.closed[it] for it in sorted(state.closed)]
    valid = [f for f in finished if f.valid and f.latency_s is not None]
    common: dict[str, Any] = {"iterations": len(finished),
                              "compiled": any(f.compiled for f in finished),
                              "strategy": str(state.request.policy_params.get("hint", "")),
                              "parent_id": state.request.node_id}
    if not valid:
        node = _event(state, NodeEvaluated, "evaluated", valid=False, **common)
    else:
        best = min(valid, key=lambda f: (f.latency_s, f.iteration))
        node = _event(state, NodeEvaluated, "evaluated", valid=True,
                      best_iteration=best.iteration, code_sha256=best.code_sha256,
                      plan_sha256=best.plan_sha256, latency_s=best.latency_s,
                      speedup=best.speedup, measured_on=best.measured_on,
                      tunables=dict(best.tunables), verdict_sha256=best.verdict_sha256, **common)
    state.apply(node)
    return [*closing, node]


def audit_command(state: HitlState) -> AuditRun:
    """The final audit's command; one per session, so a repeated `verify` asks once."""
    assert state.request is not None
    return step_command(session_origin(state), AuditRun, derived(state, "audit/final"),
                        node_id=state.node_id,
                        task_sha256=state.task_sha256 or state.request.task_sha256, final=True)


def finish_session(state: HitlState, verified: WinnerVerified | None, failure: str | None,
                   audit: str | None) -> RunFinished:
    """The session's `RunFinished`, as Auto ends a run: completed only after a clean final
    audit (`audit` None, else what it found); failed when it is not clean or when the
    re-verification could not run (`failure`); a kernel that fails re-verification
    completes without a winner."""
    assert state.request is not None
    node = state.evaluated
    ending: dict[str, Any]
    if verified is None:
        ending = {"status": "failed",
                  "reason": f"re-verification failed to run: {failure or 'no answer'}"[:2000]}
    else:
        ending = {"status": "completed", "receipt_sha256": verified.receipt_sha256}
        if verified.verdict == "pass" and node is not None:
            ending.update(best_node_id=node.node_id, speedup=verified.speedup,
                          measured_on=verified.measured_on)
        else:
            ending["reason"] = "the kernel failed re-verification: " + "; ".join(
                verified.reasons[:3])
    if audit:
        ending.update(status="failed", reason=(audit + (
            f" (before the audit: {ending['reason']})" if ending.get("reason") else ""))[:2000])
    return _event(state, RunFinished, "finished", node_id=state.request.node_id, **ending)
