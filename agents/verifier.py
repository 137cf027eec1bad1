"""`verifier`: re-checks a claimed winner from scratch, in a process that did not author it.

It takes the run's frozen suite (rebuilt from the recipe, proving the hash, unless this
process froze or rebuilt it already), runs the whole evaluator in a fresh sandboxed child,
and publishes the self-hashed receipt as an artifact.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import ClassVar

from agents.base import Agent, AgentContext
from agents.commands import VerifyWinner
from bus.registry import register
from bus.service import PermanentError
from eventstore.events import Event, WinnerVerified
from tools import api


@register
class VerifierAgent(Agent[VerifyWinner]):
    agent: ClassVar[str] = "verifier"
    commands: ClassVar[tuple[type, ...]] = (VerifyWinner,)
    produces: ClassVar[tuple[type[Event], ...]] = (WinnerVerified,)

    async def _run(self, ctx: AgentContext[VerifyWinner]) -> AsyncIterator[Event]:
        started = time.perf_counter()
        cmd = ctx.cmd
        task = await ctx.task_path()
        code = await ctx.code_path(cmd.code_sha256)
        suite = await ctx.suite(cmd.recipe_sha256)
        try:
            verdict = await ctx.run_tool(api.evaluate, task, code, config=dict(cmd.config),
                                         target=cmd.target_name, suite=suite)
        except (api.TaskError, api.TargetUnavailable, api.UnknownTarget) as exc:
            raise PermanentError(f"{type(exc).__name__}: {exc}") from exc
        receipt_sha = await ctx.put_text(api.receipt_json(verdict.receipt), "receipt")
        yield self.event(
            WinnerVerified, cmd, verdict="pass" if verdict.passed else "fail",
            receipt_sha256=receipt_sha, speedup=verdict.speedup,
            measured_on=verdict.measured_on or "simulated", reasons=verdict.reasons[:8],
            wall_s=time.perf_counter() - started)
