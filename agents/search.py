"""`search`: the search orchestrator, a policy expanding a graph of Auto trajectories.

The run's state is its event history, as for Auto (`agents.calls`):

1. Preparation: the suite and the baseline (the same steps as a single trajectory).
2. The policy decides from the `SearchGraph` folded from the history. Each answer is
   recorded as one `PolicyDecided` (with how many events the graph was folded from, so the
   decision can be recomputed from the log), then one `ExpansionRequested` per new node,
   then one `ExpandNode` command per node, at most `concurrency` at a time. The policy is
   asked again each time a node is evaluated, until it says Stop.
3. The best node is re-verified, the run is audited, and `RunFinished` ends it.

Killed at any point and started again (the same `StartSearch`, redelivered or resent by
`kernelgraph resume`), the orchestrator re-yields the decisions already recorded (same
contents, so the same event ids: the log keeps them once), re-sends the expansions not yet
evaluated (same command ids: an evaluated one is answered from history) and only then
asks the policy for new decisions. Node ids derive from the decision, so no node is
requested twice.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, ClassVar

from agents.auto import FATAL_ERRORS, RunAborted, _AutoRun
from agents.base import Agent, AgentContext
from agents.calls import CommandFailed, RunHistory, step_id
from agents.commands import ExpandNode, StartSearch
from agents.steps import StepOrigin, step_command
from bus.codec import derived_event_id
from bus.registry import register
from eventstore.events import (
    Event,
    ExpansionRequested,
    IterationFinished,
    LlmCalled,
    NodeEvaluated,
    PlanProposed,
    PolicyDecided,
    ProfileCaptured,
    RunFinished,
    SearchStopped,
    TuningSwept,
)
from projections.searchgraph import SearchGraph
from searchpolicies.base import Budget, Expand, SearchPolicy, Stop
from searchpolicies.errors import PolicyError
from searchpolicies.registry import policy_class

log = logging.getLogger("kernelgraph.agents")

AUDIT_INTERVAL_ENV = "KG_AUDIT_INTERVAL_S"
"""Seconds between interim audits of a running search (default 300; 0 turns them off)."""
MAX_PATH_FAILURES = 8
BARREN_NODES = 6
"""Evaluated nodes in a row that wrote no kernel after which a search stops (`barren_stop`)."""


def audit_interval_s() -> float:
    return float(os.environ.get(AUDIT_INTERVAL_ENV, "300"))


def build_policy(cmd: StartSearch) -> SearchPolicy:
    return policy_class(cmd.policy)(seed=cmd.seed, **dict(cmd.policy_params))


def budget_of(cmd: StartSearch, history: list[Event], *, now: float) -> Budget:
    """The search's limits and what the history says is used; pending nodes count the
    iterations they were given, evaluated ones the iterations they ran that wrote a kernel
    (a plan that wrote none costs no candidate)."""
    requested = {e.node_id: e.iterations for e in history
                 if isinstance(e, ExpansionRequested) and e.node_id}
    ran = {e.node_id: e.iterations - e.no_gain_plans for e in history
           if isinstance(e, NodeEvaluated) and e.node_id}
    candidates = sum(ran.get(node, wanted) for node, wanted in requested.items())
    tokens = sum(e.tokens_in + e.tokens_out for e in history if isinstance(e, LlmCalled))
    return Budget(max_nodes=cmd.max_nodes, max_candidates=cmd.max_candidates,
                  max_depth=cmd.max_depth, target_speedup=cmd.target_speedup,
                  max_wall_s=cmd.max_wall_s, max_tokens=cmd.max_tokens,
                  nodes_used=len(requested), candidates_used=candidates,
                  wall_used_s=max(0.0, now - cmd.ts), tokens_used=tokens)


def barren_stop(history: list[Event], *, concurrency: int) -> str | None:
    """Why the search must stop because the author keeps writing nothing, or None.

    A plan that writes no kernel costs no candidate, so a candidate budget alone would let a
    policy expand nodes whose space is exhausted for ever. After `BARREN_NODES` (at least
    twice the expansions running at once) evaluated nodes in a row wrote no kernel, the
    space this run can reach is taken as exhausted."""
    limit = max(BARREN_NODES, 2 * concurrency)
    streak = 0
    for e in reversed(history):
        if not isinstance(e, NodeEvaluated):
            continue
        if e.iterations == 0 or e.no_gain_plans < e.iterations:
            break
        streak += 1
        if streak >= limit:
            return (f"the author wrote no kernel in the last {limit} nodes: every plan said no "
                    "kernel pays off or that its space from the parent is exhausted")
    return None


def fold(run_id: str, events: list[Event]) -> SearchGraph:
    return SearchGraph(run_id).apply_all(events)


@dataclass(frozen=True)
class NodeOrder:
    """One expansion the orchestrator owes: its node and the request that created it."""

    node_id: str
    parent_id: str
    strategy: str
    iterations: int
    ordinal: int


@register
class SearchOrchestrator(Agent[StartSearch]):
    agent: ClassVar[str] = "search"
    commands: ClassVar[tuple[type, ...]] = (StartSearch,)
    produces: ClassVar[tuple[type[Event], ...]] = (PolicyDecided, ExpansionRequested,
                                                   SearchStopped, RunFinished)

    async def _run(self, ctx: AgentContext[StartSearch]) -> AsyncIterator[Event]:
        async with RunHistory(self.nc, ctx.cmd.run_id) as history:
            run = _SearchRun(self, ctx.cmd, history)
            try:
                async for event in run.search():
                    yield event
            finally:  # stopped part way (a drain, a crash): stop waiting for the nodes
                await run.cancel_running()


class _SearchRun(_AutoRun):
    """One search; every event it yields is named by what it is (`named`), because the order
    in which nodes end, and so the order of its events, differs from one run to the next."""

    def __init__(self, agent: Agent[Any], cmd: StartSearch, history: RunHistory) -> None:
        super().__init__(agent, cmd, history)
        self.search_cmd = cmd
        self.root_id = cmd.node_id or ""
        self.node_id = self.root_id
        self.orders: dict[str, NodeOrder] = {}
        self.running: dict[str, asyncio.Task[Event]] = {}
        self.waiting: list[NodeOrder] = []

    def named(self, key: str) -> str:
        cmd = self.search_cmd
        return derived_event_id(f"{cmd.command_id}/{key}", 0, fallback_ms=int(cmd.ts * 1000))

    def ending_id(self) -> str:
        return self.named("finished")

    # --- the search -------------------------------------------------------------------------

    async def search(self) -> AsyncIterator[Event]:
        cmd = self.search_cmd
        try:
            policy = build_policy(cmd)
        except PolicyError as exc:
            yield self.agent.event(RunFinished, cmd, status="failed", reason=str(exc),
                                   event_id=self.ending_id())
            return
        problem = await self.prepare()
        if problem:
            yield self.agent.event(RunFinished, cmd, status="failed", reason=problem,
                                   event_id=self.ending_id())
            return
        stop_reason: str | None = None
        decision = 0
        recorded = sorted(self.history.of_type(PolicyDecided), key=lambda e: e.decision)
        for past in recorded:  # a restarted search re-yields what it decided before
            async for event in self.publish(past):
                yield event
            stop_reason = past.stop or stop_reason
            decision = past.decision + 1
        next_audit = time.monotonic() + audit_interval_s()
        try:
            while stop_reason is None:
                await self.settled()
                seen = len(self.history.events)
                graph = fold(cmd.run_id, self.history.events[:seen])
                budget = budget_of(cmd, self.history.events[:seen], now=time.time())
                barren = barren_stop(self.history.events[:seen], concurrency=cmd.concurrency)
                if barren is not None:
                    stop_reason = barren
                    break
                decisions = policy.decide(graph, budget, decision)
                if decisions:
                    decided = self.decided(policy, graph, budget, decision, seen, decisions)
                    decision += 1
                    async for event in self.publish(decided):
                        yield event
                    if decided.stop:
                        stop_reason = decided.stop
                        break
                if not self.running and not self.waiting:
                    if not decisions:
                        stop_reason = f"{policy.name}: no decision and nothing pending"
                    continue
                wait = max(1.0, next_audit - time.monotonic()) if audit_interval_s() > 0 else None
                for event in await self.next_evaluated(timeout=wait):
                    yield event
                if audit_interval_s() > 0 and time.monotonic() >= next_audit:
                    finding = await self.audit(key=f"audit/{decision}", final=False)
                    if finding:
                        stop_reason = f"stopped by an interim audit: {finding}"
                    next_audit = time.monotonic() + audit_interval_s()
        except RunAborted as exc:
            await self.cancel_running()
            yield self.agent.event(RunFinished, cmd, status="failed", reason=exc.reason,
                                   event_id=self.ending_id())
            return
        except PolicyError as exc:
            stop_reason = f"the policy failed: {exc}"
        if not any(isinstance(e, SearchStopped) for e in self.history.events):
            yield self.agent.event(SearchStopped, cmd, node_id=self.root_id, policy=policy.name,
                                   reason=stop_reason, event_id=self.named("stopped"))
        try:
            while self.running or self.waiting:
                for event in await self.next_evaluated(timeout=None):
                    yield event
        except RunAborted as exc:
            await self.cancel_running()
            yield self.agent.event(RunFinished, cmd, status="failed", reason=exc.reason,
                                   event_id=self.ending_id())
            return
        graph = fold(cmd.run_id, self.history.events)
        best = graph.best
        evaluated = self.evaluated_event(best.node_id) if best is not None else None
        nodes = len(graph.nodes) - 1
        async for event in self.finish(evaluated, f"no valid kernel in {nodes} node(s); "
                                                  f"the search stopped: {stop_reason}"):
            yield event

    def decided(self, policy: SearchPolicy, graph: SearchGraph, budget: Budget, decision: int,
                seen: int, decisions: list[Expand | Stop]) -> PolicyDecided:
        cmd = self.search_cmd
        expansions = []
        for index, d in enumerate(x for x in decisions if isinstance(x, Expand)):
            node_id = derived_event_id(f"{cmd.command_id}/decision{decision}/{index}", 0,
                                       fallback_ms=int(cmd.ts * 1000))
            expansions.append({"node_id": node_id, "parent_id": d.parent_id,
                               "strategy": d.strategy, "iterations": d.iterations})
        stop = next((d.reason for d in decisions if isinstance(d, Stop)), None)
        log.info("search %s: decision %d on %d node(s): %d expansion(s)%s", cmd.run_id,
                 decision, len(graph.nodes), len(expansions), f", stop: {stop}" if stop else "")
        return self.agent.event(PolicyDecided, cmd, node_id=self.root_id, policy=policy.name,
                                decision=decision, seen_events=seen, expansions=expansions,
                                stop=stop, budget=dataclasses.asdict(budget),
                                event_id=self.named(f"decision{decision}"))

    async def publish(self, decided: PolicyDecided) -> AsyncIterator[Event]:
        """Yield the decision and its node requests, then start (or queue) the expansions."""
        yield decided
        cmd = self.search_cmd
        for spec in decided.expansions:
            node_id = str(spec["node_id"])
            order = NodeOrder(node_id=node_id, parent_id=str(spec["parent_id"]),
                              strategy=str(spec.get("strategy") or ""),
                              iterations=int(spec.get("iterations") or 1),
                              ordinal=len(self.orders) + 1)
            self.orders[node_id] = order
            yield self.agent.event(ExpansionRequested, cmd, node_id=node_id,
                                   parent_id=order.parent_id, policy=decided.policy,
                                   strategy=order.strategy, iterations=order.iterations,
                                   decision=decided.decision, event_id=self.named(f"node/{node_id}"))
            if not self.evaluated_event(node_id):
                self.waiting.append(order)
        await self.history.wait_until(lambda: all(
            any(isinstance(e, ExpansionRequested) and e.node_id == n for e in self.history.events)
            for n in (str(s["node_id"]) for s in decided.expansions)))
        self.start_waiting()

    # --- running expansions -----------------------------------------------------------------

    def start_waiting(self) -> None:
        while self.waiting and len(self.running) < max(1, self.search_cmd.concurrency):
            order = self.waiting.pop(0)
            command = self.expand_command(order)
            self.running[order.node_id] = asyncio.create_task(
                self.history.call(command, NodeEvaluated), name=f"node-{order.node_id}")

    async def next_evaluated(self, timeout: float | None) -> list[Event]:
        """Wait for one running expansion to end (or the timeout), then start queued ones.

        An expansion whose agent gave up is judged invalid here (`NodeEvaluated`), so the
        graph never waits on it; a fatal failure (no provider, no target) ends the run."""
        failed_nodes: list[Event] = []
        if not self.running:
            self.start_waiting()
            return failed_nodes
        done, _ = await asyncio.wait(self.running.values(), timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
        for node_id, task in list(self.running.items()):
            if task not in done:
                continue
            del self.running[node_id]
            try:
                task.result()
            except CommandFailed as failed:
                error = failed.failure.error
                if any(marker in error for marker in FATAL_ERRORS):
                    raise RunAborted(f"node {node_id}: {error}") from failed
                log.warning("search %s: node %s failed: %s", self.cmd.run_id, node_id, error)
                order = self.orders[node_id]
                failed_nodes.append(self.agent.event(
                    NodeEvaluated, self.search_cmd, node_id=node_id, parent_id=order.parent_id,
                    valid=False, compiled=False, strategy=order.strategy,
                    event_id=self.named(f"node/{node_id}/failed")))
        self.start_waiting()
        return failed_nodes

    async def settled(self) -> None:
        """Until every expansion that is no longer running has its NodeEvaluated in the
        history (the policy must see the graph as it is, never a node stuck pending)."""
        def evaluated() -> bool:
            done = {e.node_id for e in self.history.events if isinstance(e, NodeEvaluated)}
            queued = {o.node_id for o in self.waiting}
            return all(n in done for n in self.orders if n not in self.running and n not in queued)

        await self.history.wait_until(evaluated)

    async def cancel_running(self) -> None:
        for task in self.running.values():
            task.cancel()
        await asyncio.gather(*self.running.values(), return_exceptions=True)
        self.running.clear()

    def expand_command(self, order: NodeOrder) -> ExpandNode:
        cmd = self.search_cmd
        parent, failures = self.child_context(order.parent_id)
        return step_command(
            StepOrigin.of(cmd), ExpandNode, step_id(cmd, f"node/{order.node_id}"),
            node_id=order.node_id, task_sha256=self.task_sha256, recipe_sha256=self.recipe_sha256,
            task_name=cmd.task_name, iterations=order.iterations, fix_rounds=cmd.fix_rounds,
            seed=cmd.seed * 1000 + order.ordinal, tune_budget=cmd.tune_budget, hint=order.strategy,
            parent_id=order.parent_id, parent=parent, failures=failures, baseline_s=self.baseline_s,
            price_margin=cmd.price_margin)

    # --- what a child sees ------------------------------------------------------------------

    def evaluated_event(self, node_id: str) -> NodeEvaluated | None:
        for event in self.history.events:
            if isinstance(event, NodeEvaluated) and event.node_id == node_id:
                return event
        return None

    def child_context(self, parent_id: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """The parent's code, plan, profile and tuning summaries, and the failures on the
        path to it: all a child session is told of the graph."""
        graph = fold(self.cmd.run_id, self.history.events)
        if parent_id not in graph.state.nodes:
            return None, []
        path = [n for n in graph.path_to(parent_id) if n.parent_id is not None]
        failures: list[dict[str, Any]] = []
        for depth, node in enumerate(path, start=1):
            for event in self.history.events:
                if (isinstance(event, IterationFinished) and event.node_id == node.node_id
                        and not event.valid and event.failed_phase):
                    failures.append({"iteration": f"{event.iteration} of ancestor {depth}",
                                     "phase": event.failed_phase, "error": event.error[:600]})
        failures = failures[-MAX_PATH_FAILURES:]
        best = self.evaluated_event(parent_id)
        if best is None or not best.valid or best.code_sha256 is None:
            return None, failures
        parent: dict[str, Any] = {"code_sha256": best.code_sha256, "plan_sha256": best.plan_sha256,
                                  "config": dict(best.tunables), "speedup": best.speedup}
        judged_at = {(parent_id, best.best_iteration)}
        for event in self.history.events:  # a cited judgment's profile and sweep are its own
            if (isinstance(event, IterationFinished) and event.node_id == parent_id
                    and event.iteration == best.best_iteration and event.cites_event_id):
                judged_at |= {(e.node_id, e.iteration) for e in self.history.events
                              if isinstance(e, IterationFinished)
                              and e.event_id == event.cites_event_id}
        for event in self.history.events:
            if (event.node_id, getattr(event, "iteration", None)) not in judged_at:
                continue
            if isinstance(event, PlanProposed) and event.node_id != parent_id:
                continue
            if isinstance(event, ProfileCaptured):
                parent["profile_sha256"] = event.profile_sha256
            elif isinstance(event, PlanProposed):
                parent["plan_summary"] = event.summary
            elif isinstance(event, TuningSwept):
                best_at = f" at {event.best_speedup:.3g}x" if event.best_speedup else ""
                parent["tuning_summary"] = (f"{event.configs_tried} configuration(s) tried; "
                                            f"best {dict(event.best_config)}{best_at}")
        return parent, failures
