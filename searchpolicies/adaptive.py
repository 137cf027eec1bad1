"""`adaptive`: a bandit over levers, learnt from the graph, splitting deepening and exploring."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from projections.searchgraph import Node, SearchGraph
from searchpolicies.base import Budget, Decision, Expand, Param, SearchPolicy, Stop
from searchpolicies.common import (
    KERNEL_CLASS,
    child_levers,
    hint,
    levers_of,
    path_levers,
    ranked,
    speedup,
)
from searchpolicies.levers import levers_for


@dataclass(frozen=True)
class LeverStats:
    pulls: int
    mean_gain: float


class AdaptivePolicy(SearchPolicy):
    """Explore/exploit over levers; its state (what each lever has paid) is read from the graph.

    A lever's gain at a node is the node's speedup over its parent's (0 for an invalid
    node), credited to every lever its hint names. Each round (once nothing is pending)
    asks for `batch` children of the best node, falling back to the next best when the
    depth limit or used-up levers forbid. Each child explores (takes an untried lever)
    always while no lever has been tried, else with probability `explore x (untried
    levers / all levers) x (the smaller share of the node or candidate budget left)`.
    Otherwise it deepens with the tried lever of highest upper confidence bound,
    `mean gain + ucb x sqrt(ln pulls / lever pulls)`.
    With `patience` > 0 it stops after that many evaluated nodes without a new best.
    """

    name: ClassVar[str] = "adaptive"
    parameters: ClassVar[tuple[Param, ...]] = (
        Param("batch", int, 2, "children asked for per round", min=1),
        Param("iterations", int, 2, "iterations per trajectory", min=1),
        Param("explore", float, 0.6, "share of children for untried levers, at the start",
              min=0.0, max=1.0),
        Param("ucb", float, 0.5, "exploration bonus of rarely pulled levers", min=0.0),
        Param("patience", int, 0, "stop after this many nodes without improvement (0 = never)",
              min=0),
        KERNEL_CLASS,
    )
    batch: int
    iterations: int
    explore: float
    ucb: float
    patience: int
    kernel_class: str

    def stats(self, graph: SearchGraph) -> dict[str, LeverStats]:
        """What each lever has paid so far on this task."""
        gains: dict[str, list[float]] = {}
        for node in graph.nodes:
            if node.parent_id is None or not node.evaluated:
                continue
            base = speedup(graph.node(node.parent_id))
            gain = speedup(node) / base if node.status == "valid" and base > 0 else 0.0
            for lv in levers_of(node):
                gains.setdefault(lv, []).append(gain)
        return {lv: LeverStats(len(g), sum(g) / len(g)) for lv, g in gains.items()}

    def explore_share(self, graph: SearchGraph, budget: Budget, untried: int, total: int) -> float:
        shares = [1.0]
        if budget.max_nodes:
            shares.append((budget.nodes_left(graph) or 0) / budget.max_nodes)
        if budget.max_candidates:
            shares.append((budget.candidates_left(graph) or 0) / budget.max_candidates)
        return self.explore * (untried / max(1, total)) * min(shares)

    def propose(self, graph: SearchGraph, budget: Budget, decision: int) -> Sequence[Decision]:
        if graph.root is None or graph.pending:
            return []
        best = graph.best
        if self.patience and best is not None:
            ids = [n.node_id for n in graph.nodes]
            since = graph.nodes[ids.index(best.node_id) + 1:]
            if sum(1 for n in since if n.evaluated) >= self.patience:
                return [Stop(f"adaptive: {self.patience} nodes without a better one")]
        rng = self.rng(decision)
        stats = self.stats(graph)
        catalogue = [lv.id for lv in levers_for(self.kernel_class)]
        untried = [lv for lv in catalogue if lv not in stats]
        rng.shuffle(untried)
        pulls = sum(s.pulls for s in stats.values())
        by_score = sorted(
            (lv for lv in catalogue if lv in stats),
            key=lambda lv: -(stats[lv].mean_gain
                             + self.ucb * math.sqrt(math.log(max(pulls, 1)) / stats[lv].pulls)))
        share = self.explore_share(graph, budget, len(untried), len(catalogue))
        parents = [n for n in ranked(graph) if budget.allows_child_of(n)]
        taken: dict[str, set[str]] = {}
        out: list[Expand] = []
        for _ in range(self.batch):
            exploring = bool(untried) and (not stats or rng.random() < share)
            order = untried if exploring else by_score + untried
            choice = self._place(graph, parents, order, taken)
            if choice is None:
                break
            parent, lv = choice
            if lv in untried:
                untried.remove(lv)
            out.append(Expand(parent.node_id, hint([lv], self.kernel_class), self.iterations))
        return out

    @staticmethod
    def _place(graph: SearchGraph, parents: list[Node], order: list[str],
               taken: dict[str, set[str]]) -> tuple[Node, str] | None:
        """The best parent that has not had the first usable lever of `order` yet."""
        for parent in parents:
            used = taken.setdefault(parent.node_id, path_levers(graph, parent.node_id)
                                    | child_levers(graph, parent.node_id))
            for lv in order:
                if lv not in used:
                    used.add(lv)
                    return parent, lv
        return None
