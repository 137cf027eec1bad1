"""The audit's checks on hand-built runs: each check passes a clean run and catches its lie.

The runs (`tests/auditrun.py`) carry real verdict records and a real signed receipt; each
tampered case edits, drops or adds one thing, as someone rewriting a log would, and must
be found by the named check, about the right event.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import msgspec
import pytest
from auditrun import (
    RunBuilder,
    audit,
    clean_run,
    first,
    replace,
    sha,
)

from eventstore.events import (
    BaselineMeasured,
    ConfigMeasured,
    Event,
    ExpansionRequested,
    IterationFinished,
    NodeEvaluated,
    PlanProposed,
    PolicyDecided,
    RunAudited,
    RunFinished,
    SearchStopped,
    TestsRun,
    TestSuiteFrozen,
    WinnerVerified,
    new_event_id,
)
from projections.audit import ChainStatus, audit_run, cited_artifacts
from projections.auditchecks import CHECKS
from tools import api


def insert_before(run: RunBuilder, anchor: type[Event], event: Event) -> Event:
    run.events.insert(run.events.index(first(run, anchor)), event)
    return event


def copy_of(event: Event, **changes: object) -> Event:
    return msgspec.structs.replace(event, event_id=new_event_id(), **changes)


def reverdict(run: RunBuilder, event: Event, **record_changes: object) -> Event:
    """Point `event` at a copy of its verdict record with some fields changed."""
    record = json.loads(run.artifacts[event.verdict_sha256])  # type: ignore[attr-defined]
    record.update(record_changes)
    return replace(run, event, verdict_sha256=run.put(json.dumps(record).encode()))


@pytest.mark.parametrize("policy", ["beam", "auto", "hitl"])
def test_a_clean_run_passes_every_check(policy: str) -> None:
    report = audit(clean_run(policy))
    assert report.clean and report.findings == [] and report.chain_ok
    assert report.events_checked > 20


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_each_check_alone_passes_the_clean_run(name: str) -> None:
    run = clean_run()
    report = audit_run(run.events, fetch=run.artifacts.get, chain=ChainStatus(ok=True),
                       receipt_problems=api.receipt_problems, final=True,
                       checks={name: CHECKS[name]})
    assert report.clean, report.findings


# --- one lie per case: (check expected to find it, the tampering, returning the event) -------

Tamper = Callable[[RunBuilder], Event | None]


def second_suite(run: RunBuilder) -> Event:
    return insert_before(run, BaselineMeasured,
                         copy_of(first(run, TestSuiteFrozen), suite_sha256=sha(b"another")))


def recipe_of_another_suite(run: RunBuilder) -> Event:
    frozen = first(run, TestSuiteFrozen)
    recipe = json.loads(run.artifacts[frozen.recipe_sha256]) | {"suite_sha256": sha(b"x")}
    return replace(run, frozen, recipe_sha256=run.put(json.dumps(recipe).encode()))


def no_suite(run: RunBuilder) -> Event:
    run.events.remove(first(run, TestSuiteFrozen))
    return first(run, TestsRun)


def suite_of_a_test_run_changed(run: RunBuilder) -> Event:
    return replace(run, first(run, TestsRun, "n1"), suite_sha256=sha(b"another"))


def config_verdict_on_another_suite(run: RunBuilder) -> Event:
    return reverdict(run, first(run, ConfigMeasured, "n3"), suite_sha256=sha(b"another"))


def failed_test_said_passed(run: RunBuilder) -> Event:
    return replace(run, first(run, TestsRun, "n2"), passed=True)


def verdict_dropped(run: RunBuilder) -> Event:
    event = first(run, TestsRun, "n1")
    del run.artifacts[event.verdict_sha256]
    return event


def verdict_with_a_forged_speedup(run: RunBuilder) -> Event:
    event = first(run, TestsRun, "n1")
    measurement = json.loads(run.artifacts[event.verdict_sha256])["measurement"]
    event = reverdict(run, event, speedup=3.0, measurement=measurement | {"speedup": 3.0})
    return replace(run, event, speedup=3.0)


def iteration_speedup_edited(run: RunBuilder) -> Event:
    return replace(run, [e for e in run.events if isinstance(e, IterationFinished)][-1],
                   speedup=2.5)


def node_cites_no_verdict(run: RunBuilder) -> Event:
    return replace(run, first(run, NodeEvaluated, "n3"), verdict_sha256=None)


def node_rolls_back_to_the_slower_iteration(run: RunBuilder) -> Event:
    slower = first(run, IterationFinished, "n3")
    return replace(run, first(run, NodeEvaluated, "n3"), best_iteration=slower.iteration,
                   code_sha256=slower.code_sha256, latency_s=slower.latency_s,
                   speedup=slower.speedup, verdict_sha256=slower.verdict_sha256,
                   plan_sha256=slower.plan_sha256)


def proof_is_another_event(run: RunBuilder) -> Event:
    return replace(run, first(run, IterationFinished, "n1"),
                   proof_event_id=first(run, TestsRun, "n1").event_id)


def receipt_dropped(run: RunBuilder) -> Event:
    verified = first(run, WinnerVerified)
    del run.artifacts[verified.receipt_sha256]
    return verified


def receipt_edited(run: RunBuilder) -> Event:
    verified = first(run, WinnerVerified)
    receipt = json.loads(run.artifacts[verified.receipt_sha256])
    receipt["measurement"]["latency_s"] /= 2
    receipt["measurement"]["speedup"] *= 2
    edited = run.put(api.receipt_json(receipt).encode())
    replace(run, first(run, RunFinished), receipt_sha256=edited,
            speedup=receipt["measurement"]["speedup"])
    return replace(run, verified, receipt_sha256=edited, speedup=receipt["measurement"]["speedup"])


def receipt_for_other_code(run: RunBuilder) -> Event:
    n1, n3 = first(run, NodeEvaluated, "n1"), first(run, NodeEvaluated, "n3")
    other = run.receipt(n1.code_sha256, n3.latency_s, dict(n3.tunables))
    replace(run, first(run, RunFinished), receipt_sha256=other)
    return replace(run, first(run, WinnerVerified), receipt_sha256=other)


def winner_code_is_not_what_was_signed(run: RunBuilder) -> Event:
    """The log's copy of the winner's code is other bytes than the receipt signed (the event
    and the receipt still name the same sha256)."""
    run.artifacts[first(run, NodeEvaluated, "n3").code_sha256] = b"def build(): ...  # other\n"
    return first(run, WinnerVerified)


def task_is_not_what_was_signed(run: RunBuilder) -> Event:
    run.artifacts[run.task_sha256] = b"def reference(x): return -x\n"
    return first(run, WinnerVerified)


def finished_speedup_edited(run: RunBuilder) -> Event:
    return replace(run, first(run, RunFinished), speedup=3.0)


def event_after_the_end(run: RunBuilder) -> Event:
    late = copy_of(first(run, SearchStopped))
    run.events.append(late)
    return late


def finished_without_an_audit(run: RunBuilder) -> Event:
    run.events.remove(first(run, RunAudited))
    return first(run, RunFinished)


def finished_after_an_unclean_audit(run: RunBuilder) -> Event:
    replace(run, first(run, RunAudited), clean=False)
    return first(run, RunFinished)


def finished_on_the_slower_node(run: RunBuilder) -> Event:
    del run.events[run.events.index(first(run, WinnerVerified)):]
    run.finish(first(run, NodeEvaluated, "n1"))
    return first(run, RunFinished)


def finished_on_an_invalid_node(run: RunBuilder) -> Event:
    return replace(run, first(run, RunFinished), best_node_id="n2")


def finished_speedup_without_a_node(run: RunBuilder) -> Event:
    return replace(run, first(run, RunFinished), best_node_id=None)


def simulated_figure_labelled_real(run: RunBuilder) -> Event:
    return replace(run, first(run, NodeEvaluated, "n1"), measured_on="real")


def baseline_labelled_real(run: RunBuilder) -> Event:
    return replace(run, first(run, BaselineMeasured), measured_on="real")


def node_never_requested(run: RunBuilder) -> Event:
    return insert_before(run, SearchStopped, copy_of(first(run, NodeEvaluated, "n2"), node_id="n9"))


def node_evaluated_twice(run: RunBuilder) -> Event:
    return insert_before(run, SearchStopped, copy_of(first(run, NodeEvaluated, "n2")))


def work_after_evaluation(run: RunBuilder) -> Event:
    return insert_before(run, SearchStopped, copy_of(first(run, PlanProposed, "n2")))


def valid_node_without_speedup(run: RunBuilder) -> Event:
    return replace(run, first(run, NodeEvaluated, "n1"), speedup=None)


def node_code_dropped(run: RunBuilder) -> Event:
    node = first(run, NodeEvaluated, "n3")
    del run.artifacts[node.code_sha256]
    return node


def work_for_an_unrequested_node(run: RunBuilder) -> Event:
    return insert_before(run, SearchStopped, copy_of(first(run, PlanProposed, "n2"), node_id="n7"))


def expanding_an_invalid_node(run: RunBuilder) -> Event:
    decided = [e for e in run.events if isinstance(e, PolicyDecided)][1]
    replace(run, decided, expansions=[{**decided.expansions[0], "parent_id": "n2"}])
    replace(run, first(run, NodeEvaluated, "n3"), parent_id="n2")
    return replace(run, first(run, ExpansionRequested, "n3"), parent_id="n2")


def expansion_not_announced(run: RunBuilder) -> Event:
    return replace(run, first(run, ExpansionRequested, "n3"), decision=0)


def node_requested_twice(run: RunBuilder) -> Event:
    return insert_before(run, SearchStopped, copy_of(first(run, ExpansionRequested, "n1")))


def announced_but_never_requested(run: RunBuilder) -> Event:
    decided = [e for e in run.events if isinstance(e, PolicyDecided)][2]
    return replace(run, decided, expansions=[{"node_id": "n8", "parent_id": "n3", "strategy": "",
                                              "iterations": 1}])


def iteration_cites_another_kernel(run: RunBuilder) -> Event:
    n3 = [e for e in run.events if isinstance(e, IterationFinished) and e.node_id == "n3"]
    return replace(run, n3[1], cites_event_id=first(run, IterationFinished, "n1").event_id)


CASES: list[tuple[str, Tamper]] = [
    ("suite", second_suite), ("suite", recipe_of_another_suite), ("suite", no_suite),
    ("judged_on_suite", suite_of_a_test_run_changed),
    ("judged_on_suite", config_verdict_on_another_suite),
    ("verdicts", failed_test_said_passed), ("verdicts", verdict_dropped),
    ("verdicts", verdict_with_a_forged_speedup),
    ("claims", iteration_speedup_edited), ("claims", node_cites_no_verdict),
    ("claims", node_rolls_back_to_the_slower_iteration), ("claims", proof_is_another_event),
    ("winner", receipt_dropped), ("winner", receipt_edited), ("winner", receipt_for_other_code),
    ("winner", winner_code_is_not_what_was_signed), ("winner", task_is_not_what_was_signed),
    ("finish", finished_speedup_edited), ("finish", event_after_the_end),
    ("finish", finished_without_an_audit), ("finish", finished_after_an_unclean_audit),
    ("finish", finished_on_the_slower_node), ("finish", finished_on_an_invalid_node),
    ("finish", finished_speedup_without_a_node),
    ("origin", simulated_figure_labelled_real), ("origin", baseline_labelled_real),
    ("nodes", node_never_requested), ("nodes", node_evaluated_twice),
    ("nodes", work_after_evaluation), ("nodes", valid_node_without_speedup),
    ("nodes", node_code_dropped), ("nodes", work_for_an_unrequested_node),
    ("expansions", expanding_an_invalid_node), ("expansions", expansion_not_announced),
    ("expansions", node_requested_twice), ("expansions", announced_but_never_requested),
    ("citations", iteration_cites_another_kernel),
]


@pytest.mark.parametrize(("name", "tamper"), CASES, ids=[t.__name__ for _, t in CASES])
def test_each_lie_is_found_by_its_check_about_its_event(name: str, tamper: Tamper) -> None:
    run = clean_run()
    event = tamper(run)
    report = audit(run)
    assert not report.clean
    hits = [f for f in report.findings if f.check == name]
    assert hits, f"{name} found nothing; all findings: {report.findings}"
    assert event is None or event.event_id in {f.event_id for f in hits}, hits


def test_every_check_has_a_lie_it_catches() -> None:
    assert {name for name, _ in CASES} | {"chain"} == set(CHECKS)


def test_the_winner_check_binds_the_receipt_to_the_logged_files() -> None:
    run = clean_run()
    winner_code_is_not_what_was_signed(run)
    (finding,) = [f for f in audit(run).findings if f.check == "winner"]
    assert "the receipt does not check: the candidate file's sha256" in finding.message
    assert "another kernel" in finding.message

    run = clean_run()
    del run.artifacts[run.task_sha256]
    messages = [f.message for f in audit(run).findings if f.check == "winner"]
    assert any("task file" in m and "is not in the log" in m for m in messages), messages


def test_a_broken_chain_is_a_finding_about_the_log() -> None:
    report = audit(clean_run(), chain=ChainStatus(ok=False, rows_checked=3,
                                                  reason="row seq=4 does not match the hash chain"))
    assert not report.clean and not report.chain_ok
    assert [(f.check, f.message, f.event_id) for f in report.findings] == [
        ("chain", "row seq=4 does not match the hash chain", None)]


def test_a_run_with_no_event_in_the_log_is_not_clean() -> None:
    report = audit_run([], fetch=lambda sha256: None, chain=ChainStatus(ok=True),
                       receipt_problems=api.receipt_problems, final=True)
    assert not report.clean and report.events_checked == 0
    assert [f.check for f in report.findings] == ["expansions"]


def test_decisions_not_yet_carried_out_are_only_a_finding_of_the_final_audit() -> None:
    run = clean_run()
    announced_but_never_requested(run)
    del run.events[run.events.index(first(run, SearchStopped)):]
    assert audit(run, final=False).clean
    assert [f.check for f in audit(run, final=True).findings] == ["expansions"]


def test_a_run_in_progress_is_clean_before_its_end() -> None:
    run = clean_run()
    del run.events[run.events.index(first(run, PolicyDecided, "root")) + 12:]
    assert audit(run, final=False).clean


@pytest.mark.parametrize("tamper", [None, receipt_dropped, verdict_dropped, receipt_edited,
                                    node_rolls_back_to_the_slower_iteration])
def test_the_checks_read_only_the_artifacts_cited_artifacts_names(tamper: Tamper | None) -> None:
    run = clean_run()
    if tamper is not None:
        tamper(run)
    read: list[str] = []

    def fetch(sha256: str) -> bytes | None:
        read.append(sha256)
        return run.artifacts.get(sha256)

    audit_run(run.events, fetch=fetch, chain=ChainStatus(ok=True),
              receipt_problems=api.receipt_problems, final=True)
    assert read and set(read) <= cited_artifacts(run.events)


def test_events_of_two_runs_are_refused() -> None:
    a, b = clean_run(), clean_run()
    with pytest.raises(ValueError, match="one run"):
        audit_run([*a.events, *b.events], fetch=a.artifacts.get, chain=ChainStatus(ok=True),
                  receipt_problems=api.receipt_problems)
