"""The progress lines a run prints on stderr as its events arrive: one per phase result."""

from __future__ import annotations

import time
from typing import Any

from eventstore.events import PRICE_PHASE
from kernelgraph.cli.app import err_console
from kernelgraph.userterms import in_user_terms
from projections.searchgraph import priced_out, tested_no_kernel, wrote_no_kernel


def clip(text: str, width: int) -> str:
    """Free text as a progress line shows it: whitespace runs made one space, and past `width`
    cut at the last word boundary with " ..." (a single word longer than `width` is cut
    inside it: a path or a hash still shows its start)."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    cut = text[:width]
    if " " in cut.strip():
        cut = cut.rsplit(" ", 1)[0]
    return cut.rstrip(",;:([{ ") + " ..."


def lever_line(strategy: str, width: int = 100) -> str:
    """A strategy hint as a progress line shows it: the lever(s) by name, then the hint's text
    cut at a word boundary."""
    from searchpolicies.levers import parse_strategy

    parsed = parse_strategy(strategy)
    text = clip(parsed.text, width)
    if not parsed.levers:
        return f"hint: {text}"
    return f"lever {'+'.join(parsed.levers)}" + (f": {text}" if text else "")


class Progress:
    """One line per phase result on stderr: iteration, phase, outcome, best so far."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.best: float | None = None
        self.started = time.monotonic()
        self.labels: dict[str, str] = {}
        self.search = False
        self.held: tuple[str, str] | None = None
        """An agent's give-up, printed with the next event unless the run's end repeats it."""
        self.told: str | None = None
        """The run's end reason, once printed here (the summary then does not repeat it)."""
        self.priced_out: dict[str, int] = {}
        """Kernels priced no faster than their parent (never tested), by node id."""

    def label(self, e: Any) -> str:
        """`[it 2]` in a single trajectory, `[n3 it 2]` in a search (n3: the third node)."""
        node = self.labels.get(e.node_id or "", "") if self.search else ""
        return f"\\[{node + ' ' if node else ''}it {getattr(e, 'iteration', 0)}]"

    def __call__(self, event: Any) -> None:
        if event.type_name == "AgentFailed":
            if self.held is not None:
                self.print(self.held[0])
            self.held = None
            if event.command_type not in ("StartRun", "StartSearch"):  # `end` says those
                self.held = (self.describe(event) or "", event.error)
            return
        line = self.describe(event)
        if event.type_name == "RunFinished":
            self.told = event.reason
            if self.held is not None and _core(self.held[1]) in event.reason:
                self.held = None  # the run's end says it: once, in the run's words
        if line and self.held is not None:  # held until the next line, in order
            self.print(self.held[0])
            self.held = None
        self.print(line)

    def print(self, line: str | None) -> None:
        if line and not self.quiet:
            elapsed = time.monotonic() - self.started
            err_console.print(f"[dim]{elapsed:6.1f}s[/] {in_user_terms(line)}",
                              highlight=False, soft_wrap=True)

    def end(self, status: str, reason: str) -> None:
        """The run's end, when no RunFinished said it (the orchestrator gave up)."""
        if self.told is None:
            if self.held is not None:
                self.print(self.held[0])
            self.told = reason
            self.print(f"run {status}" + (f": {first_line(reason)}" if reason else ""))

    def describe(self, e: Any) -> str | None:
        kind = e.type_name
        it = self.label(e)
        if kind == "RunRequested":
            self.search = e.policy != "auto"
            return f"search with policy {e.policy} {dict(e.policy_params)}" if self.search else None
        if kind == "ExpansionRequested":
            self.labels[e.node_id or ""] = f"n{len(self.labels) + 1}"
            if not self.search:
                return None
            parent = self.labels.get(e.parent_id, "root")
            hint = f", {lever_line(e.strategy)}" if e.strategy.strip() else ""
            return f"{self.labels[e.node_id or '']} requested under {parent} ({e.iterations} it{hint})"
        if kind == "NodeEvaluated" and self.search:
            node = self.labels.get(e.node_id or "", "?")
            if e.valid and e.speedup:
                return f"{node} evaluated: {e.speedup:.2f}x"
            if wrote_no_kernel(e.iterations, e.no_gain_plans):
                return f"{node} evaluated: no kernel written (its planner found nothing new to try)"
            if tested_no_kernel(e.iterations, e.no_gain_plans, self.priced_out.get(e.node_id or "", 0)):
                return f"{node} evaluated: no kernel tested (each priced no faster than its parent)"
            return f"{node} evaluated: no valid kernel"
        if kind == "SearchStopped":
            return f"search stopped: {clip(e.reason, 200)}"
        if kind == "RunAudited":
            return f"audit {'clean' if e.clean else 'FOUND PROBLEMS'}" + (
                "" if e.clean else f": {clip(e.findings[0].get('message', ''), 160)}" if e.findings else "")
        if kind == "TestSuiteFrozen":
            return f"suite frozen: {e.n_cases} cases, sha256 {e.suite_sha256[:12]}"
        if kind == "BaselineMeasured":
            return f"XLA baseline: {e.latency_s:.3e} s ({e.priced_from or e.measured_on})"
        if kind == "PlanProposed":
            return f"{it} plan: {clip(e.summary, 200)}" + (" (no kernel will pay off)" if e.no_gain else "")
        if kind == "KernelWritten":
            return f"{it} kernel written ({e.code_sha256[:12]})"
        if kind == "CompileChecked":
            return f"{it} compile {'ok' if e.ok else 'FAILED'} (attempt {e.attempt})" + (
                "" if e.ok else f": {clip(e.diagnostics[0].get('message', ''), 120)}" if e.diagnostics else "")
        if kind == "FixAttempted":
            return f"{it} fix round {e.attempt}: {clip(e.error, 100)}"
        if kind == "TestsRun":
            verdict = "pass" if e.passed else f"FAIL ({e.n_failed}/{e.n_cases} cases)"
            return f"{it} tests {verdict}" + (f", speedup {e.speedup:.2f}x ({e.measured_on})"
                                              if e.passed and e.speedup else "")
        if kind == "TuningSwept":
            floored = f" ({e.configs_floored} not compiled)" if e.configs_floored else ""
            priced = f"{e.configs_priced} priced{floored}, " if e.configs_priced else ""
            return f"{it} autotune: {priced}{e.configs_tried} tested, best {e.best_config}" + (
                f" at {e.best_speedup:.2f}x" if e.best_speedup else "")
        if kind == "ProfileCaptured":
            return f"{it} profile: {e.bound}-bound; next lever: {clip(e.top_lever, 100)}"
        if kind == "IterationFinished":
            if priced_out(e):
                self.priced_out[e.node_id or ""] = self.priced_out.get(e.node_id or "", 0) + 1
            if e.valid and e.speedup is not None:
                self.best = max(self.best or 0.0, e.speedup)
            best = f"best so far {self.best:.2f}x" if self.best else "no valid kernel yet"
            outcome = f"valid, {e.speedup:.2f}x" if e.valid and e.speedup else (
                f"not faster ({e.estimate_speedup:.2f}x priced), not tested"
                if e.failed_phase == PRICE_PHASE and e.estimate_speedup is not None else
                f"failed in {e.failed_phase}" if e.failed_phase else "ended")
            if e.cites_event_id and e.failed_phase != PRICE_PHASE:
                outcome += " (judged before: verdict cited, not run again)"
            return f"{it} done: {outcome}; {best}"
        if kind == "WinnerVerified":
            return f"winner re-verified: {e.verdict}" + (f", {e.speedup:.2f}x ({e.measured_on})"
                                                         if e.speedup else "")
        if kind == "KnowledgeUnavailable":
            what = ("a prompt went without retrieved knowledge" if e.operation == "retrieve"
                    else f"{e.lost} lesson(s) not kept")
            return f"[yellow]knowledge store unavailable:[/] {what}: {clip(e.reason, 200)}"
        if kind == "AgentFailed":
            return f"[red]{e.agent} gave up on {e.command_type}:[/] {first_line(e.error)}"
        if kind == "RunFinished":
            return f"run {e.status}" + (f": {first_line(e.reason)}" if e.reason else "")
        return None


def first_line(text: str, width: int = 1000) -> str:
    """A reason's first line, whole up to `width`: a refusal's estimate and the `--scale`
    that fits come at its end."""
    return text.strip().splitlines()[0][:width] if text.strip() else ""


def _core(error: str) -> str:
    """An agent's error without its wrapper, as an orchestrator quotes it in its reason."""
    from bus.service import unwrapped

    return first_line(unwrapped(error), 200)
