"""The audit's checks: a table of named functions, each yielding the findings of one rule.

To add a rule, write a function of an `Audit` (see `projections.audit`) that yields
`Finding`s and decorate it with `@check("name")`; `audit_run` runs every entry of `CHECKS`
in order. A check reports a missing or unreadable artifact only where it is the one that
reads it first, so one broken artifact is not reported once per check.

- `chain`: the log's hash chain verifies.
- `suite`: exactly one frozen suite, whose recipe artifact names the same suite hash.
- `judged_on_suite`: every test run, measured configuration and tuning sweep (their
  verdicts) and every re-verification (its receipt) was judged on that suite.
- `verdicts`: every cited verdict is in the log and holds together (its speedup is its
  baseline over its latency; a simulated baseline is the run's), and says what the event
  citing it says (pass, speedup, origin).
- `claims`: every claimed speedup of an iteration or a node cites a passing verdict with
  that speedup and origin; an iteration's proof event reported that verdict; a node's
  figures are those of its best iteration, the one of lowest latency (best-of-N).
- `winner`: each re-verification's receipt is in the log, checks (hash, signature, verdict,
  speedup) bound to the files (the sha256 of the node's code and of the run's task, as the
  log holds them, are the ones it signed), says what the event says, and is for the
  evaluated node's code, the run's task and target.
- `finish`: one `RunFinished`, after a clean final audit when it says completed; its best
  node is a valid evaluated node, the best one, with the verified speedup and receipt;
  nothing but audits follows it.
- `origin`: every figure, the baseline's too, carries its target's label (`sim-*`:
  simulated, else real); simulated and real never mix.
- `citations` (`projections.auditcitations`): an iteration that judged nothing itself cites
  an earlier judgment of the same code that says what it says, or a compile check whose
  estimate did not beat the node's parent by the run's margin.
- `nodes`: a node is evaluated once, only when requested; a valid one has code (in the
  log), latency and speedup; nothing happens to it afterwards but the winner's
  verification and audits; no trajectory event for a node not yet requested.
- `expansions`: each expansion is of a new node, under the root or a node evaluated valid
  before it; in a policy search each was announced by the policy's decision, and after the
  final audit every announced one was requested (an Auto run or a HITL session has no
  policy: its orchestrator requests its one node itself).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from eventstore.events import (
    AgentFailed,
    BaselineMeasured,
    ConfigMeasured,
    Event,
    ExpansionRequested,
    IterationFinished,
    NodeEvaluated,
    PolicyDecided,
    RunAudited,
    RunFinished,
    TestsRun,
    TuningSwept,
    WinnerVerified,
)
from projections.audit import UNREADABLE, Audit, CheckFn, Finding, get, same
from projections.searchgraph import SearchGraph

CHECKS: dict[str, CheckFn] = {}

NODE_PHASE_EVENTS = frozenset({
    "PlanProposed", "KernelWritten", "CompileChecked", "FixAttempted", "TestsRun",
    "TuningSwept", "ConfigMeasured", "ProfileCaptured", "IterationFinished"})
"""What happens inside a node's trajectory: only after the node was requested."""
AFTER_EVALUATION = frozenset({"WinnerVerified", "RunAudited", "KnowledgeUnavailable"})
"""What may still concern a node once it is evaluated: the winner's re-check, audits, and
lessons (recorded after the evaluation) that the knowledge store could not keep."""
LATE_COMMANDS = frozenset({"VerifyWinner", "AuditRun"})
"""Commands whose failure (AgentFailed) may follow a node's evaluation."""
NO_POLICY = frozenset({"auto", "hitl"})
"""`RunRequested.policy` of runs no search policy decides (an Auto trajectory, a HITL
session, where the user decides): no `PolicyDecided` announces their expansions."""


