"""The end of a HITL session on hand-built events: what `verify` records is legal for the
auditor (verdicts cited, the node evaluated before the re-verification, the final audit
before RunFinished), and the session fails closed as Auto does.

The events are those the agents record (real verdict records, a real signed receipt, from
`tests/auditrun.py`); the session's own events come from `agents.hitlend`, folded through
`HitlState` exactly as `kernelgraph hitl next` folds them.
"""

from __future__ import annotations

import json

import pytest
from auditrun import BASELINE_S, TARGET, RunBuilder, audit, sha

from agents.hitl import HitlError, HitlState, next_command, session_node
from agents.hitlend import close_iterations, evaluate, finish_session
from eventstore.events import (
    BaselineMeasured,
    CompileChecked,
    ExpansionRequested,
    HumanFeedbackGiven,
    IterationFinished,
    KernelWritten,
    NodeEvaluated,
    PlanProposed,
    RunAudited,
    RunRequested,
    TestsRun,
    TestSuiteFrozen,
    TuningSwept,
    WinnerVerified,
)


def session(iterations: list[tuple[float, float | None] | None]) -> tuple[RunBuilder, str]:
    """A session up to `verify`: per iteration a wrong answer (None), or (tested, tuned)
    latencies (tuned None: the sweep had nothing else to time); each new plan closes the
    iterations before it, as `hitl next` does."""
    run = RunBuilder("hitl")
    run.task_sha256 = run.put(b"def reference(x): return x\n")
    run.suite_sha256 = sha(b"the frozen suite")
    recipe = {"task_sha256": run.task_sha256, "suite_sha256": run.suite_sha256, "n_cases": 4}
    requested = run.emit(RunRequested, run.root, task_name="copy", task_sha256=run.task_sha256,
                         policy="hitl", target=TARGET, provider="offline")
    node = session_node(requested)
    run.emit(ExpansionRequested, node, parent_id=run.root, policy="hitl")
    run.emit(TestSuiteFrozen, node, suite_sha256=run.suite_sha256, n_cases=4,
             recipe_sha256=run.put(json.dumps(recipe).encode()))
    run.emit(BaselineMeasured, node, latency_s=BASELINE_S, measured_on="simulated",
             target=TARGET)
    for it, latencies in enumerate(iterations, start=1):
        run.emit(PlanProposed, node, iteration=it, plan_sha256=run.put(f"plan {it}".encode()))
        run.events += close_iterations(HitlState.fold(run.events), it - 1)
        code = run.put(f"def build(block_rows=8): ...  # {it}".encode())
        run.emit(KernelWritten, node, iteration=it, code_sha256=code)
        run.emit(CompileChecked, node, iteration=it, code_sha256=code, ok=True)
        if latencies is None:
            run.emit(TestsRun, node, iteration=it, code_sha256=code,
                     suite_sha256=run.suite_sha256, passed=False, n_cases=4, n_failed=1,
                     reasons=["wrong"], verdict_sha256=run.verdict(1e-5, passed=False))
            continue
        tested, tuned = latencies
        run.emit(TestsRun, node, iteration=it, code_sha256=code, suite_sha256=run.suite_sha256,
                 passed=True, n_cases=4, latency_s=tested, speedup=BASELINE_S / tested,
                 measured_on="simulated", config={"block_rows": 8},
                 verdict_sha256=run.verdict(tested, config={"block_rows": 8}))
        if tuned is None:
            run.emit(TuningSwept, node, iteration=it, code_sha256=code, configs_tried=0)
            continue
        run.emit(TuningSwept, node, iteration=it, code_sha256=code, configs_tried=2,
                 best_config={"block_rows": 16}, best_latency_s=tuned,
                 best_speedup=BASELINE_S / tuned,
                 verdict_sha256=run.verdict(tuned, config={"block_rows": 16}))
    return run, node


