"""`fixer`: compile or test diagnostics -> a corrected candidate, one round per command.

Each round's "error / cause / fix" summary is kept by the orchestrator and shown to the
next round; from the second round on the prompt also carries a JAX API lookup (signatures,
docstrings, "did you mean") for the names the diagnostics mention.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import ClassVar

from agents.apilookup import lookup
from agents.base import Agent, AgentContext, render_prompt
from agents.commands import FixKernel
from agents.context import common
from agents.llm.parsing import extract_code, fix_summary
from bus.registry import register
from eventstore.events import Event, FixAttempted


def render_diagnostics(diagnostics: list[dict[str, object]]) -> str:
    lines = []
    for d in diagnostics:
        where = f" (line {d['line']})" if d.get("line") else ""
        hint = f"\n  hint: {d['hint']}" if d.get("hint") else ""
        lines.append(f"- [{d.get('phase', 'compile')}]{where} {d.get('message', '')}{hint}")
    return "\n".join(lines) or "(no diagnostics)"


def render_history(history: list[dict[str, object]]) -> str:
    return "\n".join(f"- round {h.get('round')}: error: {h.get('error')}; cause: {h.get('cause')}; "
                     f"fix: {h.get('fix')}" for h in history) or "(first round)"


@register
class FixerAgent(Agent[FixKernel]):
    agent: ClassVar[str] = "fixer"
    commands: ClassVar[tuple[type, ...]] = (FixKernel,)
    produces: ClassVar[tuple[type[Event], ...]] = (FixAttempted,)

    async def _run(self, ctx: AgentContext[FixKernel]) -> AsyncIterator[Event]:
        started = time.perf_counter()
        cmd = ctx.cmd
        context, fields = await common(ctx)
        code = await ctx.get_text(cmd.code_sha256)
        diagnostics = render_diagnostics(list(cmd.diagnostics))
        api_facts = (await ctx.run_tool(lookup, code, diagnostics)) if cmd.round >= 2 else "(from round 2)"
        context.update(code=code, diagnostics=list(cmd.diagnostics), history=list(cmd.history),
                       round=cmd.round, api_lookup=api_facts)
        prompt = render_prompt("fix", **fields, round=cmd.round, code=code.strip(),
                               diagnostics=diagnostics, history=render_history(list(cmd.history)),
                               api_lookup=api_facts)

        def parse(text: str) -> tuple[str, dict[str, str]]:
            return extract_code(text), fix_summary(text)

        (fixed, summary), _ = await ctx.ask("fix", context, parse, prompt=prompt,
                                            iteration=cmd.iteration)
        sha = await ctx.put_text(fixed, "kernel")
        first = cmd.diagnostics[0].get("message", "") if cmd.diagnostics else ""
        yield self.event(
            FixAttempted, cmd, attempt=cmd.round, code_sha256=sha,
            error=summary.get("error") or str(first)[:500], cause=summary.get("cause", ""),
            fix=summary.get("fix", ""), parent_code_sha256=cmd.code_sha256,
            iteration=cmd.iteration, wall_s=time.perf_counter() - started)
