"""Human in the loop: the Auto phases one at a time, each waiting for the user.

The session's state is a fold over its run's events (`HitlState.apply`), so a session left
today resumes next week from the log alone. Each user step is one command to one agent
(`next_command`); the user's approvals, edits, feedback and jumps are `HumanFeedbackGiven`
events, never mutations:

- `feedback` text goes to the next plan or kernel the agents write;
- `edit` replaces the current plan or kernel with the user's artifact;
- `goto` chooses the next phase (for example `verify` to finish with the current kernel).

Phases: suite -> baseline -> plan -> implement -> compile (-> fix -> compile ...) -> test ->
tune -> profile -> plan (the next iteration) ... and `verify`, which ends the session.

A session ends the way an Auto run does (`agents.hitlend`): its iterations and its node
are evaluated, the best kernel re-verified, the run audited, and `RunFinished` says
completed only after a clean final audit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

from agents.commands import (
    CheckCompile,
    FixKernel,
    FreezeSuite,
    MeasureBaseline,
    ProfileKernel,
    ProposePlan,
    RunTests,
    TuneKernel,
    VerifyWinner,
    WriteKernel,
)
from agents.steps import StepOrigin, step_command
from bus.commands import Command
from eventstore.events import (
    BaselineMeasured,
    CompileChecked,
    Event,
    ExpansionRequested,
    FixAttempted,
    HumanFeedbackGiven,
    IterationFinished,
    KernelWritten,
    NodeEvaluated,
    PlanProposed,
    ProfileCaptured,
    RunAudited,
    RunFinished,
    RunRequested,
    TestsRun,
    TestSuiteFrozen,
    TuningSwept,
    WinnerVerified,
)

PHASES = ("suite", "baseline", "plan", "implement", "compile", "fix", "test", "tune", "profile",
          "verify")
RESULTS: dict[str, type[Event]] = {
    "suite": TestSuiteFrozen, "baseline": BaselineMeasured, "plan": PlanProposed,
    "implement": KernelWritten, "compile": CompileChecked, "fix": FixAttempted,
    "test": TestsRun, "tune": TuningSwept, "profile": ProfileCaptured, "verify": WinnerVerified,
}
EDITABLE = ("plan", "kernel")

K = TypeVar("K", bound=Command)


class HitlError(ValueError):
    """A step the session cannot take now; the message says what it needs first."""


@dataclass
class Valid:
    iteration: int
    code_sha256: str
    plan_sha256: str | None
    config: dict[str, Any]
    latency_s: float | None
    speedup: float | None
    measured_on: str
    verdict_sha256: str | None = None
    """The verdict behind `speedup` (the test run's, or the tuning sweep's best)."""
    proof_event_id: str | None = None
    """The TestsRun or TuningSwept that reported that verdict."""
    profile_sha256: str | None = None


@dataclass
class Attempt:
    """What one iteration did, for the `IterationFinished` of an iteration that ended invalid."""

    plan_sha256: str | None = None
    code_sha256: str | None = None
    compiled: bool = False
    failed_phase: str | None = None
    error: str = ""


@dataclass
class HitlState:
    """Everything the next step needs, folded from the session's events."""

    run_id: str = ""
    request: RunRequested | None = None
    node_id: str | None = None
    recipe_sha256: str | None = None
    task_sha256: str | None = None
    baseline_s: float | None = None
    iteration: int = 0
    plan_sha256: str | None = None
    code_sha256: str | None = None
    compile_attempt: int = 0
    diagnostics: list[dict[str, Any]] = field(default_factory=list)
    fix_history: list[dict[str, Any]] = field(default_factory=list)
    tests: TestsRun | None = None
    config: dict[str, Any] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)
    parent: dict[str, Any] | None = None
    valid: list[Valid] = field(default_factory=list)
    feedback: list[str] = field(default_factory=list)
    next_phase: str = "suite"
    done_steps: int = 0
    attempts: dict[int, Attempt] = field(default_factory=dict)
    closed: dict[int, IterationFinished] = field(default_factory=dict)
    evaluated: NodeEvaluated | None = None
    verified: WinnerVerified | None = None
    audit: RunAudited | None = None
    """The latest final audit."""
    finished: RunFinished | None = None
    history: list[str] = field(default_factory=list)

    @classmethod
    def fold(cls, events: list[Event]) -> HitlState:
        state = cls()
        for event in events:
            state.apply(event)
        return state

    def apply(self, e: Event) -> None:
        if isinstance(e, RunRequested):
            self.run_id, self.request, self.task_sha256 = e.run_id, e, e.task_sha256
        elif isinstance(e, ExpansionRequested):
            self.node_id = e.node_id
        elif isinstance(e, TestSuiteFrozen):
            self.recipe_sha256 = e.recipe_sha256
            self.task_sha256 = e.task_sha256 or self.task_sha256
            self._done("suite", "baseline", f"suite frozen: {e.n_cases} cases")
        elif isinstance(e, BaselineMeasured):
            self.baseline_s = e.latency_s
            self._done("baseline", "plan", f"baseline {e.latency_s:.3e} s ({e.measured_on})")
        elif isinstance(e, PlanProposed):
            self.iteration = max(self.iteration, e.iteration)
            self.attempts[e.iteration] = Attempt(plan_sha256=e.plan_sha256)
            self.plan_sha256, self.code_sha256, self.tests = e.plan_sha256, None, None
            self.compile_attempt, self.diagnostics, self.fix_history = 0, [], []
            self.feedback = []
            self._done("plan", "implement", f"it {e.iteration} plan: {e.summary}")
        elif isinstance(e, KernelWritten):
            self.code_sha256, self.config, self.tests = e.code_sha256, {}, None
            self._attempt(e.iteration).code_sha256 = e.code_sha256
            self.feedback = []
            self._done("implement", "compile", f"it {e.iteration} kernel {e.code_sha256[:12]}")
        elif isinstance(e, CompileChecked):
            self.diagnostics = list(e.diagnostics)
            attempt = self._attempt(e.iteration)
            if e.ok:
                attempt.compiled = True
                self._done("compile", "test", f"it {e.iteration} compiled")
            else:
                self.compile_attempt = e.attempt + 1
                message = str(e.diagnostics[0].get("message", "")) if e.diagnostics else ""
                attempt.failed_phase, attempt.error = "compile", message or "the compile check failed"
                self._done("compile", "fix", f"it {e.iteration} compile failed: {message[:120]}")
        elif isinstance(e, FixAttempted):
            self.code_sha256, self.tests = e.code_sha256, None
            self._attempt(e.iteration).code_sha256 = e.code_sha256
            self.fix_history.append({"round": e.attempt, "error": e.error, "cause": e.cause,
                                     "fix": e.fix})
            self._done("fix", "compile", f"it {e.iteration} fix round {e.attempt}")
        elif isinstance(e, TestsRun):
            self.tests = e
            self.config = dict(e.config)
            if e.passed:
                self._done("test", "tune", f"it {e.iteration} tests pass"
                           + (f", {e.speedup:.2f}x ({e.measured_on})" if e.speedup else ""))
            else:
                error = "; ".join(e.reasons[:3]) or "wrong answer"
                self.failures.append({"iteration": e.iteration, "phase": "test", "error": error})
                attempt = self._attempt(e.iteration)
                attempt.failed_phase, attempt.error = "test", error
                self._done("test", "plan", f"it {e.iteration} tests FAILED")
        elif isinstance(e, TuningSwept):
            self._tuned(e)
        elif isinstance(e, ProfileCaptured):
            if self.valid and self.valid[-1].iteration == e.iteration:
                self.valid[-1].profile_sha256 = e.profile_sha256
                best = self.valid[-1]
                self.parent = {"code_sha256": best.code_sha256, "plan_sha256": best.plan_sha256,
                               "profile_sha256": e.profile_sha256, "config": best.config,
                               "speedup": best.speedup}
            self._done("profile", "plan", f"it {e.iteration} profile: {e.bound}-bound")
        elif isinstance(e, HumanFeedbackGiven):
            self._human(e)
        elif isinstance(e, IterationFinished):
            self.closed[e.iteration] = e
        elif isinstance(e, NodeEvaluated):
            self.evaluated, self.next_phase = e, "verify"
            if e.valid:
                self.history.append(f"node evaluated: iteration {e.best_iteration} is the best"
                                    + (f", {e.speedup:.2f}x ({e.measured_on})" if e.speedup else ""))
        elif isinstance(e, WinnerVerified):
            self.verified = e
            self._done("verify", "verify", f"winner re-verified: {e.verdict}")
        elif isinstance(e, RunAudited):
            if e.final:
                self.audit = e
        elif isinstance(e, RunFinished):
            self.finished = e

    def _attempt(self, iteration: int) -> Attempt:
        return self.attempts.setdefault(iteration, Attempt())

    def _tuned(self, e: TuningSwept) -> None:
        """The iteration's valid kernel: the sweep's best when it beats the test run of the
        same code, else the test run's figures; each with the verdict and event behind it."""
        tests = self.tests if self.tests and self.tests.code_sha256 == e.code_sha256 else None
        config: dict[str, Any] = dict(tests.config) if tests else dict(self.config)
        latency = tests.latency_s if tests else None
        speedup = tests.speedup if tests else None
        verdict = tests.verdict_sha256 if tests else None
        proof = tests.event_id if tests else None
        measured_on = (tests.measured_on if tests else None) or e.measured_on
        if e.best_latency_s is not None and (latency is None or e.best_latency_s < latency):
            config, latency, speedup = dict(e.best_config), e.best_latency_s, e.best_speedup
            verdict, proof, measured_on = e.verdict_sha256, e.event_id, e.measured_on
        self.config = dict(config)
        self.valid.append(Valid(e.iteration, e.code_sha256, self.plan_sha256, dict(config),
                                latency, speedup, measured_on, verdict, proof))
        self._done("tune", "profile", f"it {e.iteration} tuned: {config}")

    def _human(self, e: HumanFeedbackGiven) -> None:
        if e.action == "feedback":
            self.feedback.append(e.text)
            self.history.append(f"feedback for {e.phase_name}: {e.text[:80]}")
        elif e.action == "edit" and e.artifact_sha256:
            attempt = self._attempt(self.iteration)
            if e.phase_name == "plan":
                self.plan_sha256 = attempt.plan_sha256 = e.artifact_sha256
                self.next_phase = "implement"
            else:
                self.code_sha256 = attempt.code_sha256 = e.artifact_sha256
                self.next_phase, self.compile_attempt, self.fix_history = "compile", 0, []
                self.tests = None
            self.history.append(f"edited the {e.phase_name}")
        elif e.action == "goto":
            self.next_phase = e.phase_name
            self.history.append(f"next phase set to {e.phase_name}")
        self.done_steps += 1

    def _done(self, phase: str, following: str, line: str) -> None:
        self.next_phase = following
        self.done_steps += 1
        self.history.append(line)

    # --- views ---------------------------------------------------------------------------

    @property
    def best(self) -> Valid | None:
        timed = [v for v in self.valid if v.latency_s is not None]
        return min(timed, key=lambda v: (v.latency_s, v.iteration)) if timed else None

    def artifacts_needed(self) -> list[str]:
        """Artifacts the next command reads: re-published from the log before it is sent."""
        shas = [self.task_sha256, self.recipe_sha256, self.plan_sha256, self.code_sha256]
        if self.parent:
            shas += [self.parent.get(k) for k in ("code_sha256", "plan_sha256", "profile_sha256")]
        if self.tests is not None:
            shas.append(self.tests.verdict_sha256)
        if self.request is not None:
            shas.append(self.request.task_sha256)
        winner = self.evaluated or self.best  # what `verify` re-checks
        if winner is not None:
            shas.append(winner.code_sha256)
        return [s for s in dict.fromkeys(shas) if s]


