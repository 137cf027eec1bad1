"""What the LLM-facing agents tell a provider: the same facts as prompt text and as a dict.

Prompts hold no paths, ids or clock times, so the same state renders the same prompt (the
replay provider matches recorded answers by the prompt's hash).
"""

from __future__ import annotations

from typing import Any

import msgspec

from agents import knowledge
from agents.base import AgentContext
from tools import api


def chip_figures(target: str) -> dict[str, Any]:
    try:
        return api.chip_figures(target)
    except api.UnknownTarget:
        return {}


def render_chip(figures: dict[str, Any]) -> str:
    return "\n".join(f"- {k}: {v}" for k, v in sorted(figures.items())) or "(unknown)"


async def common(ctx: AgentContext[Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(context for the provider, fields for the prompt) shared by plan, implement and fix."""
    cmd: Any = ctx.cmd
    path = await ctx.task_path()
    figures = chip_figures(cmd.target_name)
    context = {"task_path": str(path), "task_name": path.stem, "target": cmd.target_name,
               "chip": figures, "iteration": cmd.iteration, "seed": cmd.seed}
    fields = {"task_name": path.stem, "target": cmd.target_name, "iteration": cmd.iteration,
              "task_source": path.read_text().strip(), "chip": render_chip(figures)}
    return context, fields


async def parent_of(ctx: AgentContext[Any], parent: dict[str, Any] | None) -> dict[str, Any] | None:
    """The parent kernel's code, plan, profile and config, fetched from their artifacts."""
    if not parent:
        return None
    out: dict[str, Any] = {"config": dict(parent.get("config") or {}),
                           "speedup": parent.get("speedup"),
                           "tuning": str(parent.get("tuning_summary") or "")}
    for key, sha_key in (("code", "code_sha256"), ("plan", "plan_sha256")):
        sha = parent.get(sha_key)
        out[key] = await ctx.get_text(sha) if sha else ""
    profile_sha = parent.get("profile_sha256")
    out["profile"] = msgspec.json.decode(await ctx.get_text(profile_sha)) if profile_sha else None
    return out


def render_parent(parent: dict[str, Any] | None) -> str:
    if not parent:
        return "(none yet: this is the first kernel of the trajectory)"
    profile = parent.get("profile") or {}
    lines = [f"Speedup so far: {parent.get('speedup')} (config {parent.get('config')})"]
    if profile:
        lines.append(f"Profile: bound={profile.get('bound')}, latency={profile.get('latency_s')} s, "
                     f"grid steps={profile.get('grid_steps')}, vmem={profile.get('vmem_bytes')} bytes")
        lines += [f"- {s}" for s in profile.get("suggestions", [])]
    if parent.get("tuning"):
        lines.append(f"Tuning: {parent['tuning']}")
    lines += ["", "```python", parent.get("code", "").strip(), "```"]
    if parent.get("plan"):
        lines += ["", "Its plan:", "", parent["plan"].strip()]
    return "\n".join(lines)


def render_failures(failures: list[dict[str, Any]]) -> str:
    if not failures:
        return "(none)"
    return "\n".join(f"- iteration {f.get('iteration')}, {f.get('phase')}: {f.get('error')}"
                     for f in failures)


def retrieve(ctx: AgentContext[Any], query: str, limit: int = 4) -> list[str]:
    """Snippets for a prompt; a store that cannot be searched is noted as a
    `KnowledgeUnavailable` event (the prompt then says nothing was retrieved)."""
    cmd: Any = ctx.cmd
    snippets, problem = knowledge.retrieve(query, limit=limit, cutoff_ts=cmd.knowledge_cutoff_ts)
    if problem is not None:
        ctx.note(knowledge.KnowledgeUnavailable,
                 **knowledge.unavailable_fields("retrieve", problem))
    return snippets
