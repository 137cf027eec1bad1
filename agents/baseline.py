"""`baseline`: the XLA reference on the run's target, the denominator of every speedup.

On a simulated target the event says which program was priced (`priced_from`: XLA:TPU's, or
the host's with the reason in `method`), as the verifier's receipts do."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import ClassVar

from agents.base import Agent, AgentContext
from agents.commands import MeasureBaseline
from bus.registry import register
from bus.service import PermanentError
from eventstore.events import BaselineMeasured, Event
from tools import api


@register
class BaselineAgent(Agent[MeasureBaseline]):
    agent: ClassVar[str] = "baseline"
    commands: ClassVar[tuple[type, ...]] = (MeasureBaseline,)
    produces: ClassVar[tuple[type[Event], ...]] = (BaselineMeasured,)

    async def _run(self, ctx: AgentContext[MeasureBaseline]) -> AsyncIterator[Event]:
        started = time.perf_counter()
        path = await ctx.task_path()
        try:
            baseline = await ctx.run_tool(api.measure_baseline, path, target=ctx.cmd.target_name)
        except (api.TaskError, api.TargetUnavailable, api.UnknownTarget) as exc:
            raise PermanentError(f"{type(exc).__name__}: {exc}") from exc
        yield self.event(
            BaselineMeasured, ctx.cmd, latency_s=baseline.latency_s,
            measured_on=baseline.measured_on, target=baseline.target, method=baseline.method,
            priced_from=baseline.priced_from, wall_s=time.perf_counter() - started)
