"""`agents.judged` on events built by hand: which earlier judgment a kernel cites, and when a
priced kernel is refused (only on simulated targets, only against a parent kernel)."""

from __future__ import annotations

from typing import Any

from agents.judged import (
    citation_fields,
    earlier_compile,
    earlier_judgment,
    ended,
    judging_beside,
    parent_speedup,
    price_problem,
)
from eventstore.events import (
    CompileChecked,
    Event,
    IterationFinished,
    NodeEvaluated,
    RunFinished,
    new_event_id,
)


def emit(cls: type[Event], node: str = "n1", run: str = "r", **payload: Any) -> Any:
    return cls(event_id=new_event_id(), run_id=run, ts=1.0, producer="t@1", node_id=node,
               **payload)


def test_a_kernel_cites_the_first_iteration_that_judged_it_itself() -> None:
    wrong = emit(IterationFinished, iteration=1, valid=False, compiled=True, code_sha256="A",
                 failed_phase="test", error="wrong")
    gave_up = emit(IterationFinished, iteration=2, valid=False, compiled=True, code_sha256="B",
                   failed_phase="autotune", error="the autotuner gave up")
    good = emit(IterationFinished, iteration=3, valid=True, compiled=True, code_sha256="B",
                speedup=1.5, latency_s=1.0, proof_event_id="p")
    cited = emit(IterationFinished, "n2", iteration=1, **citation_fields(good))
    other_run = emit(IterationFinished, run="other", iteration=1, valid=True, compiled=True,
                     code_sha256="C", speedup=2.0)
    events = [wrong, gave_up, good, cited, other_run]
    assert earlier_judgment(events, "r", "A", node_id="n3", iteration=1) is wrong
    # an agent that gave up judged nothing; a citation is never cited
    assert earlier_judgment(events, "r", "B", node_id="n3", iteration=1) is good
    assert earlier_judgment(events, "r", "B", node_id="n1", iteration=3) is None
    assert earlier_judgment(events, "r", "C", node_id="n3", iteration=1) is None
    assert cited.cites_event_id == good.event_id and cited.speedup == 1.5
    assert cited.proof_event_id == "p" and cited.valid
    check = emit(CompileChecked, iteration=1, code_sha256="A", ok=False)
    assert earlier_compile([check], "r", "A") is check and earlier_compile([check], "r", "B") is None


def test_a_priced_kernel_is_refused_only_when_it_cannot_beat_its_parent() -> None:
    checked = emit(CompileChecked, code_sha256="A", ok=True, estimate_s=1e-5, estimate_speedup=1.2)
    assert price_problem(checked, 1.2, 0.0, "sim-tpu-v6e")  # equal is not faster
    assert price_problem(checked, 1.1, 0.1, "sim-tpu-v6e")  # 1.2 <= 1.1 * 1.1
    assert price_problem(checked, 1.1, 0.0, "sim-tpu-v6e") is None
    assert price_problem(checked, 2.0, 0.0, "tpu") is None  # real targets test first
    assert price_problem(checked, None, 0.0, "sim-tpu-v6e") is None  # the root: nothing to beat
    unpriced = emit(CompileChecked, code_sha256="A", ok=True)
    assert price_problem(unpriced, 2.0, 0.0, "sim-tpu-v6e") is None
    assert parent_speedup({"speedup": 1.5}) == 1.5 and parent_speedup(None) is None
    assert parent_speedup({"speedup": None}) is None


def test_a_kernel_a_sibling_is_judging_is_waited_for_until_that_iteration_ends() -> None:
    first = emit(CompileChecked, "n1", iteration=1, code_sha256="A", ok=True)
    failed = emit(CompileChecked, "n3", iteration=1, code_sha256="B", ok=False)
    events: list[Event] = [failed, first]
    # n2 wrote A too and read n1's check back: n1 is judging it
    assert judging_beside(events, "r", "A", node_id="n2", iteration=1) == ("n1", 1)
    # the iteration that compiled it first never waits; a failed check is nobody's judgment
    assert judging_beside(events, "r", "A", node_id="n1", iteration=1) is None
    assert judging_beside(events, "r", "B", node_id="n2", iteration=1) is None
    assert judging_beside(events, "other", "A", node_id="n2", iteration=1) is None
    assert not ended(events, "r", ("n1", 1))
    # another iteration of n1 ending does not end this one; its own end, its node's or the run's does
    assert not ended([*events, emit(IterationFinished, "n1", iteration=2, valid=False,
                                    compiled=False)], "r", ("n1", 1))
    assert not ended([*events, emit(NodeEvaluated, "n1", run="other", valid=True,
                                    compiled=True)], "r", ("n1", 1))
    for end in (emit(IterationFinished, "n1", iteration=1, valid=True, compiled=True,
                     code_sha256="A", speedup=1.2),
                emit(NodeEvaluated, "n1", valid=False, compiled=True),
                emit(RunFinished, None, status="completed")):
        assert ended([*events, end], "r", ("n1", 1))
        assert judging_beside([*events, end], "r", "A", node_id="n2", iteration=1) is None