def check(name: str) -> Callable[[CheckFn], CheckFn]:
    """Register a check in `CHECKS` under `name` (the `check` of its findings)."""

    def register(fn: CheckFn) -> CheckFn:
        if name in CHECKS:
            raise ValueError(f"audit check {name!r} is registered twice")
        CHECKS[name] = fn
        return fn

    return register


def _find(name: str, event: Event | None, message: str) -> Finding:
    return Finding(name, message, event.event_id if event is not None else None)


def _figures(name: str, event: Event, speedup: float | None, measured_on: str | None,
             theirs: float | None, origin: Any, what: str) -> Iterator[Finding]:
    """The event's speedup and origin are those of the artifact it cites."""
    if not same(speedup, theirs):
        yield _find(name, event, f"{event.type_name} claims speedup {speedup} but its {what} "
                    f"says {theirs}")
    if speedup is not None and measured_on != origin:
        yield _find(name, event, f"{event.type_name} labels its figure {measured_on} but its "
                    f"{what} is {origin}")


# --- the log and the suite --------------------------------------------------------------


@check("chain")
def _chain(a: Audit) -> Iterator[Finding]:
    if not a.chain.ok:
        yield Finding("chain", a.chain.reason or "the log's hash chain does not verify")


def _judgments(a: Audit) -> Iterator[Any]:
    """Events that judged a kernel on the suite (a refused test run judged nothing)."""
    for event in a.of(TestsRun, ConfigMeasured, TuningSwept, WinnerVerified):
        if not isinstance(event, TestsRun) or event.passed or event.verdict_sha256:
            yield event


@check("suite")
def _suite(a: Audit) -> Iterator[Finding]:
    if not a.suites:
        first = next(_judgments(a), None)
        if first is not None:
            yield _find("suite", first, f"{first.type_name} judged a kernel but the run froze "
                        "no test suite")
        return
    frozen = a.suites[0]
    for extra in a.suites[1:]:
        yield _find("suite", extra, f"a second frozen suite ({extra.suite_sha256[:12]}) after "
                    f"{frozen.suite_sha256[:12]}: a run has exactly one")
    if frozen.recipe_sha256:
        recipe = a.artifact_json(frozen.recipe_sha256)
        if recipe is None:
            yield _find("suite", frozen, f"the suite's recipe {frozen.recipe_sha256[:12]} is "
                        "not in the log")
        elif get(recipe, "suite_sha256") != frozen.suite_sha256:
            yield _find("suite", frozen, "the suite's recipe names suite "
                        f"{str(get(recipe, 'suite_sha256'))[:12]}, not the frozen "
                        f"{frozen.suite_sha256[:12]}")


@check("judged_on_suite")
def _judged_on_suite(a: Audit) -> Iterator[Finding]:
    suite = a.suite_sha256
    if suite is None:
        return
    for event in _judgments(a):
        said: list[tuple[str, Any]] = []
        if isinstance(event, TestsRun):
            said.append(("the event", event.suite_sha256))
        if isinstance(event, WinnerVerified):
            said.append(("its receipt", get(a.receipt(event.receipt_sha256), "suite", "sha256")))
        else:
            said.append(("its verdict", get(a.verdict(event.verdict_sha256), "suite_sha256")))
        for where, value in said:
            if value is not None and value != suite:
                yield _find("judged_on_suite", event, f"{event.type_name}: {where} names suite "
                            f"{str(value)[:12]}, not the frozen {suite[:12]}")


# --- verdicts and the figures drawn from them ---------------------------------------------


