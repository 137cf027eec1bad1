"""`parallel`: the conformance suite, and N root expansions then Stop."""

from __future__ import annotations

import pytest

from searchpolicies.base import Budget, Expand, Stop
from searchpolicies.levers import parse_strategy
from searchpolicies.parallel import ParallelPolicy
from searchpolicies.testing import GraphBuilder, PolicyContract, PolicyFactory


class TestParallelContract(PolicyContract):
    @pytest.fixture(params=[False, True], ids=["plain", "hints"])
    def policy(self, request: pytest.FixtureRequest) -> PolicyFactory:
        return lambda seed: ParallelPolicy(seed=seed, hints=request.param)


def test_published_setting_is_five_by_five() -> None:
    g = GraphBuilder()
    answer = ParallelPolicy().decide(g.graph, Budget(), 0)
    assert answer == [Expand("root", "", 5)] * 5


def test_waits_for_every_trajectory_then_stops() -> None:
    p = ParallelPolicy(trajectories=3, iterations=2, hints=True, kernel_class="matmul")
    g = GraphBuilder()
    answer = p.decide(g.graph, Budget(), 0)
    assert [(e.parent_id, e.iterations) for e in answer] == [("root", 2)] * 3
    levers = [parse_strategy(e.strategy).lever for e in answer]
    assert len(set(levers)) == 3 and all(parse_strategy(e.strategy).kernel_class == "matmul"
                                         for e in answer)
    for i, e in enumerate(answer):
        g.expand(f"n{i}", e.parent_id, e.strategy, e.iterations)
    g.evaluate("n0", 1.3)
    assert p.decide(g.graph, Budget(), 1) == []
    g.evaluate("n1", None).evaluate("n2", 0.9)
    assert p.decide(g.graph, Budget(), 2) == [Stop("parallel: all 3 trajectories evaluated")]


def test_resumes_the_missing_trajectories_only() -> None:
    g = GraphBuilder().expand("n0", strategy="").expand("n1", strategy="")
    answer = ParallelPolicy(trajectories=5).decide(g.graph, Budget(), 1)
    assert len(answer) == 3 and all(isinstance(e, Expand) for e in answer)


def test_budget_trims_the_batch() -> None:
    answer = ParallelPolicy().decide(GraphBuilder().graph, Budget(max_candidates=12), 0)
    assert [e.iterations for e in answer if isinstance(e, Expand)] == [5, 5, 2]
