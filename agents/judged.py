"""What a run already knows about a kernel, so that nothing is judged twice and nothing hopeless
is tested (`agents.auto` asks; the audit's `citations` check holds the answers to account).

Within one run the suite, the target and the tuning budget are fixed, and a kernel's test
runs its default configuration and its sweep the same grid: the code's sha256 identifies a
judgment. So:

- a compile check already answered for the same code and configuration is read back
  instead of being sent again (`earlier_compile`);
- a kernel an earlier iteration judged (it passed, or failed its tests) is not tested,
  tuned or profiled again: the iteration cites that earlier `IterationFinished`
  (`earlier_judgment`) and repeats its outcome;
- a kernel another node of the run is judging right now (its compile check passed first, and
  its iteration has not ended: two siblings of a batch wrote the same code) is waited for,
  then cited (`judging_beside`, `ended`). The iteration that compiled it first never waits at
  this step, so two iterations never wait on each other;
- on a simulated target, a compiled kernel whose compile check priced it no faster than its
  node's parent by the run's margin is recorded as not faster (`failed_phase` "price") and
  never run in interpret mode (`price_problem`). Real targets keep testing first: their
  compile check does not time the kernel alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from eventstore.events import (
    CompileChecked,
    Event,
    IterationFinished,
    NodeEvaluated,
    ProfileCaptured,
    RunFinished,
)

Iteration = tuple[str | None, int]
"""(node_id, iteration): one iteration of a run."""

JUDGED_PHASES = frozenset({"test"})
"""Failures that are a verdict on the kernel itself (a wrong answer); an agent that gave up
in another phase judged nothing, so that kernel may be tried again."""


def earlier_compile(events: Iterable[Event], run_id: str,
                    code_sha256: str) -> CompileChecked | None:
    """The first compile check of this code in the run, if any (an iteration's compile
    check is always of the default configuration)."""
    for event in events:
        if (isinstance(event, CompileChecked) and event.run_id == run_id
                and event.code_sha256 == code_sha256):
            return event
    return None


def earlier_judgment(events: Iterable[Event], run_id: str, code_sha256: str, *,
                     node_id: str | None, iteration: int) -> IterationFinished | None:
    """The first iteration of the run (not this one) that judged this code and itself
    judged it (a citation is never cited: the chain stays one link long)."""
    for event in events:
        if (isinstance(event, IterationFinished) and event.run_id == run_id
                and event.code_sha256 == code_sha256 and event.cites_event_id is None
                and (event.valid or event.failed_phase in JUDGED_PHASES)
                and (event.node_id, event.iteration) != (node_id, iteration)):
            return event
    return None


def judging_beside(events: Iterable[Event], run_id: str, code_sha256: str, *,
                   node_id: str | None, iteration: int) -> Iteration | None:
    """The other iteration of the run whose compile check of this code passed first, while
    it has not ended (it is testing, tuning or profiling the code now); else None."""
    events = list(events)
    owner: Iteration | None = next(
        ((e.node_id, e.iteration) for e in events
         if isinstance(e, CompileChecked) and e.run_id == run_id
         and e.code_sha256 == code_sha256 and e.ok), None)
    if owner is None or owner == (node_id, iteration) or ended(events, run_id, owner):
        return None
    return owner


def ended(events: Iterable[Event], run_id: str, owner: Iteration) -> bool:
    """Has this iteration finished, or its node or the run ended without it?"""
    node_id = owner[0]
    for event in events:
        if event.run_id != run_id:
            continue
        if isinstance(event, IterationFinished) and (event.node_id, event.iteration) == owner:
            return True
        if isinstance(event, NodeEvaluated) and event.node_id == node_id:
            return True
        if isinstance(event, RunFinished):
            return True
    return False


def profile_of(events: Iterable[Event], cited: IterationFinished) -> ProfileCaptured | None:
    """The profile captured in the cited iteration (what the next plan reads)."""
    for event in events:
        if (isinstance(event, ProfileCaptured) and event.node_id == cited.node_id
                and event.iteration == cited.iteration and event.run_id == cited.run_id):
            return event
    return None


def parent_speedup(parent: Mapping[str, Any] | None) -> float | None:
    """The speedup of the kernel a node grows from (None: the root, nothing to beat)."""
    if not parent:
        return None
    value = parent.get("speedup")
    return float(value) if isinstance(value, int | float) and value > 0 else None


def price_problem(checked: CompileChecked, parent: float | None, margin: float,
                  target: str) -> str | None:
    """Why a compiled kernel is not worth testing (None: test it): on a simulated target, its
    estimate does not beat its parent's speedup by `margin`."""
    if not target.startswith("sim-") or parent is None or checked.estimate_speedup is None:
        return None
    needed = parent * (1.0 + margin)
    if checked.estimate_speedup > needed:
        return None
    return (f"not faster: the compile check priced this kernel at {checked.estimate_speedup:.3g}x "
            f"({checked.estimate_s:.3g} s, simulated), which does not beat its parent's "
            f"{parent:.3g}x by the run's margin of {margin:g} (needs > {needed:.3g}x); "
            "it was not tested")


ROUNDING = 1e-9
"""Relative slack for a latency rebuilt from a speedup (baseline = estimate x speedup): a
price equal to the parent's up to float rounding is no faster."""


def latency_to_beat(checked: CompileChecked, parent: float | None, margin: float) -> float | None:
    """The simulated latency a configuration must be priced under to beat `parent` by
    `margin` (the baseline is the one the compile check priced against); None: unknown."""
    if parent is None or not checked.estimate_s or not checked.estimate_speedup:
        return None
    baseline_s = checked.estimate_s * checked.estimate_speedup
    return baseline_s / (parent * (1.0 + margin)) * (1.0 - ROUNDING)


def citation_fields(cited: IterationFinished) -> dict[str, Any]:
    """What an iteration that cites `cited` repeats of it."""
    return {"valid": cited.valid, "compiled": cited.compiled, "code_sha256": cited.code_sha256,
            "latency_s": cited.latency_s, "speedup": cited.speedup,
            "measured_on": cited.measured_on, "tunables": dict(cited.tunables),
            "failed_phase": cited.failed_phase,
            "error": (f"judged before (node {cited.node_id}, iteration {cited.iteration}): "
                      f"{cited.error}" if cited.error else ""),
            "verdict_sha256": cited.verdict_sha256, "proof_event_id": cited.proof_event_id,
            "cites_event_id": cited.event_id}
