"""Fold a whole log (or one run of it) into every projection a user looks at."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from eventstore.events import EVENT_TYPES, Event
from projections.bestofn import BestOfN
from projections.metrics import Metrics
from projections.searchgraph import Node, SearchGraph


class LogView:
    """Search graph per run, best-of-N history and metrics, kept in step."""

    def __init__(self, run_id: str | None = None) -> None:
        self.run_id = run_id
        self.graphs: dict[str, SearchGraph] = {}
        self.best_of_n = BestOfN(run_id)
        self.metrics = Metrics(run_id)
        self.position = 0
        self.events = 0

    def apply(self, event: Event, seq: int | None = None) -> None:
        self.apply_records([(self.position if seq is None else seq, event)])

    def apply_records(self, records: Iterable[tuple[int, Event]]) -> LogView:
        """The replay hot loop: the same folds as each projection's `apply`, one lookup per event."""
        plan, best, metrics = _DISPATCH, self.best_of_n, self.metrics
        graphs, only_run = self.graphs, self.run_id
        seq, count = self.position, 0
        for seq, event in records:  # noqa: B007 (the last seq is the new position)
            run_id = event.run_id
            if only_run is not None and run_id != only_run:
                continue
            count += 1
            handlers = plan.get(type(event))
            if handlers is None:
                continue
            on_graph, on_best, on_metrics = handlers
            if on_graph is not None:
                graph = graphs.get(run_id)
                if graph is None:
                    graph = graphs[run_id] = SearchGraph(run_id)
                on_graph(graph, event)
            if on_best is not None:
                on_best(best, event)
            if on_metrics is not None:
                on_metrics(metrics, event)
        self.events += count
        self.position = best.position = metrics.position = seq
        for graph in graphs.values():
            graph.position = seq
        return self

    def to_json(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "events": self.events,
            "runs": {run_id: graph_json(graph) for run_id, graph in self.graphs.items()},
            "metrics": self.metrics.summary(),
        }


_DISPATCH = {
    cls: (SearchGraph._handlers.get(cls), BestOfN._handlers.get(cls), Metrics._handlers.get(cls))
    for cls in EVENT_TYPES
    if cls in SearchGraph._handlers or cls in BestOfN._handlers or cls in Metrics._handlers
}


def node_json(node: Node) -> dict[str, Any]:
    return {
        "node_id": node.node_id,
        "parent_id": node.parent_id,
        "depth": node.depth,
        "status": node.status,
        "strategy": node.strategy,
        "iterations": node.iterations_done,
        "compiled": node.compiled,
        "correct": node.correct,
        "latency_s": node.latency_s,
        "speedup": node.speedup,
        "measured_on": node.measured_on,
        "code_sha256": node.code_sha256,
        "tunables": node.tunables,
    }


def graph_json(graph: SearchGraph) -> dict[str, Any]:
    s = graph.state
    best = graph.best
    return {
        "task": s.task_name,
        "policy": s.policy,
        "target": s.target,
        "baseline_latency_s": s.baseline_latency_s,
        "baseline_measured_on": s.baseline_measured_on,
        "best_node": best.node_id if best else None,
        "best_speedup": best.speedup if best else None,
        "frontier": [n.node_id for n in graph.frontier],
        "stopped": s.stopped,
        "finished": s.finished,
        "nodes": [node_json(n) for n in graph.nodes],
    }
