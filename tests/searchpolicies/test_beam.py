"""`beam`: the conformance suite, the keep factor and the fill-in."""

from __future__ import annotations

import pytest

from searchpolicies.base import Budget, Expand, Stop
from searchpolicies.beam import BeamPolicy
from searchpolicies.common import hint
from searchpolicies.levers import parse_strategy
from searchpolicies.testing import GraphBuilder, PolicyContract, PolicyFactory


class TestBeamContract(PolicyContract):
    @pytest.fixture
    def policy(self) -> PolicyFactory:
        return lambda seed: BeamPolicy(seed=seed)


def _level_one(speedups: list[float | None]) -> GraphBuilder:
    g = GraphBuilder()
    levers = ["block_shape", "grid_order", "accumulator", "buffering", "precision", "masking"]
    for i in range(len(speedups)):
        g.expand(f"a{i}", "root", hint([levers[i]], ""), 2)
    for i, s in enumerate(speedups):
        g.evaluate(f"a{i}", s, iterations=2)
    return g


def test_root_gets_width_times_branches_children_with_distinct_levers() -> None:
    answer = BeamPolicy(kernel_class="rowwise").decide(GraphBuilder().graph, Budget(), 0)
    assert len(answer) == 6 and all(isinstance(e, Expand) and e.parent_id == "root"
                                    and e.iterations == 2 for e in answer)
    assert len({parse_strategy(e.strategy).lever for e in answer}) == 6


def test_keep_factor_selects_survivors() -> None:
    g = _level_one([1.5, 1.05, 1.3, 0.8, 1.25, None])
    beam = BeamPolicy(keep=1.2)
    answer = beam.decide(g.graph, Budget(), 6)
    parents = [e.parent_id for e in answer]
    assert parents == ["a0", "a0", "a2", "a2", "a4", "a4"]
    for e in answer:  # no lever repeated along a path
        assert parse_strategy(e.strategy).lever not in parse_strategy(
            g.graph.node(e.parent_id).strategy).levers


def test_too_few_survivors_are_filled_with_the_best_of_the_rest() -> None:
    g = _level_one([1.5, 1.05, 1.1, 0.8, 1.0, None])
    answer = BeamPolicy(keep=1.2).decide(g.graph, Budget(), 6)
    assert sorted({e.parent_id for e in answer}) == ["a0", "a1", "a2"]  # a0 survives, a2 a1 fill


def test_waits_for_a_level_and_stops_after_depth() -> None:
    g = _level_one([1.5, 1.05, 1.1, 0.8, 1.0, 1.2])
    assert BeamPolicy(depth=1).decide(g.graph, Budget(), 6) == [Stop("beam: 1 levels searched")]
    g.expand("b0", "a0", hint(["masking"], ""))
    assert BeamPolicy(depth=2, width=1, branches=1).decide(g.graph, Budget(), 7) == []
    g.evaluate("b0", 1.7)
    assert BeamPolicy(depth=2, width=1, branches=1).decide(g.graph, Budget(), 8) == [
        Stop("beam: 2 levels searched")]


def test_a_level_without_a_valid_node_stops() -> None:
    g = _level_one([None] * 6)
    assert BeamPolicy().decide(g.graph, Budget(), 6) == [Stop("beam: no valid node at depth 1")]


def test_a_beam_node_gets_its_plans_next_levers_first() -> None:
    g = GraphBuilder()
    g.expand("a0", "root", hint(["block_shape"], "attention"), 2)
    g.evaluate("a0", 1.3, iterations=2, next_levers=["block_skipping", "block_shape", "precision"])
    g.expand("a1", "root", hint(["grid_order"], "attention"), 2).evaluate("a1", 1.1, iterations=2)
    answer = BeamPolicy(width=1, branches=2, kernel_class="attention").decide(g.graph, Budget(), 1)
    assert [(e.parent_id, parse_strategy(e.strategy).lever) for e in answer] == [
        ("a0", "block_skipping"), ("a0", "precision")]
