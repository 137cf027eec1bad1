"""The audit's `citations` check: an iteration that judged nothing itself says why, truly.

Within a run nothing is judged twice (`agents.judged`): an iteration that wrote a kernel the
run already judged cites the earlier `IterationFinished` and repeats it, and on a simulated
target a kernel priced no faster than its node's parent is not tested and cites the compile
check that priced it. Each citation must name an earlier event of the run that says so:

- a repeated judgment cites an `IterationFinished` of the same code that judged it itself
  (not a citation) and whose outcome and figures (validity, failed phase, latency, speedup,
  origin, configuration, verdict, proof) it repeats;
- a price refusal (`failed_phase` "price") cites a passing `CompileChecked` of the same
  code whose estimate it repeats, on a simulated target, and that estimate does not beat the
  speedup of the node's parent (its `NodeEvaluated`) by the run's `price_margin`.
"""

from __future__ import annotations

from collections.abc import Iterator

from eventstore.events import PRICE_PHASE, CompileChecked, IterationFinished
from projections.audit import Audit, Finding, same
from projections.auditchecks import _find, check


def _figures(it: IterationFinished) -> tuple[object, ...]:
    return (it.valid, it.code_sha256, it.measured_on, dict(it.tunables), it.verdict_sha256,
            it.proof_event_id, it.failed_phase)


@check("citations")
def _citations(a: Audit) -> Iterator[Finding]:
    for it in a.of(IterationFinished):
        if it.failed_phase == PRICE_PHASE or it.cites_event_id is None:
            if it.failed_phase == PRICE_PHASE:
                yield from _price(a, it)
            continue
        cited = a.events[a.position[it.cites_event_id]] if it.cites_event_id in a.position else None
        if (not isinstance(cited, IterationFinished) or a.index(cited) > a.index(it)
                or cited.cites_event_id is not None):
            yield _find("citations", it, f"IterationFinished cites {it.cites_event_id}, which is "
                        "no earlier iteration of this run that judged a kernel itself")
            continue
        if cited.code_sha256 != it.code_sha256:
            yield _find("citations", it, "IterationFinished cites the judgment of other code "
                        f"({str(cited.code_sha256)[:12]}, not {str(it.code_sha256)[:12]})")
        elif _figures(cited) != _figures(it) or not same(cited.speedup, it.speedup) or \
                not same(cited.latency_s, it.latency_s):
            yield _find("citations", it, f"IterationFinished does not say what the judgment it "
                        f"cites ({cited.event_id}) says (outcome, figures, verdict or proof)")


def _price(a: Audit, it: IterationFinished) -> Iterator[Finding]:
    checked = a.events[a.position[it.cites_event_id]] if it.cites_event_id in a.position else None
    if (not isinstance(checked, CompileChecked) or a.index(checked) > a.index(it)
            or not checked.ok or checked.code_sha256 != it.code_sha256):
        yield _find("citations", it, "an iteration refused for its price cites no earlier "
                    "passing compile check of its code")
        return
    if it.valid or checked.estimate_speedup is None or not same(
            checked.estimate_speedup, it.estimate_speedup):
        yield _find("citations", it, "an iteration refused for its price does not repeat the "
                    "estimate of the compile check it cites")
        return
    target = a.requested.target if a.requested else ""
    if not target.startswith("sim-"):
        yield _find("citations", it, f"a kernel was refused for its price on {target!r}: only "
                    "simulated targets price before testing")
        return
    requested = a.expansions.get(it.node_id or "")
    parent = a.evaluated.get(requested.parent_id) if requested else None
    margin = a.requested.price_margin if a.requested else 0.0
    if parent is None or not parent.valid or parent.speedup is None:
        yield _find("citations", it, "a kernel was refused for its price in a node with no "
                    "evaluated parent kernel to beat")
    elif checked.estimate_speedup > parent.speedup * (1.0 + margin) and not same(
            checked.estimate_speedup, parent.speedup * (1.0 + margin)):
        yield _find("citations", it, f"a kernel priced at {checked.estimate_speedup:.4g}x was "
                    f"refused, but it beats its parent's {parent.speedup:.4g}x by the run's "
                    f"margin {margin:g}")