def end(run: RunBuilder, *, audit_problem: str | None = None,
        verifies: bool = True) -> HitlState:
    """What `hitl next` records at `verify`, with the verifier's and auditor's answers."""
    state = HitlState.fold(run.events)
    run.events += evaluate(state)
    evaluated = state.evaluated
    assert evaluated is not None and evaluated.code_sha256 and evaluated.latency_s
    verified = None
    if verifies:
        receipt = run.receipt(evaluated.code_sha256, evaluated.latency_s, dict(evaluated.tunables))
        verified = run.emit(WinnerVerified, evaluated.node_id, verdict="pass",
                            receipt_sha256=receipt, speedup=evaluated.speedup)
    run.emit(RunAudited, evaluated.node_id, clean=audit_problem is None, final=True,
             findings=[] if audit_problem is None else [{"check": "x", "message": "y"}])
    run.events.append(finish_session(state, verified, None if verifies else "sandbox died",
                                     audit_problem))
    return HitlState.fold(run.events)


def test_a_session_ended_at_verify_audits_clean() -> None:
    # it1 wrong; it2 tuned beats tested; it3 tuning no better than the test run (its figure
    # stands); it4 nothing else to tune, the fastest
    run, _ = session([None, (8e-6, 6e-6), (5e-6, 5e-6), (4e-6, None)])
    state = end(run)
    report = audit(run)
    assert report.clean, report.findings
    finished = state.finished
    assert finished is not None and finished.status == "completed" and finished.best_node_id
    ends = {e.iteration: e for e in run.events if isinstance(e, IterationFinished)}
    assert [ends[i].valid for i in (1, 2, 3, 4)] == [False, True, True, True]
    assert ends[1].failed_phase == "test" and ends[1].compiled
    proofs = {e.event_id: e for e in run.events if isinstance(e, TestsRun | TuningSwept)}
    assert isinstance(proofs[ends[2].proof_event_id or ""], TuningSwept)
    assert isinstance(proofs[ends[3].proof_event_id or ""], TestsRun)
    assert isinstance(proofs[ends[4].proof_event_id or ""], TestsRun)
    assert ends[4].tunables == {"block_rows": 8}
    node = state.evaluated
    assert node is not None and node.best_iteration == 4 and node.verdict_sha256


def test_the_session_fails_closed_on_an_audit_with_findings() -> None:
    run, _ = session([(8e-6, 6e-6)])
    state = end(run, audit_problem="the audit found 1 problem(s): x: y")
    assert state.finished is not None and state.finished.status == "failed"
    assert state.finished.reason.startswith("the audit found 1 problem(s)")
    with pytest.raises(HitlError, match="has ended"):
        next_command(state)


def test_a_re_verification_that_cannot_run_fails_the_session() -> None:
    run, _ = session([(8e-6, 6e-6)])
    state = end(run, verifies=False)
    assert state.finished is not None and state.finished.status == "failed"
    assert "re-verification failed to run: sandbox died" in state.finished.reason
    assert audit(run).clean  # failing is legal; only completed needs the clean audit


def test_a_repeated_verify_records_the_node_once_and_then_only_verifies() -> None:
    run, _ = session([(8e-6, 6e-6), None])
    first = evaluate(HitlState.fold(run.events))
    again = evaluate(HitlState.fold(run.events))
    assert [e.event_id for e in first] == [e.event_id for e in again]  # the log keeps one
    run.events += first
    state = HitlState.fold(run.events)
    assert evaluate(state) == [] and state.next_phase == "verify"
    assert next_command(state)[0] == "verify"
    with pytest.raises(HitlError, match="only `verify` is left"):
        next_command(state, "plan")
    assert sum(isinstance(e, NodeEvaluated) for e in run.events) == 1


def test_an_edited_kernel_needs_new_tests_before_it_is_tuned() -> None:
    run, node = session([(8e-6, 6e-6)])
    run.events = [e for e in run.events if not isinstance(e, TuningSwept)]
    run.emit(HumanFeedbackGiven, node, phase_name="kernel", action="edit",
             artifact_sha256=run.put(b"def build(): ...  # edited"))
    state = HitlState.fold(run.events)
    with pytest.raises(HitlError, match="passing tests first"):
        next_command(state, "tune")
