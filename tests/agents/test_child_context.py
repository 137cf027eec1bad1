"""What a search tells a child session of the graph, on a real nats-server and log.

The issue's contract: a child's prompts carry its parent's code, plan, profile summary
and tuning summary, the failures on its path, its strategy hint, and nothing else of the
graph. The search runs root -> A, C (siblings), then A -> B; every trajectory is a
recording agent that fails its first iteration and succeeds on its second, storing real
artifacts, and renders the plan prompt the way the planner does (`agents.context`). What
reaches B must be A's best iteration and A's failure, never C's, nor A's first try.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import ClassVar

import msgspec
from instant_search import search

from agents.base import Agent, AgentContext, render_prompt
from agents.commands import ExpandNode
from agents.context import parent_of, render_failures, render_parent
from eventstore.events import (
    Event,
    ExpansionRequested,
    IterationFinished,
    NodeEvaluated,
    PlanProposed,
    ProfileCaptured,
    TuningSwept,
)
from projections.searchgraph import SearchGraph
from searchpolicies.base import Budget, Decision, Expand, SearchPolicy, Stop

B_HINT = "beta: fuse the two passes into one"
PARENT_KEYS = {"code_sha256", "plan_sha256", "profile_sha256", "config", "speedup",
               "plan_summary", "tuning_summary"}
SPEEDUP = {"alpha": 1.25, "gamma": 1.75, "beta": 1.5}  # C (gamma) is the best node
BLOCK = {"alpha": 256, "gamma": 512, "beta": 128}


class ThroughAPolicy(SearchPolicy):
    """Root -> A ("alpha") and C ("gamma"); once both are judged, A -> B; then Stop."""

    name: ClassVar[str] = "through-a"

    def propose(self, graph: SearchGraph, budget: Budget, decision: int) -> Sequence[Decision]:
        root = graph.root
        assert root is not None
        if not graph.children(root.node_id):
            return [Expand(root.node_id, "alpha", 2), Expand(root.node_id, "gamma", 2)]
        if graph.pending:
            return []
        a = next(n for n in graph.children(root.node_id) if n.strategy == "alpha")
        if not graph.children(a.node_id):
            return [Expand(a.node_id, B_HINT, 2)]
        return [Stop("B judged")]


class RecordingTrajectory(Agent[ExpandNode]):
    """Records each ExpandNode and the plan prompt a child would render from it; then one
    failed iteration and one valid one, with real artifacts, named after the node's hint."""

    agent: ClassVar[str] = "auto"
    commands: ClassVar[tuple[type, ...]] = (ExpandNode,)
    seen: ClassVar[dict[str, tuple[ExpandNode, str]]] = {}

    async def _run(self, ctx: AgentContext[ExpandNode]) -> AsyncIterator[Event]:
        cmd = ctx.cmd
        label = cmd.hint.split(":")[0]
        parent = await parent_of(ctx, dict(cmd.parent) if cmd.parent else None)
        failures = [dict(f) for f in cmd.failures]
        prompt = render_prompt(
            "plan", task_name="t", target="sim", iteration=1, task_source="", chip="",
            baseline="1 ms", measured_on="simulated", parent=render_parent(parent),
            failures=render_failures(failures), hint=cmd.hint or "(none)", feedback="(none)",
            knowledge="(nothing retrieved)")
        type(self).seen[label] = (cmd, prompt)

        first = await ctx.put_text(f"## Strategy\n{label} first try\n", "plan")
        yield self.event(PlanProposed, cmd, iteration=1, plan_sha256=first,
                         summary=f"{label} first try")
        yield self.event(IterationFinished, cmd, iteration=1, valid=False, compiled=False,
                         plan_sha256=first, failed_phase="compile",
                         error=f"{label} iteration 1: Mosaic cannot lower this")

        plan = await ctx.put_text(f"## Strategy\n{label} second plan\n\n{label} plan body\n", "plan")
        code = await ctx.put_text(f"def build(block_rows={BLOCK[label]}):  # {label} kernel\n"
                                  "    ...\n", "kernel")
        speedup, config = SPEEDUP[label], {"block_rows": BLOCK[label]}
        latency = 1e-3 / speedup
        profile = await ctx.put_text(json.dumps({
            "bound": f"{label}-bound", "latency_s": latency, "grid_steps": 8, "vmem_bytes": 4096,
            "suggestions": [f"{label} suggestion"]}), "profile")
        yield self.event(PlanProposed, cmd, iteration=2, plan_sha256=plan,
                         summary=f"{label} second plan")
        yield self.event(TuningSwept, cmd, iteration=2, code_sha256=code, configs_tried=3,
                         best_config=config, best_latency_s=latency, best_speedup=speedup)
        yield self.event(ProfileCaptured, cmd, iteration=2, code_sha256=code,
                         profile_sha256=profile, latency_s=latency, measured_on="simulated",
                         bound=f"{label}-bound", speedup=speedup)
        yield self.event(IterationFinished, cmd, iteration=2, valid=True, compiled=True,
                         code_sha256=code, plan_sha256=plan, latency_s=latency, speedup=speedup,
                         tunables=config)
        yield self.event(NodeEvaluated, cmd, valid=True, compiled=True, best_iteration=2,
                         iterations=2, code_sha256=code, plan_sha256=plan, latency_s=latency,
                         speedup=speedup, tunables=config, parent_id=cmd.parent_id,
                         strategy=cmd.hint)


