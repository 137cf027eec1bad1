"""`beam`: level by level, keep the best `width` nodes and expand each (published: 3, 3, 2, 2)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from projections.searchgraph import Node, SearchGraph
from searchpolicies.base import Budget, Decision, Expand, Param, SearchPolicy, Stop
from searchpolicies.common import (
    KERNEL_CLASS,
    child_levers,
    hint,
    path_levers,
    pick_levers,
    ranked,
    speedup,
)


class BeamPolicy(SearchPolicy):
    """A beam search over levels of the graph, its state read from the graph each time.

    The beam at depth 0 is the root. Each beam node gets `branches` children (the root
    `width * branches`, so every level offers the same choice), each with a lever not yet
    used on its path (those its plan names as next levers first, then a seeded draw). When a level is evaluated, a child survives if it is valid and beats
    its parent by the keep factor (`speedup >= keep * parent speedup`); the best `width`
    survivors form the next beam, and when too few survive the beam is filled with the
    best of the other valid children. The search stops after `depth` levels, or when a
    level has no valid node.
    """

    name: ClassVar[str] = "beam"
    parameters: ClassVar[tuple[Param, ...]] = (
        Param("width", int, 3, "nodes kept per level", min=1),
        Param("depth", int, 3, "levels below the root", min=1),
        Param("branches", int, 2, "children per beam node", min=1),
        Param("iterations", int, 2, "iterations per trajectory", min=1),
        Param("keep", float, 1.0, "a child survives if its speedup >= keep x its parent's",
              min=0.0),
        KERNEL_CLASS,
    )
    width: int
    depth: int
    branches: int
    iterations: int
    keep: float
    kernel_class: str

    def planned_children(self, node: Node) -> int:
        return self.width * self.branches if node.parent_id is None else self.branches

    def next_beam(self, graph: SearchGraph, beam: list[Node]) -> list[Node]:
        """Survivors by the keep factor, filled with the best of the rest."""
        children = [c for b in beam for c in graph.children(b.node_id) if c.status == "valid"]
        order = {n.node_id: i for i, n in enumerate(ranked(graph))}
        children.sort(key=lambda n: order[n.node_id])
        survivors = [c for c in children
                     if speedup(c) >= self.keep * speedup(graph.node(c.parent_id or ""))]
        rest = [c for c in children if c not in survivors]
        return (survivors + rest)[: self.width]

    def propose(self, graph: SearchGraph, budget: Budget, decision: int) -> Sequence[Decision]:
        root = graph.root
        if root is None:
            return []
        beam = [root]
        for level in range(self.depth):
            missing = [(b, self.planned_children(b) - len(graph.children(b.node_id)))
                       for b in beam]
            if any(n > 0 for _, n in missing):
                rng = self.rng(decision)
                out = []
                for node, n in missing:
                    avoid = path_levers(graph, node.node_id) | child_levers(graph, node.node_id)
                    for lv in pick_levers(rng, self.kernel_class, n, avoid,
                                          prefer=node.next_levers):
                        out.append(Expand(node.node_id, hint([lv], self.kernel_class),
                                          self.iterations))
                return out
            if graph.pending:
                return []
            beam = self.next_beam(graph, beam)
            if not beam:
                return [Stop(f"beam: no valid node at depth {level + 1}")]
        return [Stop(f"beam: {self.depth} levels searched")]
