"""`adaptive`: the conformance suite, and a bandit whose state comes from the graph."""

from __future__ import annotations

import pytest

from searchpolicies.adaptive import AdaptivePolicy
from searchpolicies.base import Budget, Expand
from searchpolicies.common import hint
from searchpolicies.levers import levers_for, parse_strategy
from searchpolicies.testing import GraphBuilder, PolicyContract, PolicyFactory, simulate


class TestAdaptiveContract(PolicyContract):
    @pytest.fixture
    def policy(self) -> PolicyFactory:
        return lambda seed: AdaptivePolicy(seed=seed)


def test_first_round_explores_from_the_root() -> None:
    answer = AdaptivePolicy(batch=3, kernel_class="attention").decide(GraphBuilder().graph,
                                                                      Budget(), 0)
    ids = {lv.id for lv in levers_for("attention")}
    assert len(answer) == 3 and all(isinstance(e, Expand) and e.parent_id == "root"
                                    for e in answer)
    assert all(parse_strategy(e.strategy).lever in ids for e in answer)


def test_stats_come_from_the_graph() -> None:
    g = GraphBuilder()
    g.expand("a", strategy=hint(["block_shape"], "")).evaluate("a", 1.5)
    g.expand("b", strategy=hint(["precision"], "")).evaluate("b", None)
    g.expand("c", "a", hint(["grid_order", "block_shape"], ""))
    g.evaluate("c", 1.8)
    stats = AdaptivePolicy().stats(g.graph)
    assert stats["precision"].mean_gain == 0.0 and stats["precision"].pulls == 1
    assert stats["block_shape"].pulls == 2
    assert stats["block_shape"].mean_gain == pytest.approx((1.5 + 1.2) / 2)
    assert stats["grid_order"].mean_gain == pytest.approx(1.2)


def test_exploits_the_best_lever_on_the_best_node() -> None:
    g = GraphBuilder()
    g.expand("a", strategy=hint(["block_shape"], "")).evaluate("a", 1.5)
    g.expand("b", strategy=hint(["precision"], "")).evaluate("b", 0.7)
    g.expand("c", strategy=hint(["grid_order"], "")).evaluate("c", 1.1)
    (e,) = AdaptivePolicy(batch=1, explore=0.0, ucb=0.0).decide(g.graph, Budget(), 3)
    # block_shape paid most, but it is on a's path: the next best tried lever goes on a
    assert e.parent_id == "a" and parse_strategy(e.strategy).lever == "grid_order"


def test_explores_less_as_the_budget_runs_out() -> None:
    g = GraphBuilder()
    g.expand("a", strategy=hint(["block_shape"], "")).evaluate("a", 1.5)
    p = AdaptivePolicy()
    total = len(levers_for(""))
    assert p.explore_share(g.graph, Budget(max_nodes=2), total - 1, total) < p.explore_share(
        g.graph, Budget(max_nodes=20), total - 1, total)


def test_learns_the_levers_that_pay() -> None:
    run = simulate(AdaptivePolicy(batch=2), Budget(max_nodes=24), seed=11, valid_rate=1.0)
    assert run.stopped and run.graph.best is not None and run.graph.best.speedup > 1.2