def _verdict_problem(record: dict[str, Any], baseline: BaselineMeasured | None) -> str | None:
    """Why a verdict record does not hold together, or None."""
    if record.get("verdict") not in ("pass", "fail"):
        return f"says {record.get('verdict')!r}, neither 'pass' nor 'fail'"
    m = record.get("measurement")
    if not isinstance(m, dict):
        return "passes without a measurement" if record["verdict"] == "pass" else None
    try:
        latency, base, speedup = float(m["latency_s"]), float(m["baseline_s"]), float(m["speedup"])
    except (KeyError, TypeError, ValueError):
        return "has a measurement that cannot be read (latency_s, baseline_s, speedup)"
    if latency <= 0 or not same(speedup, base / latency):
        return f"claims speedup {speedup:g}, but baseline {base:g} s / latency {latency:g} s differs"
    if not same(record.get("speedup"), speedup) or record.get("measured_on") != m.get("measured_on"):
        return "has a summary that disagrees with its measurement (speedup or origin)"
    if (baseline is not None and baseline.measured_on == "simulated"
            and m.get("measured_on") == "simulated" and not same(base, baseline.latency_s)):
        return f"prices against baseline {base:g} s, not the run's {baseline.latency_s:g} s"
    return None


@check("verdicts")
def _verdicts(a: Audit) -> Iterator[Finding]:
    for event in a.events:
        sha = getattr(event, "verdict_sha256", None)
        if not sha:
            continue
        value = a.artifact_json(sha)
        problem = ("is not in the log" if value is None else
                   "is not a verdict record" if value is UNREADABLE or a.verdict(sha) is None
                   else _verdict_problem(value, a.baseline))
        if problem:
            yield _find("verdicts", event, f"{event.type_name}: the verdict {sha[:12]} {problem}")
    for event in a.of(TestsRun, ConfigMeasured):
        if event.passed and not event.verdict_sha256:
            yield _find("verdicts", event, f"{event.type_name} passed without citing a verdict")
        record = a.verdict(event.verdict_sha256)
        if record is None:
            continue
        if event.passed != (record["verdict"] == "pass"):
            yield _find("verdicts", event, f"{event.type_name} says passed={event.passed} but "
                        f"its verdict says {record['verdict']!r}")
        yield from _figures("verdicts", event, event.speedup, event.measured_on,
                            record.get("speedup"), record.get("measured_on"), "verdict")
    for swept in a.of(TuningSwept):
        record = a.verdict(swept.verdict_sha256)
        if record is not None:
            yield from _figures("verdicts", swept, swept.best_speedup, swept.measured_on,
                                record.get("speedup"), record.get("measured_on"), "verdict")
        elif swept.best_speedup is not None and not swept.verdict_sha256:
            yield _find("verdicts", swept, "TuningSwept claims a best speedup without citing "
                        "a verdict")


def _cites_a_pass(a: Audit, event: Any) -> Iterator[Finding]:
    if not event.verdict_sha256:
        yield _find("claims", event, f"{event.type_name} claims speedup {event.speedup} "
                    "without citing a verdict")
        return
    record = a.verdict(event.verdict_sha256)
    if record is None:
        return  # `verdicts` says why
    if record["verdict"] != "pass":
        yield _find("claims", event, f"{event.type_name} claims a valid kernel on a failing "
                    f"verdict ({event.verdict_sha256[:12]})")
    yield from _figures("claims", event, event.speedup, event.measured_on,
                        record.get("speedup"), record.get("measured_on"), "verdict")


@check("claims")
def _claims(a: Audit) -> Iterator[Finding]:
    iterations: dict[str, list[IterationFinished]] = {}
    for it in a.of(IterationFinished):
        iterations.setdefault(it.node_id or "", []).append(it)
        if not it.valid or it.speedup is None:
            continue
        yield from _cites_a_pass(a, it)
        proof = a.events[a.position[it.proof_event_id]] if it.proof_event_id in a.position else None
        cited = a.events[a.position[it.cites_event_id]] if it.cites_event_id in a.position else None
        owner = cited if isinstance(cited, IterationFinished) else it  # `citations` checks it
        if it.proof_event_id is None:
            yield _find("claims", it, "IterationFinished names no proof event for its speedup")
        elif (not isinstance(proof, TestsRun | TuningSwept) or proof.node_id != owner.node_id
              or a.index(proof) > a.index(owner) or proof.verdict_sha256 != it.verdict_sha256):
            yield _find("claims", it, f"IterationFinished's proof {it.proof_event_id} is not an "
                        "earlier test run or tuning sweep of the node that reported its verdict")
    for node in a.of(NodeEvaluated):
        if node.valid:
            yield from _cites_a_pass(a, node)
            yield from _best_of_n(node, iterations.get(node.node_id or "", []))


