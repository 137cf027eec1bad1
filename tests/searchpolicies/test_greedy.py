"""`greedy`: the conformance suite, and always the best node."""

from __future__ import annotations

import pytest

from searchpolicies.base import Budget, Expand, Stop
from searchpolicies.common import hint
from searchpolicies.greedy import GreedyPolicy
from searchpolicies.levers import parse_strategy
from searchpolicies.testing import GraphBuilder, PolicyContract, PolicyFactory


class TestGreedyContract(PolicyContract):
    @pytest.fixture(params=[1, 2], ids=["one", "two-branches"])
    def policy(self, request: pytest.FixtureRequest) -> PolicyFactory:
        return lambda seed: GreedyPolicy(seed=seed, branches=request.param)


def _graph() -> GraphBuilder:
    g = GraphBuilder()
    g.expand("n1", strategy=hint(["block_shape"], "")).evaluate("n1", 1.2)
    g.expand("n2", strategy=hint(["grid_order"], "")).evaluate("n2", 1.6)
    g.expand("n3", "n2", hint(["accumulator"], "")).evaluate("n3", None)
    g.expand("n4", "n1", hint(["precision"], "")).evaluate("n4", 1.4)
    return g


def test_expands_the_best_node_with_a_new_lever() -> None:
    g = _graph()
    (e,) = GreedyPolicy().decide(g.graph, Budget(), 4)
    assert isinstance(e, Expand) and e.parent_id == "n2" and e.iterations == 3
    assert parse_strategy(e.strategy).lever not in {"grid_order", "accumulator"}


def test_root_first_then_waits() -> None:
    g = GraphBuilder()
    (e,) = GreedyPolicy().decide(g.graph, Budget(), 0)
    assert e.parent_id == "root"
    g.expand("n1", strategy=e.strategy)
    assert GreedyPolicy().decide(g.graph, Budget(), 1) == []


def test_depth_limit_falls_back_to_the_next_best() -> None:
    g = _graph()
    g.expand("n5", "n4", hint(["masking"], "")).evaluate("n5", 2.0)  # depth 3, best
    (e,) = GreedyPolicy().decide(g.graph, Budget(max_depth=3), 5)
    assert e.parent_id == "n2"


def test_patience() -> None:
    g = _graph()  # best n2, then n3 and n4 did not beat it
    assert GreedyPolicy(patience=2).decide(g.graph, Budget(), 4) == [
        Stop("greedy: 2 nodes without a better one")]
    assert isinstance(GreedyPolicy(patience=3).decide(g.graph, Budget(), 4)[0], Expand)


def test_climbs_from_a_kernel_slower_than_xla() -> None:
    """The root's 1.0x is XLA's program, not a kernel: a 0.9x kernel is still the one to improve."""
    g = GraphBuilder()
    g.expand("n1", strategy=hint(["block_shape"], "")).evaluate("n1", 0.8)
    g.expand("n2", "n1", hint(["grid_order"], "")).evaluate("n2", 0.9)
    (e,) = GreedyPolicy().decide(g.graph, Budget(), 2)
    assert e.parent_id == "n2"


def test_the_best_nodes_next_levers_come_before_the_seeded_draw() -> None:
    g = GraphBuilder()
    g.expand("n1", strategy=hint(["block_shape"], "attention"))
    g.evaluate("n1", 0.9, next_levers=["block_shape", "block_skipping", "head_packing"])
    policy = GreedyPolicy(kernel_class="attention", branches=2)
    first, second = policy.decide(g.graph, Budget(), 1)
    # block_shape is on the path already: the plan's next two, in its order
    assert [parse_strategy(e.strategy).lever for e in (first, second)] == [
        "block_skipping", "head_packing"]
    g.expand("n2", "n1", first.strategy).evaluate("n2", 0.8)
    g.expand("n3", "n1", second.strategy).evaluate("n3", 0.85)
    (third,) = GreedyPolicy(kernel_class="attention").decide(g.graph, Budget(), 2)
    assert third.parent_id == "n1"  # both children are slower: the plan's list is spent,
    assert parse_strategy(third.strategy).lever not in {  # so the seeded draw goes on
        "block_shape", "block_skipping", "head_packing"}
