"""What a child's planner is told about its siblings: the expansions of its run requested
before it that have not ended (their next choices are not in the plans it reads yet)."""

from __future__ import annotations

from typing import Any

from agents.runplans import unseen_siblings
from eventstore.events import ExpansionRequested, KernelWritten, NodeEvaluated

RUN = "run-1"


def _requested(node: str) -> ExpansionRequested:
    return ExpansionRequested.create(run_id=RUN, producer="search@1", node_id=node,
                                     parent_id="root", policy="parallel")


def _unseen(node: str, events: list[Any]) -> int:
    return unseen_siblings(lambda *types: [e for e in events if isinstance(e, types)], RUN, node)


def test_siblings_requested_at_once_are_unseen_until_they_end() -> None:
    batch = [_requested(n) for n in ("a", "b", "c")]
    assert [_unseen(n, batch) for n in ("a", "b", "c")] == [0, 1, 2]
    # a sibling that wrote its first kernel plans its second beside this one: still unseen
    wrote = KernelWritten.create(run_id=RUN, producer="implementer@1", node_id="a",
                                 code_sha256="x", iteration=1)
    assert _unseen("c", [*batch, wrote]) == 2
    ended = [NodeEvaluated.create(run_id=RUN, producer="auto@1", node_id=n, valid=False,
                                  compiled=False) for n in ("a", "b")]
    assert _unseen("c", [*batch, wrote, ended[1]]) == 1
    assert _unseen("c", [*batch, wrote, *ended]) == 0


def test_a_sequential_child_and_a_single_trajectory_have_none() -> None:
    first, second = _requested("a"), _requested("b")
    ended = NodeEvaluated.create(run_id=RUN, producer="auto@1", node_id="a", valid=True,
                                 compiled=True)
    assert _unseen("b", [first, ended, second]) == 0
    assert _unseen("solo", []) == 0  # an Auto run: no expansion was requested
    other_run = ExpansionRequested.create(run_id="run-2", producer="search@1", node_id="z",
                                          parent_id="root", policy="greedy")
    assert _unseen("b", [other_run, first, second]) == 1
