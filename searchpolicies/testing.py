"""The conformance suite every search policy, shipped or plugged in, must pass.

Subclass `PolicyContract` in a test module and give it a `policy` fixture, a factory from
a seed to a fresh policy:

    class TestMyPolicy(PolicyContract):
        @pytest.fixture
        def policy(self):
            return lambda seed: MyPolicy(seed=seed)

Each test drives the policy with `simulate`: a search loop that feeds a real `SearchGraph`
the events an orchestrator would record (RunRequested, BaselineMeasured, one
ExpansionRequested per Expand, IterationFinished, NodeEvaluated with seeded speedups,
nodes finishing out of order) until the policy says Stop. `GraphBuilder` builds graphs by
hand for a policy's own decision tests.
"""

from __future__ import annotations

import dataclasses
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pytest

from eventstore.events import (
    BaselineMeasured,
    Event,
    ExpansionRequested,
    IterationFinished,
    NodeEvaluated,
    PlanProposed,
    RunRequested,
    SearchStopped,
)
from projections.searchgraph import SearchGraph
from searchpolicies.base import Budget, Decision, Expand, SearchPolicy, Stop
from searchpolicies.errors import PolicyError
from searchpolicies.levers import parse_strategy

PolicyFactory = Callable[[int], SearchPolicy]
RUN_ID = "policy-conformance"


class GraphBuilder:
    """A run's events written by hand: the root and baseline, then expansions and results."""

    def __init__(self, policy: str = "test", run_id: str = RUN_ID) -> None:
        self.run_id, self.policy = run_id, policy
        self.events: list[Event] = []
        self.graph = SearchGraph(run_id)
        self.add(RunRequested.create(run_id=run_id, producer="conformance", node_id="root",
                                     task_name="sim", task_sha256="0" * 64, policy=policy,
                                     target="sim-tpu-v6e", provider="offline"))
        self.add(BaselineMeasured.create(run_id=run_id, producer="conformance", node_id="root",
                                         latency_s=1e-4, measured_on="simulated",
                                         target="sim-tpu-v6e"))

    def add(self, event: Event) -> None:
        self.events.append(event)
        self.graph.apply(event)

    def expand(self, node_id: str, parent_id: str = "root", strategy: str = "",
               iterations: int = 1, decision: int = 0) -> GraphBuilder:
        self.add(ExpansionRequested.create(
            run_id=self.run_id, producer="conformance", node_id=node_id, parent_id=parent_id,
            policy=self.policy, strategy=strategy, iterations=iterations, decision=decision))
        return self

    def evaluate(self, node_id: str, speedup: float | None, *, iterations: int = 1,
                 next_levers: Sequence[str] = ()) -> GraphBuilder:
        """Finish a node: valid with this speedup, or invalid when `speedup` is None; its best
        iteration's plan names `next_levers`."""
        valid = speedup is not None
        plan_sha256 = f"{len(self.events):064x}"
        self.add(PlanProposed.create(run_id=self.run_id, producer="conformance", node_id=node_id,
                                     iteration=0, plan_sha256=plan_sha256,
                                     next_levers=list(next_levers)))
        for it in range(iterations):
            self.add(IterationFinished.create(
                run_id=self.run_id, producer="conformance", node_id=node_id, iteration=it,
                valid=valid, compiled=True, speedup=speedup,
                latency_s=1e-4 / speedup if speedup else None))
        self.add(NodeEvaluated.create(
            run_id=self.run_id, producer="conformance", node_id=node_id, valid=valid,
            compiled=True, best_iteration=0 if valid else None, iterations=iterations,
            speedup=speedup, latency_s=1e-4 / speedup if speedup else None,
            plan_sha256=plan_sha256 if valid else None))
        return self

    def stop(self, reason: str) -> None:
        self.add(SearchStopped.create(run_id=self.run_id, producer="conformance",
                                      policy=self.policy, reason=reason))


@dataclass
class Call:
    """One question to the policy: what it saw (events so far, budget) and what it said."""

    decision: int
    events_seen: int
    budget: Budget
    answer: list[Decision]


@dataclass
class SimulatedRun:
    builder: GraphBuilder
    calls: list[Call] = field(default_factory=list)
    requested_candidates: int = 0
    stopped: str | None = None

    @property
    def graph(self) -> SearchGraph:
        return self.builder.graph

    @property
    def answers(self) -> list[list[Decision]]:
        return [c.answer for c in self.calls]


