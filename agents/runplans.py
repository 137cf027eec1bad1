"""What a planner is told of the rest of its run: the plans the run already wrote kernels
from, and how many siblings are planning beside it with nothing written yet. Both are read
from the run's events, so a replayed or resumed run tells its planner the same."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from eventstore.events import Event, ExpansionRequested, KernelWritten, NodeEvaluated, PlanProposed

MAX_WRITTEN_PLANS = 64
"""How many of the run's written plans a planner is told about (the newest)."""

OfType = Callable[..., Sequence[Event]]
"""`RunHistory.of_type`: the run's events of the given types, in log order."""


def written_plans(of_type: OfType, run_id: str) -> list[str]:
    """The plans this run wrote kernels from, oldest first (what a planner avoids
    repeating), this node's earlier iterations too: one priced not faster never becomes
    the next iteration's parent, so without it the next would write the same kernel."""
    planned = {(e.node_id, e.iteration): e.plan_sha256 for e in of_type(PlanProposed)
               if e.run_id == run_id and not e.no_gain}
    written = [planned.get((e.node_id, e.iteration)) for e in of_type(KernelWritten)
               if e.run_id == run_id]
    return list(dict.fromkeys(sha for sha in written if sha))[-MAX_WRITTEN_PLANS:]


def unseen_siblings(of_type: OfType, run_id: str, node_id: str) -> int:
    """The run's expansions requested before `node_id` that have not ended: what they choose
    next is not in `written_plans` yet, even where they wrote a kernel already (two siblings
    in their second iterations plan at once). A sequential policy's child has none, and takes
    the evidence's first choice that nobody wrote; the k-th of a batch running at once has
    k - 1, and steps past the choices they may be taking."""
    requested = [e.node_id for e in of_type(ExpansionRequested) if e.run_id == run_id]
    if node_id not in requested:
        return 0
    ended = {e.node_id for e in of_type(NodeEvaluated) if e.run_id == run_id}
    before = requested[:requested.index(node_id)]
    return sum(1 for node in dict.fromkeys(before) if node not in ended)
