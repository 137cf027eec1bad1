"""`auto`: the Auto orchestrator, one trajectory of N iterations for a kernel request.

A process manager whose whole state is the run's event history: it sends each step's
command with an id derived from its own (`agents.calls`), so after a crash the redelivered
`StartRun` walks the same steps, answers the finished ones from history and resumes at the
first step that has no result yet.

1. Preparation: freeze the test suite, measure the XLA baseline.
2. Iterations 1..N: plan -> implement -> compile (fix loop, at most R fixes) -> test ->
   autotune (on a simulated target the sweep comes first: `agents.judging`) -> profile,
   each profile feeding the next plan. A compile failure past R fixes, a wrong answer or
   a failed phase short-circuits to planning with the error kept as context. A profile at
   the roofline, or a plan that concludes no kernel will pay off, ends the trajectory
   early.
3. Best-of-N: the trajectory rolls back to its lowest-latency valid iteration
   (`NodeEvaluated`); that kernel is re-verified from scratch (`WinnerVerified`) and the
   run ends (`RunFinished`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from agents import judged, knowledge, runplans
from agents.base import Agent, AgentContext
from agents.calls import CommandFailed, RunHistory, step_id
from agents.commands import (
    AuditRun,
    CheckCompile,
    ExpandNode,
    FixKernel,
    FreezeSuite,
    MeasureBaseline,
    ProfileKernel,
    ProposePlan,
    StartRun,
    VerifyWinner,
    WriteKernel,
)
from agents.finalaudit import audit_problem, audit_timeout_s
from agents.judging import JudgeSteps, Rejection, reason_of
from agents.steps import StepOrigin, step_command
from bus.codec import derived_event_id
from bus.commands import Command
from bus.registry import register
from bus.service import PermanentError, unwrapped
from eventstore.events import (
    BaselineMeasured,
    CompileChecked,
    Event,
    ExpansionRequested,
    FixAttempted,
    IterationFinished,
    KernelWritten,
    NodeEvaluated,
    PlanProposed,
    ProfileCaptured,
    RunAudited,
    RunFinished,
    TestSuiteFrozen,
    WinnerVerified,
)
from kernelgraph.errors import KernelgraphError

log = logging.getLogger("kernelgraph.agents")

K = TypeVar("K", bound=Command)
E = TypeVar("E", bound=Event)

FATAL_ERRORS = ("ProviderError", "UnknownProvider", "TargetUnavailable", "UnknownTarget")
"""Failures no other iteration can avoid: the run ends instead of planning again."""

class RunAborted(KernelgraphError):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Trajectory:
    """What the next plan needs to know: the parent kernel and the failures so far."""

    parent: dict[str, Any] | None = None
    failures: list[dict[str, Any]] = field(default_factory=list)
    finished: list[IterationFinished] = field(default_factory=list)
    proofs: dict[int, str] = field(default_factory=dict)
    summaries: dict[int, str] = field(default_factory=dict)


@register
class AutoOrchestrator(Agent[StartRun]):
    """A whole run of one trajectory (`StartRun`), or one node of a search (`ExpandNode`)."""

    agent: ClassVar[str] = "auto"
    commands: ClassVar[tuple[type, ...]] = (StartRun, ExpandNode)
    produces: ClassVar[tuple[type[Event], ...]] = (RunFinished, NodeEvaluated)

    async def _run(self, ctx: AgentContext[StartRun]) -> AsyncIterator[Event]:
        async with RunHistory(self.nc, ctx.cmd.run_id) as history:
            run = _AutoRun(self, ctx.cmd, history)
            async for event in run.expand() if isinstance(ctx.cmd, ExpandNode) else run.run():
                yield event


class _AutoRun(JudgeSteps):
    """The steps of a run, shared by the Auto trajectory and the search (`agents.search`)."""

    def __init__(self, agent: Agent[Any], cmd: StartRun, history: RunHistory) -> None:
        self.agent, self.cmd, self.history = agent, cmd, history
        self.node_id = cmd.node_id if isinstance(cmd, ExpandNode) else step_id(cmd, "node")
        self.task_sha256 = cmd.task_sha256
        self.recipe_sha256 = cmd.recipe_sha256 if isinstance(cmd, ExpandNode) else ""
        self.baseline_s: float | None = cmd.baseline_s if isinstance(cmd, ExpandNode) else None

    # --- commands ---------------------------------------------------------------------------

    def command(self, cls: type[K], key: str, iteration: int = 0, *, node_id: str | None = None,
                **fields: Any) -> K:
        """The command for step `key`, its id derived from this run's command."""
        return step_command(StepOrigin.of(self.cmd), cls, step_id(self.cmd, key),
                            node_id=node_id or self.node_id, task_sha256=self.task_sha256,
                            iteration=iteration, recipe_sha256=self.recipe_sha256, **fields)

    async def call(self, command: Command, done: type[E]) -> E:
        try:
            event = await self.history.call(command, done)
        except CommandFailed as failed:
            error = unwrapped(failed.failure.error)
            if error.startswith(FATAL_ERRORS):
                raise RunAborted(f"{failed.failure.agent}: {error}") from failed
            raise
        assert isinstance(event, done)
        return event

    def event(self, cls: type[E], **payload: Any) -> E:
        payload.setdefault("node_id", self.node_id)
        return self.agent.event(cls, self.cmd, **payload)

    # --- the run ----------------------------------------------------------------------------

    async def prepare(self) -> str | None:
        """Freeze the suite and measure the baseline; the reason when either failed."""
        try:
            frozen = await self.call(self.command(FreezeSuite, "suite"), TestSuiteFrozen)
            self.task_sha256 = frozen.task_sha256 or self.cmd.task_sha256
            self.recipe_sha256 = frozen.recipe_sha256 or ""
            baseline = await self.call(self.command(MeasureBaseline, "baseline"), BaselineMeasured)
            self.baseline_s = baseline.latency_s
        except (CommandFailed, RunAborted) as exc:
            return f"preparation failed: {reason_of(exc)}"
        return None

    async def run(self) -> AsyncIterator[Event]:
        cmd = self.cmd
        problem = await self.prepare()
        if problem:
            yield self.agent.event(RunFinished, cmd, status="failed", reason=problem)
            return
        yield self.event(ExpansionRequested, parent_id=cmd.node_id or "", policy="auto",
                         strategy=cmd.hint, iterations=cmd.iterations)
        state = Trajectory()
        try:
            async for finished in self.iterations(state):
                yield finished
        except RunAborted as exc:
            yield self.evaluated(state)
            yield self.agent.event(RunFinished, cmd, status="failed", reason=exc.reason)
            return
        evaluated = self.evaluated(state)
        yield evaluated
        async for event in self.record_lessons(state):
            yield event
        no_kernel = state.failures[-1]["error"] if state.failures else "no valid kernel"
        async for event in self.finish(evaluated if evaluated.valid else None, (
                f"no valid kernel in {evaluated.iterations} iteration(s); last failure: {no_kernel}")):
            yield event

    async def expand(self) -> AsyncIterator[Event]:
        """One node of a search: iterations from the parent the search chose, then the node's
        best (`NodeEvaluated`). A fatal failure fails the command, which ends the search."""
        cmd = self.cmd
        assert isinstance(cmd, ExpandNode)
        state = Trajectory(parent=dict(cmd.parent) if cmd.parent else None,
                           failures=[dict(f) for f in cmd.failures])
        try:
            async for finished in self.iterations(state):
                yield finished
        except RunAborted as exc:
            raise PermanentError(exc.reason) from exc
        yield self.evaluated(state)
        async for event in self.record_lessons(state):
            yield event  # last: no event of this command follows it

    async def iterations(self, state: Trajectory) -> AsyncIterator[IterationFinished]:
        for iteration in range(1, self.cmd.iterations + 1):
            finished, stop = await self.iteration(iteration, state)
            state.finished.append(finished)
            yield finished
            if stop:
                return

    async def iteration(self, it: int, state: Trajectory) -> tuple[IterationFinished, bool]:
        """One plan -> ... -> profile pass; returns its IterationFinished and whether to stop."""
        phase = "plan"
        plan: PlanProposed | None = None
        code: str | None = None
        compiled = False
        try:
            await self.history.caught_up()  # written_plans reads every plan the run has so far
            plan = await self.call(self.command(
                ProposePlan, f"it{it}/plan", it, parent=state.parent, failures=state.failures,
                hint=self.cmd.hint, baseline_s=self.baseline_s,
                written_plans=runplans.written_plans(self.history.of_type, self.cmd.run_id),
                unseen_siblings=runplans.unseen_siblings(self.history.of_type, self.cmd.run_id,
                                                         self.node_id)), PlanProposed)
            if plan.no_gain:
                return self.finished(it, valid=False, compiled=False, plan=plan, no_gain=True,
                                     error="the planner concluded that no kernel will pay off"), True
            phase = "implement"
            written = await self.call(self.command(
                WriteKernel, f"it{it}/write", it, plan_sha256=plan.plan_sha256,
                parent=state.parent, failures=state.failures), KernelWritten)
            code = written.code_sha256
            phase = "compile"
            code, problem, checked = await self.compile_loop(it, code)
            if problem:
                return self.failed(state, it, "compile", problem, plan=plan, code=code), False
            compiled = True
            cited = await self.judged_before(it, code)
            if cited is not None:
                return self.cite(state, it, plan, cited)
            judgment = await self.judge(it, code, checked)
            if isinstance(judgment, Rejection):
                return self.failed(state, it, judgment.phase, judgment.error, plan=plan,
                                   code=code, compiled=True, **judgment.fields), False
            phase = "profile"
            profile = await self.call(self.command(
                ProfileKernel, f"it{it}/profile", it, code_sha256=code,
                verdict_sha256=judgment.verdict_sha256 or ""), ProfileCaptured)
        except CommandFailed as failed:
            return self.failed(state, it, phase, reason_of(failed), plan=plan, code=code,
                               compiled=compiled), False
        state.parent = {"code_sha256": code, "plan_sha256": plan.plan_sha256,
                        "profile_sha256": profile.profile_sha256, "config": judgment.config,
                        "speedup": judgment.speedup}
        state.proofs[it] = judgment.proof_event_id
        state.summaries[it] = plan.summary
        finished = self.finished(it, valid=True, compiled=True, plan=plan, code=code,
                                 latency_s=judgment.latency_s, speedup=judgment.speedup,
                                 measured_on=judgment.measured_on, tunables=judgment.config,
                                 verdict_sha256=judgment.verdict_sha256,
                                 proof_event_id=judgment.proof_event_id)
        return finished, not profile.worth_more

    async def compile_loop(self, it: int, code: str) -> tuple[str, str, CompileChecked]:
        """Compile, fixing up to R times; returns the last code, the problem ('' = compiled)
        and the last compile check. A code the run already compile-checked is not sent again:
        its check is read back (`agents.judged`)."""
        history: list[dict[str, Any]] = []
        for attempt in range(self.cmd.fix_rounds + 1):
            command = self.command(CheckCompile, f"it{it}/compile{attempt}", it,
                                   code_sha256=code, attempt=attempt)
            earlier = None if self.history.caused_by(command.command_id) else \
                judged.earlier_compile(self.history.events, self.cmd.run_id, code)
            checked = earlier or await self.call(command, CompileChecked)
            if checked.ok:
                return code, "", checked
            problem = "; ".join(str(d.get("message", "")) for d in checked.diagnostics[:2]) or \
                "the compile check failed"
            if attempt == self.cmd.fix_rounds:
                return code, f"still failing after {attempt} fix round(s): {problem}", checked
            fixed = await self.call(self.command(
                FixKernel, f"it{it}/fix{attempt + 1}", it, code_sha256=code,
                diagnostics=list(checked.diagnostics), history=history, round=attempt + 1),
                FixAttempted)
            history.append({"round": attempt + 1, "error": fixed.error or problem[:300],
                            "cause": fixed.cause, "fix": fixed.fix})
            code = fixed.code_sha256
        raise AssertionError("unreachable")

    def failed(self, state: Trajectory, it: int, phase: str, error: str, *,
               plan: PlanProposed | None, code: str | None, compiled: bool = False,
               **fields: Any) -> IterationFinished:
        failure: dict[str, Any] = {"iteration": it, "phase": phase, "error": error[:600]}
        if plan is not None and code is not None:
            failure["plan_sha256"] = plan.plan_sha256  # which kernel failed: the planner reads it
        state.failures.append(failure)
        return self.finished(it, valid=False, compiled=compiled, plan=plan, code=code,
                             failed_phase=phase, error=error[:2000], **fields)

    async def judged_before(self, it: int, code: str) -> IterationFinished | None:
        """The earlier iteration of this run that judged `code`, once a sibling judging it
        now has ended, unless this iteration's own test or priced sweep was already sent (a
        restarted run keeps the path it took)."""
        if any(self.judging_answered(it)):
            return None
        run_id, events = self.cmd.run_id, self.history.events
        owner = judged.judging_beside(events, run_id, code, node_id=self.node_id, iteration=it)
        if owner is not None:
            await self.history.wait_until(lambda: judged.ended(events, run_id, owner))
        return judged.earlier_judgment(self.history.events, self.cmd.run_id, code,
                                       node_id=self.node_id, iteration=it)

    def cite(self, state: Trajectory, it: int, plan: PlanProposed,
             cited: IterationFinished) -> tuple[IterationFinished, bool]:
        """This iteration wrote a kernel the run already judged: repeat the verdict, citing it."""
        fields = judged.citation_fields(cited)
        finished = self.event(IterationFinished, iteration=it, plan_sha256=plan.plan_sha256,
                              **fields)
        if not cited.valid:
            state.failures.append({"iteration": it, "phase": cited.failed_phase or "test",
                                   "error": finished.error[:600]})
            return finished, False
        profile = judged.profile_of(self.history.events, cited)
        state.parent = {"code_sha256": cited.code_sha256, "plan_sha256": plan.plan_sha256,
                        "profile_sha256": profile.profile_sha256 if profile else None,
                        "config": dict(cited.tunables), "speedup": cited.speedup}
        if cited.proof_event_id:
            state.proofs[it] = cited.proof_event_id
        state.summaries[it] = plan.summary
        return finished, profile is not None and not profile.worth_more

    def finished(self, it: int, *, valid: bool, compiled: bool, plan: PlanProposed | None,
                 code: str | None = None, **fields: Any) -> IterationFinished:
        return self.event(IterationFinished, iteration=it, valid=valid, compiled=compiled,
                          code_sha256=code, plan_sha256=plan.plan_sha256 if plan else None,
                          **fields)

    def evaluated(self, state: Trajectory) -> NodeEvaluated:
        valid = [f for f in state.finished if f.valid and f.latency_s is not None]
        best = min(valid, key=lambda f: (f.latency_s, f.iteration)) if valid else None
        parent_id = self.cmd.parent_id if isinstance(self.cmd, ExpandNode) else self.cmd.node_id
        common = {"iterations": len(state.finished), "strategy": self.cmd.hint,
                  "no_gain_plans": sum(1 for f in state.finished if f.no_gain),
                  "compiled": any(f.compiled for f in state.finished), "parent_id": parent_id}
        if best is None:
            return self.event(NodeEvaluated, valid=False, **common)
        return self.event(NodeEvaluated, valid=True, best_iteration=best.iteration,
                          code_sha256=best.code_sha256, plan_sha256=best.plan_sha256,
                          latency_s=best.latency_s, speedup=best.speedup,
                          measured_on=best.measured_on, tunables=dict(best.tunables),
                          verdict_sha256=best.verdict_sha256, **common)

    async def finish(self, best: NodeEvaluated | None, no_kernel: str) -> AsyncIterator[Event]:
        """Re-verify the winner, have the run audited, and end it: `RunFinished` says
        completed only after a clean final audit."""
        cmd = self.cmd
        if best is None or best.code_sha256 is None:
            ending: dict[str, Any] = {"status": "completed", "reason": no_kernel[:2000]}
        else:
            try:
                verified = await self.call(self.command(
                    VerifyWinner, "verify", best.best_iteration or 0, node_id=best.node_id,
                    code_sha256=best.code_sha256, config=dict(best.tunables)), WinnerVerified)
            except (CommandFailed, RunAborted) as exc:
                ending = {"status": "failed",
                          "reason": f"re-verification failed to run: {reason_of(exc)}"}
            else:
                ending = {"status": "completed", "receipt_sha256": verified.receipt_sha256}
                if verified.verdict == "pass":
                    ending.update(best_node_id=best.node_id, speedup=verified.speedup,
                                  measured_on=verified.measured_on)
                else:
                    ending["reason"] = ("the winner failed re-verification: "
                                        + "; ".join(verified.reasons[:3]))
        problem = await self.audit()
        if problem:
            ending.update(status="failed", reason=(problem + (
                f" (before the audit: {ending['reason']})" if ending.get("reason") else ""))[:2000])
        yield self.agent.event(RunFinished, cmd, event_id=self.ending_id(), **ending)

    def ending_id(self) -> str:
        """The RunFinished event's id; "" lets the service derive it from its position."""
        return ""

    async def audit(self, key: str = "audit/final", final: bool = True) -> str | None:
        """Ask the auditor; None when the audit is clean, else what is wrong (fail closed)."""
        timeout = audit_timeout_s()
        try:
            async with asyncio.timeout(timeout):
                audited = await self.call(self.command(AuditRun, key, final=final), RunAudited)
        except TimeoutError:
            return f"no audit: the auditor did not answer within {timeout:g} s"
        except (CommandFailed, RunAborted) as exc:
            return f"no audit: {reason_of(exc)}"
        return audit_problem(audited)

    async def record_lessons(self, state: Trajectory) -> AsyncIterator[Event]:
        """What each valid iteration's plan did to the speedup, for later runs' planners;
        lessons that could not be kept are a `KnowledgeUnavailable` event (never a failure
        of this run)."""
        lessons, previous = [], None
        for finished in state.finished:
            if not finished.valid or finished.speedup is None:
                continue
            label = "simulated" if finished.measured_on == "simulated" else "measured"
            effect = f"{label} speedup {finished.speedup:.2f}x"
            if previous is not None:
                effect += f" (parent {previous:.2f}x)"
            decisions = await self.plan_decisions(finished.plan_sha256)
            summary = state.summaries.get(finished.iteration, "")
            lever = ", ".join(map(str, decisions.get("levers") or [])) or summary
            lessons.append({"run_id": self.cmd.run_id,
                            "kernel_class": str(decisions.get("kernel_class") or "unknown"),
                            "lever": lever[:200], "effect": effect,
                            "event_id": state.proofs.get(finished.iteration, ""),
                            "text": f"{self.cmd.task_name}: {summary} -> {effect}"})
            previous = finished.speedup
        if not lessons:
            return
        written, problem = await asyncio.to_thread(knowledge.record_lessons, lessons)
        if problem is not None:
            yield self.event(knowledge.KnowledgeUnavailable, event_id=derived_event_id(
                f"{self.cmd.command_id}:lessons", 0, fallback_ms=int(self.cmd.ts * 1000)),
                **knowledge.unavailable_fields("lessons", problem, lost=len(lessons) - written))

    async def plan_decisions(self, plan_sha256: str | None) -> dict[str, Any]:
        """The machine-readable decisions a plan may carry in a ```json block."""
        if not plan_sha256:
            return {}
        text = (await self.agent.get_artifact(plan_sha256)).decode()
        match = re.search(r"```json\s*\n(.*?)```", text, re.S)
        if not match:
            return {}
        try:
            decoded = json.loads(match.group(1))
        except ValueError:
            return {}
        return decoded if isinstance(decoded, dict) else {}

