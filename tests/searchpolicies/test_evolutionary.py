"""`evolutionary`: the conformance suite, seeding, selection, crossover, migration."""

from __future__ import annotations

import pytest

from searchpolicies.base import Budget, Expand, Stop
from searchpolicies.common import hint
from searchpolicies.evolutionary import EvolutionaryPolicy
from searchpolicies.levers import parse_strategy
from searchpolicies.testing import GraphBuilder, PolicyContract, PolicyFactory


class TestEvolutionaryContract(PolicyContract):
    @pytest.fixture
    def policy(self) -> PolicyFactory:
        return lambda seed: EvolutionaryPolicy(seed=seed)


def test_seeds_every_island_with_distinct_levers() -> None:
    answer = EvolutionaryPolicy(islands=3, population=2).decide(GraphBuilder().graph, Budget(), 0)
    tags = [parse_strategy(e.strategy) for e in answer if isinstance(e, Expand)]
    assert len(tags) == 6 and len({t.lever for t in tags}) == 6
    assert sorted(t.tags["island"] for t in tags) == ["0", "0", "1", "1", "2", "2"]
    assert {t.tags["gen"] for t in tags} == {"0"}


def _generation_zero() -> GraphBuilder:
    g = GraphBuilder()
    plan = [("a", 0, "block_shape", 1.4), ("b", 0, "grid_order", 1.1), ("c", 0, "precision", None),
            ("d", 1, "accumulator", 1.2), ("e", 1, "buffering", 1.6), ("f", 1, "masking", 0.9)]
    for node, island, lever, _ in plan:
        g.expand(node, strategy=hint([lever], "", island=island, gen=0), iterations=2)
    for node, _, _, s in plan:
        g.evaluate(node, s, iterations=2)
    return g


def test_children_stay_on_their_island_and_cross_over_named_parents() -> None:
    g = _generation_zero()
    answer = EvolutionaryPolicy(crossover=1.0, migrate_every=0).decide(g.graph, Budget(), 6)
    assert len(answer) == 4
    for e in answer:
        s = parse_strategy(e.strategy)
        parent = g.graph.node(e.parent_id)
        assert parent.status == "valid" and s.tags["gen"] == "1"
        assert s.tags["island"] == parse_strategy(parent.strategy).tags["island"]
        assert len(s.levers) == 2 and "mate" in s.tags and s.tags["mate"] != e.parent_id
        mate = g.graph.node(s.tags["mate"])
        assert s.levers[0] == parse_strategy(mate.strategy).lever
        assert f"node {mate.node_id}" in s.text


def test_migration_brings_the_neighbours_best() -> None:
    g = _generation_zero()
    answer = EvolutionaryPolicy(migrate_every=1, crossover=0.0).decide(g.graph, Budget(), 6)
    migrants = [e for e in answer if "migrant" in parse_strategy(e.strategy).tags]
    assert [(e.parent_id, parse_strategy(e.strategy).tags["island"]) for e in migrants] == [
        ("e", "0"), ("a", "1")]


def test_diversity_raises_a_rare_niche() -> None:
    p = EvolutionaryPolicy(diversity=1.0, population=1)
    g = GraphBuilder()
    for i, s in enumerate([1.30, 1.29, 1.28]):
        g.expand(f"s{i}", strategy=hint(["block_shape"], "", island=0, gen=0)).evaluate(f"s{i}", s)
    g.expand("r", strategy=hint(["manual_dma"], "", island=0, gen=0)).evaluate("r", 1.0)
    assert [n.node_id for n, _ in p.pool(g.graph, 0)] == ["r"]  # 1.0 x 2 beats 1.3 x 4/3


def test_stops_after_the_last_generation() -> None:
    g = _generation_zero()
    assert EvolutionaryPolicy(generations=1).decide(g.graph, Budget(), 6) == [
        Stop("evolutionary: 1 generations")]
