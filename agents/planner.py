"""`planner`: writes the optimisation plan the implementer follows.

From the task, the chip's figures, the parent kernel (code, plan, profile, tuned config),
the failures so far in this trajectory, a strategy hint, human feedback, retrieved
knowledge and the plans other nodes of the run already wrote kernels from. A plan that concludes, with evidence, that no kernel will pay off is a recorded
result (`PlanProposed.no_gain`), not a failure.
"""

from __future__ import annotations

import re
import textwrap
import time
from collections.abc import AsyncIterator
from typing import Any, ClassVar

from agents.base import Agent, AgentContext, render_prompt
from agents.commands import ProposePlan
from agents.context import common, parent_of, render_failures, render_parent, retrieve
from agents.llm.base import NO_GAIN_MARKER
from agents.llm.parsing import check_plan, next_levers
from bus.registry import register
from eventstore.events import Event, PlanProposed
from searchpolicies.levers import catalogue


def plan_summary(plan: str) -> str:
    """The first sentence of the Strategy section (for tables and progress lines)."""
    match = re.search(r"^##\s*Strategy\s*\n+(.+?)(?:\n|$)", plan, re.M)
    line = match.group(1).strip() if match else plan.strip().splitlines()[0]
    return textwrap.shorten(line, 200, placeholder=" ...")  # at a word: it is read


@register
class PlannerAgent(Agent[ProposePlan]):
    agent: ClassVar[str] = "planner"
    commands: ClassVar[tuple[type, ...]] = (ProposePlan,)
    produces: ClassVar[tuple[type[Event], ...]] = (PlanProposed,)

    async def _run(self, ctx: AgentContext[ProposePlan]) -> AsyncIterator[Event]:
        started = time.perf_counter()
        cmd = ctx.cmd
        context, fields = await common(ctx)
        parent = await parent_of(ctx, cmd.parent)
        profile = (parent or {}).get("profile") or {}
        query = " ".join([fields["task_name"], cmd.hint, str(profile.get("bound", "")),
                          *profile.get("suggestions", []), fields["task_source"][:2000]])
        snippets = await ctx.run_tool(retrieve, ctx, query)
        baseline = f"{cmd.baseline_s:.4g} s" if cmd.baseline_s else "(not measured)"
        written = {sha: await ctx.get_text(sha) for sha in dict.fromkeys(cmd.written_plans)}
        context.update(parent=parent, failures=await _with_plans(ctx, cmd.failures, written),
                       hint=cmd.hint, knowledge=snippets, baseline_s=cmd.baseline_s,
                       feedback=cmd.feedback, written_plans=list(written.values()))
        if cmd.unseen_siblings:
            context.update(unseen_siblings=cmd.unseen_siblings)
        prompt = render_prompt(
            "plan", **fields, baseline=baseline, measured_on="simulated" if cmd.target_name.startswith(
                "sim-") else "measured", parent=render_parent(parent),
            failures=render_failures(list(cmd.failures)), hint=cmd.hint or "(none)",
            feedback=cmd.feedback or "(none)",
            knowledge="\n\n".join(snippets) or "(nothing retrieved)")
        plan, _ = await ctx.ask("plan", context, check_plan, prompt=prompt, iteration=cmd.iteration)
        sha = await ctx.put_text(plan, "plan")
        yield self.event(PlanProposed, cmd, plan_sha256=sha, summary=plan_summary(plan),
                         no_gain=NO_GAIN_MARKER in plan, iteration=cmd.iteration,
                         next_levers=next_levers(plan, (lv.id for lv in catalogue())),
                         wall_s=time.perf_counter() - started)


async def _with_plans(ctx: AgentContext[ProposePlan], failures: list[Any],
                      known: dict[str, str]) -> list[Any]:
    """The failures, each priced-not-faster or wrong-answer one with the plan of the kernel
    that failed (from `known`, the plans already read, when there): a planner can then put
    last the kernels made of that one's changes alone, or carrying all of its changes."""
    out = []
    for failure in failures:
        sha = failure.get("plan_sha256") if isinstance(failure, dict) else None
        if isinstance(sha, str) and failure.get("phase") in ("price", "test"):
            failure = {**failure, "plan": known.get(sha) or await ctx.get_text(sha)}
        out.append(failure)
    return out
