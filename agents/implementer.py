"""`implementer`: turns a plan into a whole candidate file (`TUNABLES` + `build`)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import ClassVar

from agents.base import Agent, AgentContext, render_prompt
from agents.commands import WriteKernel
from agents.context import common, parent_of, render_failures, render_parent, retrieve
from agents.llm.parsing import extract_code
from bus.registry import register
from eventstore.events import Event, KernelWritten
from tools import api


@register
class ImplementerAgent(Agent[WriteKernel]):
    agent: ClassVar[str] = "implementer"
    commands: ClassVar[tuple[type, ...]] = (WriteKernel,)
    produces: ClassVar[tuple[type[Event], ...]] = (KernelWritten,)

    async def _run(self, ctx: AgentContext[WriteKernel]) -> AsyncIterator[Event]:
        started = time.perf_counter()
        cmd = ctx.cmd
        context, fields = await common(ctx)
        plan = await ctx.get_text(cmd.plan_sha256)
        parent = await parent_of(ctx, cmd.parent)
        snippets = await ctx.run_tool(retrieve, ctx, "pallas_call BlockSpec " + plan[:1500], 3)
        context.update(plan=plan, parent=parent, failures=list(cmd.failures), knowledge=snippets,
                       feedback=cmd.feedback)
        prompt = render_prompt(
            "implement", **fields, plan=plan.strip(), parent=render_parent(parent),
            failures=render_failures(list(cmd.failures)), feedback=cmd.feedback or "(none)",
            knowledge="\n\n".join(snippets) or "(nothing retrieved)")
        code, _ = await ctx.ask("implement", context, extract_code, prompt=prompt,
                                iteration=cmd.iteration)
        sha = await ctx.put_text(code, "kernel")
        try:
            tunables = await ctx.run_tool(api.read_tunables, await ctx.code_path(sha))
        except api.CandidateError:  # the compile check reports it with the file's line
            tunables = {}
        yield self.event(KernelWritten, cmd, code_sha256=sha, tunables=tunables,
                         iteration=cmd.iteration, wall_s=time.perf_counter() - started)
