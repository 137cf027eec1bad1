"""`profiler`: the executor's measurement -> the summary the next plan acts on.

Bound, utilisation, VMEM, per-operand traffic (the cost model's breakdown on a simulated
chip; XProf on a device), the top lever, and whether more iterations are worth it: a kernel
at >= AT_ROOFLINE of the bound resource's peak has nothing left to gain from tiling.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import msgspec

from agents.base import Agent, AgentContext
from agents.commands import ProfileKernel
from bus.registry import register
from bus.service import PermanentError
from eventstore.events import Event, ProfileCaptured
from tools import api
from tools.performance.profile import MODEL_CAVEAT

AT_ROOFLINE = 0.9


def worth_more(profile: dict[str, Any]) -> bool:
    bound = profile.get("bound")
    if bound == "memory":
        return float(profile.get("achieved_bandwidth_fraction") or 0.0) < AT_ROOFLINE
    if bound == "compute":
        return float(profile.get("achieved_compute_fraction") or 0.0) < AT_ROOFLINE
    return True


def top_lever(profile: dict[str, Any]) -> str:
    """The first suggestion that is a next step (a model caveat is not), else the bound's."""
    steps = [str(s) for s in profile.get("suggestions") or [] if MODEL_CAVEAT not in str(s)]
    if steps:
        return steps[0]
    return {"overhead": "larger blocks (fewer grid steps)",
            "memory": "fewer HBM bytes: fuse, avoid refetching, narrower dtypes",
            "compute": "MXU-friendly tiles (multiples of the MXU size), f32 accumulation"}.get(
                str(profile.get("bound")), "")


@register
class ProfilerAgent(Agent[ProfileKernel]):
    agent: ClassVar[str] = "profiler"
    commands: ClassVar[tuple[type, ...]] = (ProfileKernel,)
    produces: ClassVar[tuple[type[Event], ...]] = (ProfileCaptured,)

    async def _run(self, ctx: AgentContext[ProfileKernel]) -> AsyncIterator[Event]:
        started = time.perf_counter()
        cmd = ctx.cmd
        record = msgspec.json.decode(await ctx.get_text(cmd.verdict_sha256))
        if not record.get("measurement"):
            raise PermanentError("the verdict was never timed: nothing to profile")
        profile = await ctx.run_tool(api.profile_of, record["measurement"], record.get("compile_report"))
        summary = msgspec.to_builtins(profile)
        summary["worth_more"] = worth_more(summary)
        summary["top_lever"] = top_lever(summary)
        summary["rendered"] = api.render(profile)
        sha = await ctx.put_text(msgspec.json.encode(summary).decode(), "profile")
        yield self.event(
            ProfileCaptured, cmd, code_sha256=cmd.code_sha256, profile_sha256=sha,
            latency_s=profile.latency_s, measured_on=profile.measured_on, bound=profile.bound,
            speedup=profile.speedup, top_lever=summary["top_lever"], worth_more=summary["worth_more"],
            iteration=cmd.iteration, wall_s=time.perf_counter() - started)
