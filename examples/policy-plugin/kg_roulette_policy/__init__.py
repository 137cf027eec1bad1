"""`roulette`: an example plug-in policy for kernelgraph.

One expansion at a time: once nothing is pending, pick a parent among the root and the
valid nodes with probability proportional to speedup ** `sharpness`, and give it a lever
it has not had. Everything it knows comes from the graph and `rng(decision)`, so it passes
kernelgraph's conformance suite (`searchpolicies.testing.PolicyContract`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from projections.searchgraph import SearchGraph
from searchpolicies.base import Budget, Decision, Expand, Param, SearchPolicy
from searchpolicies.levers import format_strategy, levers_for, parse_strategy


class RoulettePolicy(SearchPolicy):
    """Fitness-proportional choice of the node to expand next."""

    name: ClassVar[str] = "roulette"
    parameters: ClassVar[tuple[Param, ...]] = (
        Param("iterations", int, 2, "iterations per trajectory", min=1),
        Param("sharpness", float, 2.0, "how strongly faster nodes are preferred", min=0.0),
    )
    iterations: int
    sharpness: float

    def propose(self, graph: SearchGraph, budget: Budget, decision: int) -> Sequence[Decision]:
        if graph.pending:
            return []
        rng = self.rng(decision)
        parents = [n for n in graph.nodes
                   if n.status in ("root", "valid") and budget.allows_child_of(n)]
        if not parents:
            return []  # the base turns "nothing to do, nothing pending" into a Stop
        weights = [(n.speedup or 0.0) ** self.sharpness + 1e-9 for n in parents]
        parent = rng.choices(parents, weights)[0]
        used = {lv for c in graph.children(parent.node_id)
                for lv in parse_strategy(c.strategy).levers}
        used |= {lv for n in graph.path_to(parent.node_id)
                 for lv in parse_strategy(n.strategy).levers}
        fresh = [lv.id for lv in levers_for() if lv.id not in used] or [levers_for()[0].id]
        return [Expand(parent.node_id, format_strategy([rng.choice(fresh)]), self.iterations)]
