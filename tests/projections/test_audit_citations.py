"""The audit's `citations` check on hand-built runs (`tests/auditrun.py`): an iteration that
cites an earlier judgment, or a compile check's price, is clean when the citation holds and
a finding when it lies.

The citing iteration is built by the orchestrator's own `agents.judged.citation_fields`, so
what the auditor accepts is what the Auto trajectory writes.
"""

from __future__ import annotations

from typing import Any

from auditrun import BASELINE_S, RunBuilder, audit, clean_run, first, replace

from agents.judged import citation_fields
from eventstore.events import (
    CompileChecked,
    ExpansionRequested,
    IterationFinished,
    KernelWritten,
    NodeEvaluated,
    PlanProposed,
    PolicyDecided,
    RunAudited,
    RunFinished,
    SearchStopped,
    WinnerVerified,
)


def cited_run(estimate: float = 0.5) -> RunBuilder:
    """clean_run's search, but n3 first writes n1's kernel again (citing its judgment), then
    a kernel priced at `estimate`x, not tested (n1, its parent, is 1.25x)."""
    run = clean_run()
    cut = run.events.index(next(e for e in run.events if isinstance(e, PolicyDecided)
                                and e.decision == 1))
    del run.events[cut:]
    run.decide(1, [("n3", "n1")])
    judged = first(run, IterationFinished, "n1")
    plan = run.put(b"plan n3 1")
    run.emit(PlanProposed, "n3", iteration=1, plan_sha256=plan)
    run.emit(KernelWritten, "n3", iteration=1, code_sha256=judged.code_sha256)
    cited = run.emit(IterationFinished, "n3", iteration=1, plan_sha256=plan,
                     **citation_fields(judged))
    slow = run.put(b"def build(block_rows=8): ...  # slow")
    plan2 = run.put(b"plan n3 2")
    run.emit(PlanProposed, "n3", iteration=2, plan_sha256=plan2)
    run.emit(KernelWritten, "n3", iteration=2, code_sha256=slow)
    checked = run.emit(CompileChecked, "n3", iteration=2, code_sha256=slow, ok=True,
                       estimate_s=BASELINE_S / estimate, estimate_speedup=estimate)
    run.emit(IterationFinished, "n3", iteration=2, valid=False, compiled=True, code_sha256=slow,
             plan_sha256=plan2, failed_phase="price", error="not faster",
             cites_event_id=checked.event_id, estimate_speedup=estimate)
    fields: dict[str, Any] = {k: getattr(cited, k) for k in (
        "code_sha256", "plan_sha256", "latency_s", "speedup", "verdict_sha256")}
    n3 = run.emit(NodeEvaluated, "n3", valid=True, compiled=True, best_iteration=1, iterations=2,
                  tunables=dict(cited.tunables), parent_id="n1", **fields)
    run.decide(2, [], stop="budget spent")
    run.emit(SearchStopped, run.root, policy=run.policy, reason="budget spent")
    run.finish(n3)
    return run


def findings(run: RunBuilder, check: str | None = None) -> list[tuple[str, str]]:
    return [(f.check, f.message) for f in audit(run).findings
            if check is None or f.check == check]


def test_a_run_whose_iterations_cite_earlier_judgments_is_clean() -> None:
    run = cited_run()
    assert findings(run) == []
    assert [e.type_name for e in run.events[-3:]] == [
        WinnerVerified.__struct_config__.tag, RunAudited.__struct_config__.tag,
        RunFinished.__struct_config__.tag]
    assert any(isinstance(e, ExpansionRequested) and e.node_id == "n3" for e in run.events)


def test_a_citation_that_claims_another_speedup_is_found() -> None:
    run = cited_run()
    citing = first(run, IterationFinished, "n3")
    replace(run, citing, speedup=citing.speedup * 2, latency_s=citing.latency_s / 2)
    assert any("does not say what the judgment it cites" in m for _, m in findings(run, "citations"))


def test_a_citation_of_another_kernel_is_found() -> None:
    run = cited_run()
    citing = first(run, IterationFinished, "n3")
    other = first(run, IterationFinished, "n2")  # a wrong answer, other code
    replace(run, citing, cites_event_id=other.event_id)
    assert any("judgment of other code" in m for _, m in findings(run, "citations"))


def test_a_citation_of_a_later_or_missing_event_is_found() -> None:
    run = cited_run()
    replace(run, first(run, IterationFinished, "n3"), cites_event_id="no-such-event")
    assert any("no earlier iteration" in m for _, m in findings(run, "citations"))


def test_a_kernel_refused_for_its_price_that_beats_its_parent_is_found() -> None:
    run = cited_run(estimate=3.0)  # n1 is 1.25x: 3x beats it
    assert any("beats its parent" in m for _, m in findings(run, "citations"))


def test_a_price_refusal_must_repeat_the_estimate_it_cites() -> None:
    run = cited_run()
    refused = next(e for e in run.events if isinstance(e, IterationFinished)
                   and e.failed_phase == "price")
    replace(run, refused, estimate_speedup=0.1)
    assert any("does not repeat the estimate" in m for _, m in findings(run, "citations"))