def _of(events: list[Event], cls: type[Event], node_id: str, iteration: int) -> Event:
    (event,) = [e for e in events if isinstance(e, cls) and e.node_id == node_id
                and getattr(e, "iteration", None) == iteration]
    return event


async def test_a_child_is_told_its_parents_best_iteration_its_path_failures_and_its_hint_only(
        tmp_path: Path) -> None:
    RecordingTrajectory.seen.clear()
    events = await search(tmp_path, policy=f"{__name__}:ThroughAPolicy", trajectory=RecordingTrajectory)
    assert set(RecordingTrajectory.seen) == {"alpha", "gamma", "beta"}
    nodes = {e.strategy.split(":")[0]: e.node_id for e in events if isinstance(e, ExpansionRequested)}
    (a_eval,) = [e for e in events if isinstance(e, NodeEvaluated) and e.node_id == nodes["alpha"]]
    b_cmd, b_prompt = RecordingTrajectory.seen["beta"]

    # the command: A's best iteration (2), A's failure, the hint; nothing of C or of A's first try
    assert b_cmd.node_id == nodes["beta"] and b_cmd.parent_id == nodes["alpha"]
    assert b_cmd.hint == B_HINT
    parent = dict(b_cmd.parent or {})
    assert set(parent) == PARENT_KEYS
    profile = _of(events, ProfileCaptured, nodes["alpha"], 2)
    tuned = _of(events, TuningSwept, nodes["alpha"], 2)
    assert parent["code_sha256"] == a_eval.code_sha256 == tuned.code_sha256  # type: ignore[attr-defined]
    assert parent["plan_sha256"] == a_eval.plan_sha256 == _of(
        events, PlanProposed, nodes["alpha"], 2).plan_sha256  # type: ignore[attr-defined]
    assert parent["profile_sha256"] == profile.profile_sha256  # type: ignore[attr-defined]
    assert parent["config"] == {"block_rows": BLOCK["alpha"]}
    assert parent["speedup"] == SPEEDUP["alpha"]
    assert parent["plan_summary"] == "alpha second plan"
    assert "3 configuration(s) tried" in parent["tuning_summary"]
    assert f"'block_rows': {BLOCK['alpha']}" in parent["tuning_summary"]
    assert list(b_cmd.failures) == [{"iteration": "1 of ancestor 1", "phase": "compile",
                                     "error": "alpha iteration 1: Mosaic cannot lower this"}]
    everything = json.dumps([parent, list(b_cmd.failures), b_cmd.hint])
    for other in (nodes["gamma"], nodes["beta"], "gamma", "first try", "1.75"):
        assert other not in everything
    whole = msgspec.json.encode(b_cmd).decode()  # nor anywhere else in the command
    assert nodes["gamma"] not in whole and "gamma" not in whole and "1.75" not in whole

    # the root's children are told nothing of a parent, nor of each other
    for label in ("alpha", "gamma"):
        cmd, prompt = RecordingTrajectory.seen[label]
        assert cmd.parent is None and list(cmd.failures) == []
        assert "(none yet" in prompt and "iteration 1 of ancestor" not in prompt

    # the prompt B's planner renders: A's code, plan, profile, tuning, failure; nothing of C
    for fact in ("alpha kernel", "block_rows=256", "alpha second plan", "alpha plan body",
                 "bound=alpha-bound", "grid steps=8", "alpha suggestion",
                 "Tuning: 3 configuration(s) tried", "Speedup so far: 1.25",
                 "iteration 1 of ancestor 1, compile: alpha iteration 1: Mosaic cannot lower",
                 B_HINT):
        assert fact in b_prompt, fact
    for leak in ("gamma", "first try", "1.75", "512", *nodes.values()):
        assert leak not in b_prompt, leak
