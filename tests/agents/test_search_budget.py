"""A plan that writes no kernel costs no candidate, and a search whose author keeps writing
nothing stops instead of expanding exhausted nodes for ever."""

from __future__ import annotations

from typing import Any

from agents.commands import StartSearch
from agents.search import BARREN_NODES, barren_stop, budget_of
from eventstore.events import Event, ExpansionRequested, NodeEvaluated, new_event_id

RUN = "run-budget"


def emit(cls: type[Event], node: str, **payload: Any) -> Any:
    return cls(event_id=new_event_id(), run_id=RUN, ts=1.0, producer="test@1", node_id=node,
               **payload)


def node(node_id: str, *, iterations: int, no_gain_plans: int) -> list[Event]:
    return [emit(ExpansionRequested, node_id, parent_id="root", policy="greedy", strategy="",
                 iterations=iterations, decision=0),
            emit(NodeEvaluated, node_id, valid=False, compiled=False, iterations=iterations,
                 no_gain_plans=no_gain_plans)]


def start(**limits: Any) -> StartSearch:
    return StartSearch(run_id=RUN, command_id="c1", ts=1.0, task_sha256="T", task_file="t.py",
                       task_name="t", target_name="sim-tpu-v6e", provider="offline",
                       policy="greedy", **limits)


def test_a_plan_that_wrote_no_kernel_costs_no_candidate() -> None:
    history = [*node("n1", iterations=3, no_gain_plans=0), *node("n2", iterations=2, no_gain_plans=1),
               *node("n3", iterations=1, no_gain_plans=1),
               emit(ExpansionRequested, "n4", parent_id="root", policy="greedy", strategy="",
                    iterations=3, decision=1)]
    budget = budget_of(start(max_candidates=12), history, now=2.0)
    assert budget.candidates_used == 3 + 1 + 0 + 3  # n4 is pending: the iterations it was given
    assert budget.nodes_used == 4


def test_the_search_stops_after_enough_nodes_in_a_row_wrote_nothing() -> None:
    history = node("n0", iterations=2, no_gain_plans=0)
    for i in range(1, BARREN_NODES):
        history += node(f"n{i}", iterations=1, no_gain_plans=1)
    assert barren_stop(history, concurrency=1) is None  # one short
    history += node("nx", iterations=1, no_gain_plans=1)
    reason = barren_stop(history, concurrency=1)
    assert reason is not None and f"last {BARREN_NODES} nodes" in reason
    assert barren_stop(history, concurrency=BARREN_NODES) is None  # wider searches wait longer
    history += node("ny", iterations=3, no_gain_plans=2)  # a node that wrote one kernel
    assert barren_stop(history, concurrency=1) is None