def _best_of_n(node: NodeEvaluated, iterations: list[IterationFinished]) -> Iterator[Finding]:
    best = next((i for i in iterations if i.iteration == node.best_iteration and i.valid), None)
    if best is None:
        yield _find("claims", node, f"NodeEvaluated names iteration {node.best_iteration} as its "
                    "best, but the node has no such valid iteration")
        return
    mine = (node.code_sha256, node.verdict_sha256, node.measured_on, dict(node.tunables))
    theirs = (best.code_sha256, best.verdict_sha256, best.measured_on, dict(best.tunables))
    if mine != theirs or not same(node.speedup, best.speedup) or not same(node.latency_s,
                                                                         best.latency_s):
        yield _find("claims", node, f"NodeEvaluated's figures are not those of its best "
                    f"iteration {best.iteration} (code, verdict, latency, speedup or config)")
    timed = [i for i in iterations if i.valid and i.latency_s is not None]
    fastest = min(timed, key=lambda i: (i.latency_s, i.iteration), default=None)
    if (fastest is not None and best.latency_s is not None and fastest is not best
            and fastest.latency_s < best.latency_s and not same(fastest.latency_s, best.latency_s)):
        yield _find("claims", node, f"best-of-N: iteration {fastest.iteration} "
                    f"({fastest.latency_s:g} s) is faster than the chosen {best.iteration} "
                    f"({best.latency_s:g} s)")


# --- the end of the run -----------------------------------------------------------------


@check("winner")
def _winner(a: Audit) -> Iterator[Finding]:
    for w in a.of(WinnerVerified):
        value = a.artifact_json(w.receipt_sha256)
        receipt = a.receipt(w.receipt_sha256)
        if receipt is None:
            yield _find("winner", w, f"the receipt {w.receipt_sha256[:12]} " + (
                "is not in the log" if value is None else "is not a receipt"))
            continue
        node = a.evaluated.get(w.node_id or "")
        code = a.fetch(node.code_sha256) if node is not None and node.code_sha256 else None
        task_sha = (a.suites[0].task_sha256 if a.suites else None) or (
            a.requested.task_sha256 if a.requested else None)
        task = a.fetch(task_sha) if task_sha else None
        if task_sha and task is None:
            yield _find("winner", w, f"the run's task file {task_sha[:12]} is not in the log: "
                        "the receipt cannot be checked against it")
        # bound to the files: the code the node names and the task, as the log holds them
        for problem in list(a.receipt_problems(receipt, candidate=code, task=task))[:3]:
            yield _find("winner", w, f"the receipt does not check: {problem}")
        if receipt.get("verdict") != w.verdict:
            yield _find("winner", w, f"WinnerVerified says {w.verdict!r} but its receipt says "
                        f"{receipt.get('verdict')!r}")
        yield from _figures("winner", w, w.speedup, w.measured_on,
                            get(receipt, "measurement", "speedup"),
                            get(receipt, "measurement", "measured_on"), "receipt")
        if node is None or a.index(node) > a.index(w) or not node.valid:
            yield _find("winner", w, f"WinnerVerified re-checks node {w.node_id}, which was not "
                        "evaluated valid before it")
        else:
            config = get(receipt, "candidate", "config") or {}
            if get(receipt, "candidate", "sha256") != node.code_sha256 or any(
                    config.get(k) != v for k, v in node.tunables.items()):
                yield _find("winner", w, "the receipt is for other code or another "
                            f"configuration than node {w.node_id}'s")
        tasks = {a.requested.task_sha256 if a.requested else None,
                 a.suites[0].task_sha256 if a.suites else None} - {None}
        if tasks and get(receipt, "task", "sha256") not in tasks:
            yield _find("winner", w, "the receipt is for another task than the run's")
        if a.requested is not None and receipt.get("target") != a.requested.target:
            yield _find("winner", w, f"the receipt's target {receipt.get('target')!r} is not "
                        f"the run's {a.requested.target!r}")


