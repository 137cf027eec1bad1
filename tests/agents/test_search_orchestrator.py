"""The search orchestrator on a real nats-server and log, with agents that answer at once.

Every other agent is replaced by `benchmarks/instant_agents.py`, so what is tested is the
orchestration: each shipped policy runs to its Stop within its budget, every decision is
recorded and can be recomputed from the log, a node whose agent gives up is judged
invalid instead of stalling the search, and the budget's stop criteria hold.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import pytest
from instant_search import FAIL_HINT, search

from agents.search import fold
from eventstore.events import Event, ExpansionRequested, NodeEvaluated, PolicyDecided, RunFinished
from eventstore.log import EventLog
from projections.searchgraph import SearchGraph
from searchpolicies.base import Budget, Decision, Expand, SearchPolicy, Stop
from searchpolicies.registry import policy_class


class FirstChildFailsPolicy(SearchPolicy):
    """Two children of the root, the first told to fail; then Stop."""

    name: ClassVar[str] = "first-child-fails"

    def propose(self, graph: SearchGraph, budget: Budget, decision: int) -> Sequence[Decision]:
        root = graph.root
        assert root is not None
        if not graph.children(root.node_id):
            return [Expand(root.node_id, FAIL_HINT), Expand(root.node_id, "fine")]
        return [] if graph.pending else [Stop("both children judged")]


def recomputed(events: list[Event], policy: SearchPolicy) -> None:
    """Each recorded decision is what the policy decides on the graph it was folded from."""
    decided = [e for e in events if isinstance(e, PolicyDecided)]
    assert [d.decision for d in decided] == list(range(len(decided)))
    for d in decided:
        graph = fold(d.run_id, events[:d.seen_events])
        again = policy.decide(graph, Budget(**d.budget), d.decision)
        expansions = [(x.parent_id, x.strategy, x.iterations) for x in again if isinstance(x, Expand)]
        assert expansions == [(x["parent_id"], x["strategy"], x["iterations"]) for x in d.expansions]
        stop = next((x.reason for x in again if isinstance(x, Stop)), None)
        assert (stop is None) == (d.stop is None)


@pytest.mark.parametrize("name", ["parallel", "beam", "greedy", "evolutionary", "adaptive"])
async def test_every_shipped_policy_searches_to_its_stop_and_its_decisions_replay(
        tmp_path: Path, name: str) -> None:
    events = await search(tmp_path, policy=name, max_nodes=7, seed=3)
    requested = [e for e in events if isinstance(e, ExpansionRequested)]
    evaluated = [e for e in events if isinstance(e, NodeEvaluated)]
    assert 1 <= len(requested) <= 7
    assert sorted(e.node_id for e in requested) == sorted(e.node_id for e in evaluated)
    assert len({e.node_id for e in requested}) == len(requested)
    (finished,) = [e for e in events if isinstance(e, RunFinished)]
    best = max(evaluated, key=lambda e: e.speedup or 0.0)
    assert finished.best_node_id == best.node_id
    assert any(e.type_name == "SearchStopped" for e in events)
    assert [e.final for e in events if e.type_name == "RunAudited"] == [True]
    params = next(e for e in events if e.type_name == "RunRequested").policy_params
    recomputed(events, policy_class(name)(seed=3, **params))


async def test_a_node_whose_agent_gives_up_is_judged_invalid_and_the_search_goes_on(
        tmp_path: Path) -> None:
    events = await search(tmp_path, policy=f"{__name__}:FirstChildFailsPolicy")
    evaluated = {e.node_id: e for e in events if isinstance(e, NodeEvaluated)}
    requested = [e for e in events if isinstance(e, ExpansionRequested)]
    assert len(requested) == 2 and set(evaluated) == {e.node_id for e in requested}
    failed, fine = (evaluated[e.node_id] for e in requested)
    assert not failed.valid and failed.producer.startswith("search@") and fine.valid
    assert any(e.type_name == "AgentFailed" for e in events)
    (finished,) = [e for e in events if isinstance(e, RunFinished)]
    assert finished.best_node_id == fine.node_id


@pytest.mark.parametrize(("limits", "why"), [
    ({"max_candidates": 3}, "candidate budget"),
    ({"target_speedup": 1.01}, "target speedup"),
    ({"max_nodes": 2}, "node budget"),
])
async def test_the_budget_stops_the_search(tmp_path: Path, limits: dict[str, object], why: str) -> None:
    events = await search(tmp_path, policy="greedy", **{"max_nodes": 20, **limits})
    (stopped,) = [e for e in events if e.type_name == "SearchStopped"]
    assert why in stopped.reason
    iterations = sum(e.iterations for e in events if isinstance(e, ExpansionRequested))
    if "max_candidates" in limits:
        assert iterations <= limits["max_candidates"]
    if "max_nodes" in limits:
        assert len([e for e in events if isinstance(e, ExpansionRequested)]) == limits["max_nodes"]


class BrokenPolicy(SearchPolicy):
    """A plug-in with a bug."""

    name: ClassVar[str] = "broken"

    def propose(self, graph: SearchGraph, budget: Budget, decision: int) -> Sequence[Decision]:
        raise ZeroDivisionError("a bug in the policy")


async def test_a_policy_that_crashes_ends_the_run_with_its_error(tmp_path: Path) -> None:
    events = await search(tmp_path, expect="failed", policy=f"{__name__}:BrokenPolicy")
    (failed,) = [e for e in events if e.type_name == "AgentFailed"]
    assert failed.agent == "search" and "ZeroDivisionError: a bug in the policy" in failed.error


async def test_a_search_cut_off_part_way_resumes_on_a_bus_that_lost_everything(tmp_path: Path) -> None:
    """Its nodes are requested but never run; the runtime stops and its JetStream store is
    deleted; `resume` puts the log's events and artifacts back and the search completes
    with the same nodes, each evaluated once."""
    from instant_agents import INSTANT_AGENTS, InstantTrajectory
    from instant_search import TASK

    from kernelgraph.client import KernelRequest, follow, submit, wait
    from kernelgraph.resume import load_run, resume
    from kernelgraph.runtime import Runtime, RuntimeConfig

    db = tmp_path / "log.duckdb"
    config = RuntimeConfig(db_path=db, agents=["search"], drain_timeout_s=1.0)
    request = KernelRequest(task=TASK, iterations=1, policy="parallel",
                            policy_params={"trajectories": "3"})
    async with Runtime(config) as runtime:
        assert runtime.client is not None and runtime.recorder is not None
        nc = runtime.client.nc
        fakes = [cls(nc, settings=config.settings) for cls in INSTANT_AGENTS
                 if cls is not InstantTrajectory]  # nobody runs the nodes
        for fake in fakes:
            await fake.start()
        run = await submit(nc, request)
        requested = 0
        async with asyncio.timeout(60):
            async for event in follow(nc, run.run_id):
                requested += event.type_name == "ExpansionRequested"
                if requested == 3:
                    break
        await runtime.recorder.wait_idle(timeout=30)
        for fake in fakes:
            await fake.stop()
    shutil.rmtree(db.with_name(db.name + ".nats"))

    saved = load_run(db, None)
    assert saved.run_id == run.run_id and saved.finished is None
    async with Runtime(config) as runtime:
        assert runtime.client is not None and runtime.recorder is not None
        nc, recorder = runtime.client.nc, runtime.recorder
        fakes = [cls(nc, settings=config.settings, concurrency=4) for cls in INSTANT_AGENTS]
        for fake in fakes:
            await fake.start()

        async def artifacts() -> list[tuple[bytes, str]]:
            rows = await recorder.read(lambda log: log.sql("SELECT data, kind FROM artifacts"))
            return [(bytes(d), str(k)) for d, k in rows]  # type: ignore[arg-type]

        assert await resume(nc, saved, artifacts) == len(saved.events)
        result = await wait(nc, run.run_id, timeout=120)
        await recorder.wait_idle(timeout=30)
        for fake in fakes:
            await fake.stop()
    assert result.status == "completed", result.reason
    with EventLog(db, read_only=True) as log:
        assert log.verify().ok
        events = list(log.events(run_id=run.run_id))
    nodes = [e.node_id for e in events if isinstance(e, ExpansionRequested)]
    assert len(nodes) == len(set(nodes)) == 3
    assert sorted(e.node_id for e in events if isinstance(e, NodeEvaluated)) == sorted(nodes)
    assert [e.decision for e in events if isinstance(e, PolicyDecided)] == [0, 1]
    assert len({e.event_id for e in events}) == len(events)