def next_command(state: HitlState, phase: str | None = None) -> tuple[str, Command]:
    """The command that carries out the next phase (or `phase`), and the phase's name."""
    if state.request is None:
        raise HitlError("no kernel request in this session")
    if state.finished is not None:
        raise HitlError(f"the session has ended ({state.finished.status}); start a new one")
    phase = phase or state.next_phase
    request = state.request
    needs = {
        "baseline": state.recipe_sha256 is not None or "the suite first (`hitl goto suite`)",
        "plan": state.recipe_sha256 is not None or "the suite first",
        "implement": state.plan_sha256 is not None or "a plan first",
        "compile": state.code_sha256 is not None or "a kernel first",
        "fix": bool(state.code_sha256 and state.diagnostics) or "a failed compile check first",
        "test": state.code_sha256 is not None or "a kernel first",
        "tune": bool(state.tests and state.tests.passed) or "passing tests first",
        "profile": bool(state.tests and state.tests.verdict_sha256) or "a test run first",
        "verify": (state.best is not None or bool(state.evaluated and state.evaluated.valid)
                   or "a valid, tuned kernel first"),
    }
    need = needs.get(phase, True)
    if phase not in PHASES:
        raise HitlError(f"unknown phase {phase!r}; phases: {', '.join(PHASES)}")
    if need is not True:
        raise HitlError(f"{phase} needs {need}")
    if state.evaluated is not None and phase != "verify":
        raise HitlError("the node is evaluated; only `verify` is left, which ends the session")
    iteration = state.iteration + 1 if phase == "plan" else max(state.iteration, 0)
    origin = session_origin(state)

    def make(cls: type[K], **fields: Any) -> K:
        fields.setdefault("iteration", iteration)
        return step_command(origin, cls, derived(state, f"hitl/{state.done_steps}/{phase}"),
                            node_id=state.node_id,
                            task_sha256=state.task_sha256 or request.task_sha256,
                            recipe_sha256=state.recipe_sha256 or "", **fields)

    feedback = "\n".join(state.feedback)
    if phase == "suite":
        return phase, make(FreezeSuite)
    if phase == "baseline":
        return phase, make(MeasureBaseline)
    if phase == "plan":
        return phase, make(ProposePlan, parent=state.parent, failures=state.failures,
                           feedback=feedback, baseline_s=state.baseline_s,
                           hint=str(request.policy_params.get("hint", "")))
    if phase == "implement":
        return phase, make(WriteKernel, plan_sha256=state.plan_sha256 or "", parent=state.parent,
                           failures=state.failures, feedback=feedback)
    if phase == "compile":
        return phase, make(CheckCompile, code_sha256=state.code_sha256 or "",
                           attempt=state.compile_attempt)
    if phase == "fix":
        return phase, make(FixKernel, code_sha256=state.code_sha256 or "",
                           diagnostics=state.diagnostics, history=state.fix_history,
                           round=len(state.fix_history) + 1)
    if phase == "test":
        return phase, make(RunTests, code_sha256=state.code_sha256 or "")
    if phase == "tune":
        return phase, make(TuneKernel, code_sha256=state.code_sha256 or "",
                           budget=int(request.budget.get("tune_budget") or 8),
                           verdict_sha256=state.tests.verdict_sha256 if state.tests else None)
    if phase == "profile":
        verdict = state.tests.verdict_sha256 if state.tests else ""
        return phase, make(ProfileKernel, code_sha256=state.code_sha256 or "",
                           verdict_sha256=verdict or "")
    node = state.evaluated
    if node is not None and node.valid and node.code_sha256:
        return phase, make(VerifyWinner, iteration=node.best_iteration or 0,
                           code_sha256=node.code_sha256, config=dict(node.tunables))
    best = state.best
    assert best is not None
    return phase, make(VerifyWinner, iteration=best.iteration, code_sha256=best.code_sha256,
                       config=best.config)


def session_origin(state: HitlState) -> StepOrigin:
    """What every command of the session carries (`agents.steps`)."""
    request = state.request
    assert request is not None
    return StepOrigin(
        run_id=state.run_id, ts=request.ts, causation_id=request.event_id,
        task_file=str(request.policy_params.get("task_file", f"{request.task_name}.py")),
        target_name=request.target, provider=request.provider,
        provider_options=dict(request.policy_params.get("provider_options", {})),
        seed=request.seed, knowledge_cutoff_ts=request.policy_params.get("knowledge_cutoff_ts"),
        single_trajectory=True)


def derived(state: HitlState, key: str) -> str:
    """An id that depends only on the session and `key`: of a step's command (a re-run step
    is one step), or of an event the session records itself (recorded once)."""
    from bus.codec import derived_event_id

    assert state.request is not None
    return derived_event_id(f"{state.request.event_id}/{key}", 0,
                            fallback_ms=int(state.request.ts * 1000))


def session_node(request: RunRequested) -> str:
    """The one search-graph node a HITL session works on."""
    from bus.codec import derived_event_id

    return derived_event_id(f"{request.event_id}/node", 0, fallback_ms=int(request.ts * 1000))