def _late(event: Event) -> bool:
    """Allowed after RunFinished, or after a node's evaluation: audits, and the failure of
    a late command (re-verification, audit)."""
    if isinstance(event, AgentFailed):
        return event.command_type in LATE_COMMANDS
    return isinstance(event, RunAudited)


@check("finish")
def _finish(a: Audit) -> Iterator[Finding]:
    f = a.finished
    if f is None:
        return
    for extra in list(a.of(RunFinished))[1:]:
        yield _find("finish", extra, "a second RunFinished")
    end = a.index(f)
    for late in a.events[end + 1:]:
        if not isinstance(late, RunFinished) and not _late(late):
            yield _find("finish", late, f"{late.type_name} after RunFinished")
    if f.status == "completed" and not any(
            r.final and r.clean and a.index(r) < end for r in a.of(RunAudited)):
        yield _find("finish", f, "RunFinished says completed without a clean final audit "
                    "before it")
    if f.best_node_id is None:
        if f.speedup is not None:
            yield _find("finish", f, f"RunFinished claims speedup {f.speedup} but names no node")
        if f.receipt_sha256 and not any(w.receipt_sha256 == f.receipt_sha256
                                        for w in a.of(WinnerVerified)):
            yield _find("finish", f, "RunFinished cites a receipt no re-verification produced")
        return
    node = a.evaluated.get(f.best_node_id)
    if node is None or a.index(node) > end or not node.valid:
        yield _find("finish", f, f"the best node {f.best_node_id} is not a valid evaluated node")
        return
    winner = next((w for w in reversed(list(a.of(WinnerVerified)))
                   if w.node_id == f.best_node_id and a.index(w) < end), None)
    if winner is None or winner.verdict != "pass":
        yield _find("finish", f, f"the best node {f.best_node_id} did not pass re-verification")
    else:
        yield from _figures("finish", f, f.speedup, f.measured_on, winner.speedup,
                            winner.measured_on, "re-verification")
        if f.receipt_sha256 != winner.receipt_sha256:
            yield _find("finish", f, "RunFinished cites another receipt than the winner's "
                        "re-verification")
    graph = SearchGraph(f.run_id).apply_all(a.events[:end])
    best = graph.best
    if best is not None and best.speedup is not None and node.speedup is not None and (
            best.speedup > node.speedup and not same(best.speedup, node.speedup)):
        yield _find("finish", f, f"node {best.node_id} ({best.speedup:.3g}x) beats the named "
                    f"best node {f.best_node_id} ({node.speedup:.3g}x)")


def _figure(event: Event) -> tuple[float | None, str | None]:
    """(speedup, measured_on) of an event that claims a figure."""
    if isinstance(event, TuningSwept):
        return event.best_speedup, event.measured_on
    if isinstance(event, IterationFinished | NodeEvaluated) and not event.valid:
        return None, None
    if isinstance(event, TestsRun | ConfigMeasured | IterationFinished | NodeEvaluated
                  | WinnerVerified | RunFinished):
        return event.speedup, event.measured_on
    return None, None


@check("origin")
def _origin(a: Audit) -> Iterator[Finding]:
    base = a.baseline
    target = a.requested.target if a.requested else base.target if base else None
    if target is None:
        return
    expected = "simulated" if target.startswith("sim-") else "real"
    if base is not None and base.measured_on != expected:
        yield _find("origin", base, f"the baseline on {target} is labelled {base.measured_on}")
    for event in a.events:
        speedup, measured_on = _figure(event)
        if speedup is not None and measured_on != expected:
            yield _find("origin", event, f"{event.type_name}'s figure is labelled {measured_on} "
                        f"in a run on {target}, whose figures are {expected}: the two never mix")


