"""`parallel`: N independent trajectories from the root, then Stop (published: 5 x 5)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from projections.searchgraph import SearchGraph
from searchpolicies.base import Budget, Decision, Expand, Param, SearchPolicy, Stop
from searchpolicies.common import KERNEL_CLASS, hint, lever_of, pick_levers


class ParallelPolicy(SearchPolicy):
    """All trajectories start from the root at once; the best of them wins.

    Without hints every trajectory gets the same prompt (the published setting: diversity
    comes from sampling); with `hints=true` each gets a different lever.
    """

    name: ClassVar[str] = "parallel"
    parameters: ClassVar[tuple[Param, ...]] = (
        Param("trajectories", int, 5, "independent trajectories from the root", min=1),
        Param("iterations", int, 5, "iterations per trajectory", min=1),
        Param("hints", bool, False, "give each trajectory a different lever as its hint"),
        KERNEL_CLASS,
    )
    trajectories: int
    iterations: int
    hints: bool
    kernel_class: str

    def propose(self, graph: SearchGraph, budget: Budget, decision: int) -> Sequence[Decision]:
        root = graph.root
        if root is None:
            return []
        existing = graph.children(root.node_id)
        missing = self.trajectories - len(existing)
        if missing > 0:
            levers = pick_levers(self.rng(decision), self.kernel_class, missing,
                                 avoid=[lever_of(c) for c in existing])
            return [Expand(root.node_id, hint([lv], self.kernel_class) if self.hints and lv else "",
                           self.iterations) for lv in levers + [""] * (missing - len(levers))]
        if graph.pending:
            return []
        return [Stop(f"parallel: all {self.trajectories} trajectories evaluated")]
