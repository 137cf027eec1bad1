"""`greedy`: always expand the best node so far."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from projections.searchgraph import SearchGraph
from searchpolicies.base import Budget, Decision, Expand, Param, SearchPolicy, Stop
from searchpolicies.common import KERNEL_CLASS, child_levers, hint, path_levers, pick_levers, ranked


class GreedyPolicy(SearchPolicy):
    """Hill climbing: once the last expansions are evaluated, expand the fastest valid node
    (the root until one exists) with `branches` new levers not yet tried from it or on its
    path: first those its plan names as its next levers (`Node.next_levers`), then a seeded
    draw. A node the budget's depth forbids expanding gives way to the next best. With
    `patience` > 0 it stops after that many evaluated nodes without a new best.
    """

    name: ClassVar[str] = "greedy"
    parameters: ClassVar[tuple[Param, ...]] = (
        Param("branches", int, 1, "children of the best node per step", min=1),
        Param("iterations", int, 3, "iterations per trajectory", min=1),
        Param("patience", int, 0, "stop after this many nodes without improvement (0 = never)",
              min=0),
        KERNEL_CLASS,
    )
    branches: int
    iterations: int
    patience: int
    kernel_class: str

    def propose(self, graph: SearchGraph, budget: Budget, decision: int) -> Sequence[Decision]:
        if graph.pending:
            return []
        best = graph.best
        if self.patience and best is not None:
            since = graph.nodes[[n.node_id for n in graph.nodes].index(best.node_id) + 1:]
            if sum(1 for n in since if n.evaluated) >= self.patience:
                return [Stop(f"greedy: {self.patience} nodes without a better one")]
        for node in ranked(graph):
            if not budget.allows_child_of(node):
                continue
            avoid = path_levers(graph, node.node_id) | child_levers(graph, node.node_id)
            levers = pick_levers(self.rng(decision), self.kernel_class, self.branches, avoid,
                                 prefer=node.next_levers)
            return [Expand(node.node_id, hint([lv], self.kernel_class), self.iterations)
                    for lv in levers]
        return [Stop("greedy: no node can be expanded within the depth limit")]
