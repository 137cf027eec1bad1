"""`executor`: owns one target and runs compile checks, tests and timings for it.

Executor commands travel on one subject per target (`kg.cmd.executor.<target>`, routed by
`target_name`), and every executor serving a target shares that target's durable consumer
(`agent_executor-<target>`): an executor bound by KG_EXECUTOR_TARGETS takes only its
targets' commands, one bound to none takes every known target's, and a command for a target
no running executor serves waits in the stream until one starts. A command that still
reaches an executor not serving its target (published by hand on another target's subject)
is refused for good, naming both: retrying it on the same subject would only reach the same
executors again. Each command names the run's frozen suite by its recipe; the executor
rebuilds it and proves the hash before judging anything on it. The verdict's summary,
measurement and compile report are stored as one artifact, which the profiler and the
autotuner read.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any, ClassVar

import msgspec

from agents.base import Agent, AgentContext
from agents.commands import CheckCompile, MeasureConfig, RunTests
from bus import subjects
from bus.connection import BusConfigError
from bus.registry import register
from bus.service import PermanentError
from eventstore.events import CompileChecked, ConfigMeasured, Event, TestsRun
from tools import api

EXECUTOR_TARGET_ENV = "KG_EXECUTOR_TARGETS"
"""Comma-separated targets this executor serves (empty: every known target). It takes only
those targets' commands, so a deployment binds executors to their hardware."""