def lever_effect(lever: str) -> float:
    """A fixed, seed-independent speedup factor per lever, so learning policies can learn."""
    return random.Random(f"lever:{lever}").uniform(0.85, 1.3)


def check_answer(policy: SearchPolicy, graph: SearchGraph, answer: object) -> list[Decision]:
    """The shape every answer must have; returns it as a list."""
    assert isinstance(answer, Sequence) and not isinstance(answer, str), answer
    decisions = list(answer)
    for i, d in enumerate(decisions):
        assert isinstance(d, Expand | Stop), f"{policy.name}: {d!r} is not an Expand or a Stop"
        if isinstance(d, Stop):
            assert i == len(decisions) - 1, f"{policy.name}: Stop is not last in {decisions}"
            assert isinstance(d.reason, str) and d.reason, f"{policy.name}: a Stop needs a reason"
        else:
            assert d.parent_id in graph.state.nodes, f"{policy.name}: expands unknown {d.parent_id}"
            assert graph.node(d.parent_id).status in ("root", "valid"), (
                f"{policy.name}: expands {d.parent_id}, which is {graph.node(d.parent_id).status}")
            assert isinstance(d.strategy, str) and isinstance(d.iterations, int)
            assert d.iterations >= 1
    return decisions


def simulate(policy: SearchPolicy, budget: Budget, *, seed: int = 0, valid_rate: float = 0.8,
             max_calls: int | None = None) -> SimulatedRun:
    """Drive `policy` as the orchestrator would, checking every answer, until it stops."""
    rng = random.Random(f"simulate:{seed}")
    run = SimulatedRun(GraphBuilder(policy.name))
    pending: list[tuple[str, int]] = []
    limit = max_calls or 4 * (budget.max_nodes or 50) + 20
    for decision in range(limit):
        graph = run.graph
        seen = budget if budget.candidates_used is not None else dataclasses.replace(
            budget, candidates_used=run.requested_candidates)
        before = graph.snapshot()
        answer = check_answer(policy, graph, policy.decide(graph, seen, decision))
        assert graph.snapshot() == before, f"{policy.name}: decide() changed the graph"
        run.calls.append(Call(decision, len(run.builder.events), seen, answer))
        for d in answer:
            if isinstance(d, Expand):
                node_id = f"n{len(graph.nodes)}"
                run.builder.expand(node_id, d.parent_id, d.strategy, d.iterations, decision)
                run.requested_candidates += d.iterations
                pending.append((node_id, d.iterations))
            else:
                run.stopped = d.reason
                run.builder.stop(d.reason)
        if run.stopped is not None:
            return run
        assert pending, f"{policy.name}: nothing pending and neither Expand nor Stop: the search stalls"
        node_id, iterations = pending.pop(rng.randrange(len(pending)))
        node = graph.node(node_id)
        parent = graph.node(node.parent_id or "")
        if rng.random() < valid_rate:
            factor = rng.uniform(0.9, 1.12)
            for lv in parse_strategy(node.strategy).levers:
                factor *= lever_effect(lv)
            run.builder.evaluate(node_id, round((parent.speedup or 1.0) * factor, 6),
                                 iterations=iterations)
        else:
            run.builder.evaluate(node_id, None, iterations=iterations)
    pytest.fail(f"{policy.name}: no Stop after {limit} calls")