# --- nodes and expansions ---------------------------------------------------------------


@check("nodes")
def _nodes(a: Audit) -> Iterator[Finding]:
    done: set[str] = set()
    early: set[str] = set()
    for event in a.events:
        node = event.node_id or ""
        requested = a.expansions.get(node)
        before = requested is not None and a.index(requested) < a.index(event)
        if isinstance(event, NodeEvaluated):
            if not before:
                yield _find("nodes", event, f"NodeEvaluated for node {node}, never requested")
            if node in done:
                yield _find("nodes", event, f"node {node} is evaluated a second time")
            done.add(node)
            if event.valid:
                missing = [n for n in ("code_sha256", "latency_s", "speedup")
                           if getattr(event, n) is None]
                if missing:
                    yield _find("nodes", event, f"a valid node without {', '.join(missing)}")
                elif not a.has(event.code_sha256 or ""):
                    yield _find("nodes", event, f"the node's code {event.code_sha256!s:.12} is "
                                "not in the log")
            if requested is not None and event.parent_id not in (None, requested.parent_id):
                yield _find("nodes", event, f"NodeEvaluated names parent {event.parent_id}, the "
                            f"request {requested.parent_id}")
            continue
        if node in done and event.type_name not in AFTER_EVALUATION and not _late(event):
            yield _find("nodes", event, f"{event.type_name} for node {node} after its "
                        "NodeEvaluated")
        if event.type_name in NODE_PHASE_EVENTS and not before and node not in early:
            early.add(node)
            yield _find("nodes", event, f"{event.type_name} for node {node}, which was not "
                        "requested before it")


@check("expansions")
def _expansions(a: Audit) -> Iterator[Finding]:
    if a.requested is None:
        yield (_find("expansions", a.events[0], "the run has no RunRequested (no root node)")
               if a.events else
               _find("expansions", None, "no event of this run was found: nothing vouches for it"))
        return
    root = a.root_id
    policy_search = a.requested.policy not in NO_POLICY
    announced: dict[str, tuple[PolicyDecided, dict[str, Any]]] = {}
    seen: set[str] = set()
    for event in a.events:
        if isinstance(event, PolicyDecided):
            for spec in event.expansions:
                announced.setdefault(str(spec.get("node_id")), (event, spec))
        if not isinstance(event, ExpansionRequested):
            continue
        node = event.node_id or ""
        if not node or node == root or node in seen:
            yield _find("expansions", event, f"an expansion of node {node or '(none)'}, which "
                        "is the root or already requested")
            continue
        seen.add(node)
        parent = a.evaluated.get(event.parent_id)
        if event.parent_id != root and (parent is None or not parent.valid
                                        or a.index(parent) > a.index(event)):
            yield _find("expansions", event, f"node {node} expands {event.parent_id}, neither "
                        "the root nor a node evaluated valid before")
        if policy_search:
            decided, spec = announced.get(node, (None, {}))
            if decided is None or decided.decision != event.decision or \
                    spec.get("parent_id") != event.parent_id:
                yield _find("expansions", event, f"node {node} under {event.parent_id} was not "
                            f"announced by the policy's decision {event.decision}")
    if a.final and policy_search:
        for node, (decided, _) in announced.items():
            if node not in seen:
                yield _find("expansions", decided, f"decision {decided.decision} announced "
                            f"node {node}, never requested")


from projections import auditcitations  # noqa: E402, F401 (registers `citations`)

__all__ = ["AFTER_EVALUATION", "CHECKS", "LATE_COMMANDS", "NODE_PHASE_EVENTS", "NO_POLICY", "check"]