def served_targets(targets: Iterable[str] | None = None,
                   env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The targets an executor is bound to: `targets`, else KG_EXECUTOR_TARGETS; () is any.

    A name that is no known target is refused at start: a typo would otherwise bind the
    executor to a subject nobody publishes on, and its commands would wait for ever.
    """
    if targets is None:
        raw = (os.environ if env is None else env).get(EXECUTOR_TARGET_ENV, "")
        targets = raw.split(",")
    names = tuple(dict.fromkeys(t.strip() for t in targets if t.strip()))
    unknown = [t for t in names if t not in api.TARGETS]
    if unknown:
        raise BusConfigError(f"{EXECUTOR_TARGET_ENV} names unknown target(s) {', '.join(unknown)}; "
                             f"known: {', '.join(api.TARGETS)}")
    return names


def unserved_problem(target: str) -> str | None:
    """Why this process's own executor would never take `target`'s commands (None: it
    would): the embedded runtime refuses such a run up front instead of waiting for ever."""
    served = served_targets()
    if not served or target in served:
        return None
    return (f"{EXECUTOR_TARGET_ENV}={','.join(served)} binds this process's executor to other "
            f"targets than {target}; its commands would wait for an executor that never comes "
            f"(unset {EXECUTOR_TARGET_ENV}, add {target} to it, or use --nats with an executor "
            "that serves it)")


def verdict_record(verdict: api.Verdict) -> dict[str, Any]:
    """What later phases need of a verdict, as plain data."""
    return {**verdict.summary(),
            "measurement": msgspec.to_builtins(verdict.measurement),
            "compile_report": msgspec.to_builtins(verdict.compile_report)}


async def stored_record(ctx: AgentContext[Any], verdict: api.Verdict) -> str:
    """The verdict's record, stored as an artifact; its sha256."""
    return await ctx.put_text(msgspec.json.encode(verdict_record(verdict)).decode(), "verdict")


_BOX_PATH = re.compile(r"(?:/[^\s/:'\"]+)*/kg-sandbox-[^\s/:'\"]+/")


def unboxed(text: str) -> str:
    """A message without the sandbox's temporary directory: "candidate.py:12", the same on every
    run, so prompts built from it are the same too (replay matches them by hash)."""
    return _BOX_PATH.sub("", text)


def diagnostics_of(verdict: api.Verdict) -> list[dict[str, Any]]:
    found = [msgspec.to_builtins(d) for d in verdict.diagnostics]
    if not found:
        found = [{"message": reason, "phase": "verify"} for reason in verdict.reasons]
    return [{k: unboxed(v) if isinstance(v, str) else v for k, v in d.items()} for d in found]


def error_stats(verdict: api.Verdict) -> tuple[int, float | None, float | None]:
    failed = sum(1 for c in verdict.cases if not c.passed)
    max_abs = [o.max_abs for c in verdict.cases for o in c.outputs if o.max_abs is not None]
    mean_abs = [o.mean_abs for c in verdict.cases for o in c.outputs
                if getattr(o, "mean_abs", None) is not None]
    return failed, (max(max_abs) if max_abs else None), (max(mean_abs) if mean_abs else None)


@register
class ExecutorAgent(Agent[Any]):
    agent: ClassVar[str] = "executor"
    commands: ClassVar[tuple[type, ...]] = (CheckCompile, RunTests, MeasureConfig)
    produces: ClassVar[tuple[type[Event], ...]] = (CompileChecked, TestsRun, ConfigMeasured)

    def __init__(self, *args: Any, targets: Iterable[str] | None = None, **kwargs: Any) -> None:
        """`targets`: the targets served (None: KG_EXECUTOR_TARGETS; empty: every known one)."""
        super().__init__(*args, **kwargs)
        self.targets = served_targets(targets)

    def routes(self) -> Sequence[str | None]:
        """One route (and durable consumer) per served target; every known one when unbound."""
        return self.targets or api.TARGETS

    def check_served(self, cmd: Any) -> None:
        """Refuse a command for a target this executor does not serve (see the module docstring)."""
        if self.targets and cmd.target_name not in self.targets:
            raise PermanentError(
                f"{cmd.type_name} for target {cmd.target_name!r} reached an executor serving only "
                f"{', '.join(self.targets)}; it belongs on {subjects.command_subject(self.agent, cmd.target_name)}")

    async def _run(self, ctx: AgentContext[Any]) -> AsyncIterator[Event]:
        started = time.perf_counter()
        cmd = ctx.cmd
        self.check_served(cmd)
        task = await ctx.task_path()
        code = await ctx.code_path(cmd.code_sha256)
        suite = await ctx.suite(cmd.recipe_sha256)
        config = dict(cmd.config)
        try:
            if isinstance(cmd, CheckCompile):
                verdict = await ctx.run_tool(api.compile_check, task, code, config=config,
                                             target=cmd.target_name, suite=suite)
            else:
                verdict = await ctx.run_tool(api.evaluate, task, code, config=config,
                                             target=cmd.target_name, suite=suite)
        except (api.TaskError, api.TargetUnavailable, api.UnknownTarget) as exc:
            raise PermanentError(f"{type(exc).__name__}: {exc}") from exc
        except ValueError as exc:  # a config the candidate's build() does not take
            verdict = None
            problem = f"{type(exc).__name__}: {exc}"
        wall_s = time.perf_counter() - started
        if verdict is None:
            yield self._refused(cmd, problem, wall_s)
            return
        if isinstance(cmd, CheckCompile):
            report = verdict.compile_report
            vmem = max((k.vmem_bytes for k in report.kernels), default=None) if report else None
            ok = api.compiled(verdict)
            priced = verdict.measurement if ok and verdict.measured_on == "simulated" else None
            record = await stored_record(ctx, verdict) if priced else None
            yield self.event(CompileChecked, cmd, code_sha256=cmd.code_sha256, ok=ok,
                             attempt=cmd.attempt, diagnostics=[] if ok else diagnostics_of(verdict),
                             vmem_bytes=vmem, iteration=cmd.iteration, wall_s=wall_s,
                             estimate_s=priced.latency_s if priced else None,
                             estimate_speedup=priced.speedup if priced else None,
                             program_sha256=priced.breakdown.get("program_sha256")
                             if priced else None, verdict_sha256=record)
            return
        record_sha = await stored_record(ctx, verdict)
        measurement = verdict.measurement
        timing = {"latency_s": None if measurement is None else measurement.latency_s,
                  "speedup": verdict.speedup, "measured_on": verdict.measured_on}
        if isinstance(cmd, MeasureConfig):
            yield self.event(ConfigMeasured, cmd, code_sha256=cmd.code_sha256,
                             config=dict(verdict.config),
                             passed=verdict.passed, verdict_sha256=record_sha,
                             reasons=[unboxed(r) for r in verdict.reasons[:8]], iteration=cmd.iteration, wall_s=wall_s,
                             **timing)
            return
        failed, max_abs, mean_abs = error_stats(verdict)
        yield self.event(TestsRun, cmd, code_sha256=cmd.code_sha256, suite_sha256=suite.sha256,
                         passed=verdict.passed, n_cases=len(verdict.cases), n_failed=failed,
                         max_abs_err=max_abs, mean_abs_err=mean_abs, reasons=[unboxed(r) for r in verdict.reasons[:8]],
                         verdict_sha256=record_sha, config=dict(verdict.config),
                         iteration=cmd.iteration,
                         wall_s=wall_s, **timing)

    def _refused(self, cmd: Any, problem: str, wall_s: float) -> Event:
        if isinstance(cmd, CheckCompile):
            return self.event(CompileChecked, cmd, code_sha256=cmd.code_sha256, ok=False,
                              attempt=cmd.attempt, diagnostics=[{"message": problem}],
                              iteration=cmd.iteration, wall_s=wall_s)
        if isinstance(cmd, MeasureConfig):
            return self.event(ConfigMeasured, cmd, code_sha256=cmd.code_sha256,
                              config=dict(cmd.config), passed=False, reasons=[problem],
                              iteration=cmd.iteration, wall_s=wall_s)
        return self.event(TestsRun, cmd, code_sha256=cmd.code_sha256, suite_sha256="",
                          passed=False, n_cases=0, reasons=[problem], config=dict(cmd.config),
                          iteration=cmd.iteration, wall_s=wall_s)