class PolicyContract:
    """What every search policy must do. Subclasses provide the `policy` fixture."""

    @pytest.fixture
    def policy(self) -> PolicyFactory:
        raise NotImplementedError("a PolicyContract subclass must define the `policy` fixture")

    @pytest.fixture
    def budget(self) -> Budget:
        return Budget(max_nodes=12, max_candidates=40, max_depth=4)

    # --- identity and parameters -----------------------------------------------------------

    def test_name_class_and_params(self, policy: PolicyFactory) -> None:
        p = policy(0)
        cls = type(p)
        assert isinstance(p, SearchPolicy)
        assert isinstance(cls.name, str) and re.fullmatch(r"[a-z][a-z0-9_-]*", cls.name)
        assert cls.__name__.endswith("Policy"), "policy classes are named <Name>Policy"
        for param in cls.params():
            assert param.help, f"{cls.name}: parameter {param.name} has no help"
            assert param.check(param.default, cls.name) == param.default
        text = {k: str(v).lower() if isinstance(v, bool) else str(v)
                for k, v in p.param_values().items()}
        assert cls.from_params(text, seed=p.seed).param_values() == p.param_values()
        with pytest.raises(PolicyError, match="unknown parameter"):
            cls.from_params({"no_such_parameter": "1"})
        assert p.rng(3).random() == policy(0).rng(3).random()

    # --- the search loop -------------------------------------------------------------------

    def test_starts_after_the_baseline(self, policy: PolicyFactory, budget: Budget) -> None:
        graph = GraphBuilder().graph
        answer = check_answer(policy(0), graph, policy(0).decide(graph, budget, 0))
        assert any(isinstance(d, Expand) for d in answer), f"first answer {answer} expands nothing"

    @pytest.mark.parametrize("seed", [0, 1])
    def test_reaches_stop_within_budget(self, policy: PolicyFactory, budget: Budget,
                                        seed: int) -> None:
        run = simulate(policy(seed), budget, seed=seed)
        assert run.stopped
        grown = [n for n in run.graph.nodes if n.parent_id is not None]
        assert budget.max_nodes is None or len(grown) <= budget.max_nodes
        assert budget.max_candidates is None or run.requested_candidates <= budget.max_candidates
        assert budget.max_depth is None or all(n.depth <= budget.max_depth for n in grown)
        assert not run.graph.pending

    def test_every_node_failing_still_stops(self, policy: PolicyFactory, budget: Budget) -> None:
        run = simulate(policy(0), budget, seed=5, valid_rate=0.0)
        assert run.stopped and all(n.parent_id is None for n in run.graph.nodes
                                   if n.status == "valid" or n.status == "root")

    def test_small_budgets(self, policy: PolicyFactory) -> None:
        for budget in (Budget(max_nodes=1), Budget(max_nodes=None, max_candidates=3),
                       Budget(max_nodes=8, max_depth=1)):
            run = simulate(policy(0), budget, seed=2)
            grown = [n for n in run.graph.nodes if n.parent_id is not None]
            assert run.stopped and len(grown) <= (budget.max_nodes or len(grown))
            assert run.requested_candidates <= (budget.max_candidates or run.requested_candidates)
            assert all(n.depth <= (budget.max_depth or n.depth) for n in grown)

    def test_target_speedup_stops_the_search(self, policy: PolicyFactory) -> None:
        budget = Budget(max_nodes=30, target_speedup=1.02)
        run = simulate(policy(0), budget, seed=3, valid_rate=1.0)
        reached = False
        for call in run.calls:
            graph = SearchGraph.rebuild(run.builder.events[: call.events_seen], RUN_ID)
            best = graph.best
            if best is not None and (best.speedup or 0) >= 1.02:
                reached = True
                assert not any(isinstance(d, Expand) for d in call.answer), (
                    f"expands past the target speedup: {call.answer}")
        if reached:
            assert run.stopped and "target" in run.stopped

    # --- determinism -----------------------------------------------------------------------

    def test_replay_gives_the_same_decisions(self, policy: PolicyFactory, budget: Budget) -> None:
        first = simulate(policy(7), budget, seed=7)
        again = simulate(policy(7), budget, seed=7)
        assert first.answers == again.answers

    def test_a_fresh_policy_on_the_rebuilt_graph_decides_the_same(
            self, policy: PolicyFactory, budget: Budget) -> None:
        run = simulate(policy(4), budget, seed=4)
        for call in run.calls:
            graph = SearchGraph.rebuild(run.builder.events[: call.events_seen], RUN_ID)
            fresh = policy(4)
            assert fresh.decide(graph, call.budget, call.decision) == call.answer
            assert fresh.decide(graph, call.budget, call.decision) == call.answer

    def test_decide_leaves_the_graph_alone(self, policy: PolicyFactory, budget: Budget) -> None:
        run = simulate(policy(1), budget, seed=1)
        before = run.graph.snapshot()
        p = policy(1)
        for decision in range(3):
            p.decide(run.graph, budget, decision)
        assert run.graph.snapshot() == before
