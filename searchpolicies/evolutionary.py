"""`evolutionary`: islands of kernels, selection by speedup and diversity, migration, crossover."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from typing import ClassVar

from projections.searchgraph import Node, SearchGraph
from searchpolicies.base import Budget, Decision, Expand, Param, SearchPolicy, Stop
from searchpolicies.common import (
    KERNEL_CLASS,
    child_levers,
    hint,
    lever_of,
    path_levers,
    pick_levers,
    ranked,
    speedup,
)
from searchpolicies.levers import lever, parse_strategy


class EvolutionaryPolicy(SearchPolicy):
    """An island model over the graph, one generation per round.

    Every node carries its island and generation in its hint's tags (`island=`, `gen=`),
    so the populations are read back from the graph. Generation 0 seeds each island with
    `population` children of the root, each with a different lever. Each later generation,
    once the previous one is evaluated, gives every island `offspring` children of parents
    drawn from its `population` fittest valid members, where fitness is the speedup raised
    for rare niches: `speedup * (1 + diversity / members sharing the (kernel class, lever)
    niche)`. A child is a crossover with probability `crossover` (the parent's kernel with
    a second parent's lever brought in: the hint names both levers and the mate), else a
    mutation (a lever not yet on its path). Every `migrate_every` generations the best
    node of the previous island (a ring) parents one child of each island.
    """

    name: ClassVar[str] = "evolutionary"
    parameters: ClassVar[tuple[Param, ...]] = (
        Param("islands", int, 2, "independent populations", min=1),
        Param("population", int, 3, "fittest members an island breeds from (and seeds)", min=1),
        Param("offspring", int, 2, "children per island per generation", min=1),
        Param("generations", int, 5, "generations, the seeding one included", min=1),
        Param("migrate_every", int, 2, "generations between migrations (0 = never)", min=0),
        Param("crossover", float, 0.5, "probability that a child crosses two parents' plans",
              min=0.0, max=1.0),
        Param("diversity", float, 0.5, "weight of a rare (class, lever) niche in fitness",
              min=0.0),
        Param("iterations", int, 2, "iterations per trajectory", min=1),
        KERNEL_CLASS,
    )
    islands: int
    population: int
    offspring: int
    generations: int
    migrate_every: int
    crossover: float
    diversity: float
    iterations: int
    kernel_class: str

    # --- state read from the graph --------------------------------------------------------

    def island_of(self, graph: SearchGraph, node: Node) -> int:
        tags = parse_strategy(node.strategy).tags
        if tags.get("island", "").isdigit():
            return int(tags["island"]) % self.islands
        if node.parent_id is None or graph.node(node.parent_id).parent_id is None:
            return [n.node_id for n in graph.nodes].index(node.node_id) % self.islands
        return self.island_of(graph, graph.node(node.parent_id))

    @staticmethod
    def generation_of(node: Node) -> int:
        gen = parse_strategy(node.strategy).tags.get("gen", "0")
        return int(gen) if gen.isdigit() else 0

    def fitness(self, node: Node, niches: Counter[tuple[str, str]]) -> float:
        s = parse_strategy(node.strategy)
        return speedup(node) * (1 + self.diversity / max(1, niches[(s.kernel_class, s.lever)]))

    def pool(self, graph: SearchGraph, island: int) -> list[tuple[Node, float]]:
        members = [n for n in graph.nodes
                   if n.parent_id is not None and self.island_of(graph, n) == island]
        niches = Counter((parse_strategy(n.strategy).kernel_class, lever_of(n)) for n in members)
        scored = [(n, self.fitness(n, niches)) for n in members if n.status == "valid"]
        scored.sort(key=lambda t: -t[1])
        return scored[: self.population]

    # --- one generation -------------------------------------------------------------------

    def propose(self, graph: SearchGraph, budget: Budget, decision: int) -> Sequence[Decision]:
        root = graph.root
        if root is None or graph.pending:
            return []
        rng = self.rng(decision)
        grown = [n for n in graph.nodes if n.parent_id is not None]
        if not grown:
            seeds = pick_levers(rng, self.kernel_class, self.islands * self.population)
            return [Expand(root.node_id, hint([lv], self.kernel_class, island=i % self.islands,
                                              gen=0), self.iterations)
                    for i, lv in enumerate(seeds)]
        gen = max(self.generation_of(n) for n in grown) + 1
        if gen >= self.generations:
            return [Stop(f"evolutionary: {self.generations} generations")]
        out: list[Expand] = []
        for island in range(self.islands):
            pool = [(n, f) for n, f in self.pool(graph, island) if budget.allows_child_of(n)]
            slots = self.offspring
            if self.migrate_every and self.islands > 1 and gen % self.migrate_every == 0:
                donor = next((n for n in ranked(graph, include_root=False)
                              if self.island_of(graph, n) == (island - 1) % self.islands
                              and budget.allows_child_of(n)), None)
                if donor is not None:
                    out.append(self.mutate(graph, donor, rng, island, gen, migrant=True))
                    slots -= 1
            for _ in range(slots):
                if not pool:
                    out.append(self.mutate(graph, root, rng, island, gen))
                elif len(pool) >= 2 and rng.random() < self.crossover:
                    out.append(self.cross(graph, pool, rng, island, gen))
                else:
                    parent = rng.choices([n for n, _ in pool], [f for _, f in pool])[0]
                    out.append(self.mutate(graph, parent, rng, island, gen))
        return out

    def mutate(self, graph: SearchGraph, parent: Node, rng: random.Random, island: int,
               gen: int, *, migrant: bool = False) -> Expand:
        avoid = path_levers(graph, parent.node_id) | child_levers(graph, parent.node_id)
        (lv,) = pick_levers(rng, self.kernel_class, 1, avoid)
        tags: dict[str, object] = {"island": island, "gen": gen}
        if migrant:
            tags["migrant"] = parent.node_id
        return Expand(parent.node_id, hint([lv], self.kernel_class, **tags), self.iterations)

    def cross(self, graph: SearchGraph, pool: list[tuple[Node, float]], rng: random.Random,
              island: int, gen: int) -> Expand:
        nodes, weights = [n for n, _ in pool], [f for _, f in pool]
        first = rng.choices(range(len(nodes)), weights)[0]
        rest = [i for i in range(len(nodes)) if i != first]
        second = rng.choices(rest, [weights[i] for i in rest])[0]
        parent, mate = nodes[first], nodes[second]
        brought, own = lever_of(mate), lever_of(parent)
        if not brought or brought in path_levers(graph, parent.node_id):
            return self.mutate(graph, parent, rng, island, gen)
        levers = [brought, *([own] if own and own != brought else [])]
        text = (f"Cross over two plans: start from this kernel and bring in what node "
                f"{mate.node_id} did. {lever(brought).hint}")
        return Expand(parent.node_id, hint(levers, self.kernel_class, text, island=island,
                                           gen=gen, mate=mate.node_id), self.iterations)
