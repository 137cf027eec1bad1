"""How an iteration judges a kernel that compiled: which configurations run the suite, in
which order, and which one the iteration keeps.

On a simulated target the compile check has already priced the default configuration, and
a price is all the latency a simulated verdict has (interpret mode decides correctness only),
so pricing comes first:

- a kernel priced too slow to beat its node's parent (`judged.price_problem`) is tested only
  in a configuration the tuner prices under the parent; with none, it is "not faster" and
  never runs in interpret mode;
- otherwise the tuner prices the other configurations before any test and tests the fastest
  priced under the default (`agents.autotuner`). When one passes, the default is not tested:
  the iteration would not keep it, and a test at a large tuning point costs minutes.

Elsewhere the default is tested first and the tuner sweeps after: on a real target (timings
need a kernel that is known to run), where the compile check gave no price, and where a
restarted iteration had already sent the default's test (it keeps the path it took).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agents import judged
from agents.calls import CommandFailed, step_id
from agents.commands import ExpandNode, RunTests, TuneKernel
from bus.service import unwrapped
from eventstore.events import CompileChecked, TestsRun, TuningSwept

if TYPE_CHECKING:
    from agents.calls import RunHistory
    from bus.commands import Command


@dataclass(frozen=True)
class Judgment:
    """The configuration an iteration keeps: it passed the suite, with its latency and the
    event that proves it."""

    config: dict[str, Any]
    latency_s: float | None
    speedup: float | None
    verdict_sha256: str | None
    measured_on: str
    proof_event_id: str

    @classmethod
    def of_tests(cls, tests: TestsRun) -> Judgment:
        return cls(dict(tests.config), tests.latency_s, tests.speedup, tests.verdict_sha256,
                   tests.measured_on or "simulated", tests.event_id)

    @classmethod
    def of_sweep(cls, swept: TuningSwept) -> Judgment:
        return cls(dict(swept.best_config), swept.best_latency_s, swept.best_speedup,
                   swept.verdict_sha256, swept.measured_on, swept.event_id)


@dataclass(frozen=True)
class Rejection:
    """Why no configuration of the kernel is kept: the phase, the error, and the fields the
    failed iteration records besides."""

    phase: str
    error: str
    fields: dict[str, Any] = field(default_factory=dict)


def reason_of(exc: BaseException) -> str:
    """A failure as the user reads it: an agent's error without its class path."""
    if isinstance(exc, CommandFailed):
        return unwrapped(exc.failure.error)[:2000]
    return str(exc)[:2000]


class JudgeSteps:
    """The test and tuning steps of `agents.auto`'s runs (mixed into its `_AutoRun`)."""

    cmd: Any
    history: RunHistory

    if TYPE_CHECKING:
        def command(self, cls: type[Any], key: str, iteration: int = 0, **fields: Any) -> Any: ...

        async def call(self, command: Command, done: type[Any]) -> Any: ...

    async def judge(self, it: int, code: str, checked: CompileChecked) -> Judgment | Rejection:
        """Test and tune `code`, whose compile check is `checked`, in the order the module
        docstring gives."""
        parent = judged.parent_speedup(
            self.cmd.parent if isinstance(self.cmd, ExpandNode) else None)
        problem = judged.price_problem(checked, parent, self.cmd.price_margin,
                                       self.cmd.target_name)
        phase = "autotune"
        try:
            if problem:
                return await self.rescue(it, code, checked, parent, problem)
            swept = (await self.sweep_priced(it, code, checked)
                     if self.sweeps_first(it, checked) else None)
            if (swept is not None and swept.best_latency_s is not None
                    and checked.estimate_s is not None
                    and swept.best_latency_s < checked.estimate_s):
                return Judgment.of_sweep(swept)
            phase = "test"
            tests = await self.call(self.command(RunTests, f"it{it}/test", it,
                                                 code_sha256=code), TestsRun)
            if not tests.passed:
                if swept is not None and swept.best_latency_s is not None:
                    return Judgment.of_sweep(swept)  # it passed, though priced no faster
                return Rejection("test", "; ".join(tests.reasons[:3]) or "wrong answer")
            phase = "autotune"
            if swept is None:
                swept = await self.call(self.command(
                    TuneKernel, f"it{it}/tune", it, code_sha256=code,
                    budget=self.cmd.tune_budget, verdict_sha256=tests.verdict_sha256),
                    TuningSwept)
            tested = Judgment.of_tests(tests)
            if swept.best_latency_s is not None and (
                    tested.latency_s is None or swept.best_latency_s < tested.latency_s):
                return Judgment.of_sweep(swept)
            return tested
        except CommandFailed as failed:
            return Rejection(phase, reason_of(failed))

    def judging_answered(self, it: int) -> tuple[bool, bool]:
        """Have this iteration's priced sweep and its default's test answered (a restarted
        iteration)?"""
        swept, tested = (bool(self.history.caused_by(step_id(self.cmd, f"it{it}/{step}")))
                         for step in ("tune-priced", "test"))
        return swept, tested

    def sweeps_first(self, it: int, checked: CompileChecked) -> bool:
        """Does the tuner price the other configurations before the default is tested? Not
        where a restarted iteration's default was tested before any priced sweep (a log
        written before sweeps came first): it keeps the path it took."""
        return (self.cmd.target_name.startswith("sim-") and checked.estimate_s is not None
                and bool(checked.program_sha256)
                and self.judging_answered(it) != (False, True))

    async def sweep_priced(self, it: int, code: str, checked: CompileChecked,
                           beat_s: float | None = None, *, before_default: bool = True,
                           ) -> TuningSwept:
        """The sweep that runs before any test: the default's price and program come from
        the compile check. `before_default`: the default is tested next if nothing passes,
        so the compile check's profile narrows the grid and one configuration is tested (a
        second would be a third run of the suite for a kernel wrong in every one)."""
        return await self.call(self.command(
            TuneKernel, f"it{it}/tune-priced", it, code_sha256=code, budget=self.cmd.tune_budget,
            verdict_sha256=(checked.verdict_sha256 or "") if before_default else "",
            tested_at_most=1 if before_default else None, beat_latency_s=beat_s,
            default_latency_s=checked.estimate_s,
            default_program_sha256=checked.program_sha256), TuningSwept)

    async def rescue(self, it: int, code: str, checked: CompileChecked, parent: float | None,
                     problem: str) -> Judgment | Rejection:
        """The default configuration is priced too slow; its others may not be. They are
        priced, and only one priced under the parent's latency is tested."""
        beat_s = judged.latency_to_beat(checked, parent, self.cmd.price_margin)
        rescued = (await self.sweep_priced(it, code, checked, beat_s, before_default=False)
                   if beat_s is not None else None)
        if (rescued is None or rescued.best_latency_s is None
                or rescued.best_latency_s >= (beat_s or 0.0)):
            tried = (f"; none of its {rescued.configs_priced} other configuration(s) "
                     "was priced or tested faster" if rescued is not None else "")
            return Rejection("price", problem + tried, {
                "cites_event_id": checked.event_id,
                "estimate_speedup": checked.estimate_speedup})
        return Judgment.of_sweep(rescued)
