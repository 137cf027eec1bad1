"""The search graph of one run: nodes, their outcomes, the frontier and the best node.

The root is the kernel request (the XLA baseline, speedup 1.0); every other node is one
trajectory requested by the search policy. Policies read this projection and nothing
else, so the same log always yields the same decisions.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from eventstore.events import (
    PRICE_PHASE,
    BaselineMeasured,
    Event,
    ExpansionRequested,
    IterationFinished,
    Json,
    MeasuredOn,
    NodeEvaluated,
    PlanProposed,
    RunFinished,
    RunRequested,
    SearchStopped,
)
from projections.base import Projection, handles


def wrote_no_kernel(iterations: int, no_gain_plans: int) -> bool:
    """A trajectory whose every iteration was a plan that wrote no kernel (`no_gain`)."""
    return 0 < iterations <= no_gain_plans


def priced_out(iteration: IterationFinished) -> bool:
    """An iteration whose kernel compiled and was priced no faster than its node's parent
    (`failed_phase` PRICE_PHASE): it was never tested, so it is neither correct nor wrong."""
    return not iteration.valid and iteration.failed_phase == PRICE_PHASE


def tested_no_kernel(iterations: int, no_gain_plans: int, priced_out: int) -> bool:
    """A trajectory that wrote kernels and had every one priced no faster than its parent
    (`failed_phase` "price"): each compiled, none was tested."""
    written = iterations - no_gain_plans
    return 0 < written <= priced_out


NodeStatus = Literal["root", "pending", "running", "valid", "invalid"]
"""pending: requested, no iteration finished yet; running: at least one finished."""


class Node(msgspec.Struct, kw_only=True):
    node_id: str
    parent_id: str | None
    depth: int
    status: NodeStatus
    strategy: str = ""
    policy: str = ""
    children: list[str] = []
    iterations_done: int = 0
    no_gain_plans: int = 0
    """Iterations whose plan wrote no kernel: they cost no candidate."""
    priced_out: int = 0
    """Kernels priced no faster than the node's parent: compiled, never tested."""
    plan_sha256: str | None = None
    code_sha256: str | None = None
    compiled: bool | None = None
    correct: bool | None = None
    latency_s: float | None = None
    speedup: float | None = None
    measured_on: MeasuredOn | None = None
    tunables: Json = {}
    best_iteration: int | None = None
    next_levers: list[str] = []
    """The levers the plan of the node's best iteration names for its kernel, best first."""

    @property
    def evaluated(self) -> bool:
        return self.status in ("valid", "invalid")

    @property
    def wrote_no_kernel(self) -> bool:
        """Evaluated with every iteration a plan that wrote no kernel: nothing failed."""
        return self.status == "invalid" and wrote_no_kernel(self.iterations_done, self.no_gain_plans)

    @property
    def unjudged(self) -> str | None:
        """Why an invalid node failed nothing, in words: it wrote no kernel, or had every one
        priced no faster than its parent (none tested); None for any other node."""
        if self.wrote_no_kernel:
            return "no kernel written"
        if self.status == "invalid" and tested_no_kernel(
                self.iterations_done, self.no_gain_plans, self.priced_out):
            return "no kernel tested"
        return None


class SearchGraphState(msgspec.Struct, kw_only=True):
    run_id: str | None = None
    root_id: str | None = None
    task_name: str | None = None
    policy: str | None = None
    target: str | None = None
    baseline_latency_s: float | None = None
    baseline_measured_on: MeasuredOn | None = None
    nodes: dict[str, Node] = {}
    order: list[str] = []
    stopped: str | None = None
    finished: str | None = None
    plan_levers: dict[str, list[str]] = {}
    """Each plan's next levers, by the plan's sha256 (a node takes its best plan's)."""


class SearchGraph(Projection[SearchGraphState]):
    """Bound to one run: `SearchGraph(run_id)`, or to the first run it sees."""

    state_type = SearchGraphState

    def __init__(self, run_id: str | None = None) -> None:
        super().__init__()
        self.state.run_id = run_id

    def accepts(self, event: Event) -> bool:
        if self.state.run_id is None:
            self.state.run_id = event.run_id
        return event.run_id == self.state.run_id

    # --- folds ------------------------------------------------------------------------

    @handles(RunRequested)
    def _requested(self, e: RunRequested) -> None:
        root_id = e.node_id or "root"
        s = self.state
        s.root_id, s.task_name, s.policy, s.target = root_id, e.task_name, e.policy, e.target
        if root_id not in s.nodes:
            s.nodes[root_id] = Node(node_id=root_id, parent_id=None, depth=0, status="root",
                                    speedup=1.0, correct=True, compiled=True)
            s.order.append(root_id)

    @handles(BaselineMeasured)
    def _baseline(self, e: BaselineMeasured) -> None:
        s = self.state
        s.baseline_latency_s, s.baseline_measured_on = e.latency_s, e.measured_on
        root = s.nodes.get(s.root_id or "")
        if root is not None:
            root.latency_s, root.measured_on = e.latency_s, e.measured_on

    @handles(ExpansionRequested)
    def _expanded(self, e: ExpansionRequested) -> None:
        s = self.state
        node_id = e.node_id or e.event_id
        if node_id in s.nodes:
            return
        parent = s.nodes.get(e.parent_id)
        s.nodes[node_id] = Node(
            node_id=node_id,
            parent_id=e.parent_id,
            depth=(parent.depth + 1) if parent else 1,
            status="pending",
            strategy=e.strategy,
            policy=e.policy,
        )
        s.order.append(node_id)
        if parent is not None:
            parent.children.append(node_id)

    @handles(IterationFinished)
    def _iteration(self, e: IterationFinished) -> None:
        node = self.state.nodes.get(e.node_id or "")
        if node is None:
            return
        node.iterations_done += 1
        node.no_gain_plans += e.no_gain
        node.priced_out += priced_out(e)
        if node.status == "pending":
            node.status = "running"

    @handles(PlanProposed)
    def _planned(self, e: PlanProposed) -> None:
        if e.next_levers:
            self.state.plan_levers[e.plan_sha256] = list(e.next_levers)

    @handles(NodeEvaluated)
    def _evaluated(self, e: NodeEvaluated) -> None:
        node = self.state.nodes.get(e.node_id or "")
        if node is None:
            return
        node.status = "valid" if e.valid else "invalid"
        node.compiled, node.correct = e.compiled, e.valid
        node.code_sha256, node.plan_sha256 = e.code_sha256, e.plan_sha256
        node.latency_s, node.speedup, node.measured_on = e.latency_s, e.speedup, e.measured_on
        node.tunables, node.best_iteration = dict(e.tunables), e.best_iteration
        node.next_levers = list(self.state.plan_levers.get(e.plan_sha256 or "", []))
        node.iterations_done = max(node.iterations_done, e.iterations)
        node.no_gain_plans = max(node.no_gain_plans, e.no_gain_plans)
        if e.strategy and not node.strategy:
            node.strategy = e.strategy

    @handles(SearchStopped)
    def _stopped(self, e: SearchStopped) -> None:
        self.state.stopped = e.reason

    @handles(RunFinished)
    def _finished(self, e: RunFinished) -> None:
        self.state.finished = e.status

    # --- views ------------------------------------------------------------------------

    @property
    def run_id(self) -> str | None:
        return self.state.run_id

    @property
    def root(self) -> Node | None:
        return self.state.nodes.get(self.state.root_id or "")

    @property
    def nodes(self) -> list[Node]:
        """All nodes in the order they were created."""
        return [self.state.nodes[n] for n in self.state.order]

    def node(self, node_id: str) -> Node:
        return self.state.nodes[node_id]

    def children(self, node_id: str) -> list[Node]:
        return [self.state.nodes[c] for c in self.state.nodes[node_id].children]

    @property
    def pending(self) -> list[Node]:
        """Requested trajectories that have not been evaluated yet."""
        return [n for n in self.nodes if n.status in ("pending", "running")]

    @property
    def frontier(self) -> list[Node]:
        """Nodes worth expanding: the root and valid nodes, not expanded yet."""
        return [n for n in self.nodes if n.status in ("root", "valid") and not n.children]

    @property
    def best(self) -> Node | None:
        """The fastest valid node; the earliest wins a tie. None while only the root exists."""
        best: Node | None = None
        for node in self.nodes:
            if node.status == "valid" and node.speedup is not None and (
                best is None or node.speedup > best.speedup  # type: ignore[operator]
            ):
                best = node
        return best

    def by_depth(self) -> dict[int, list[Node]]:
        levels: dict[int, list[Node]] = {}
        for node in self.nodes:
            levels.setdefault(node.depth, []).append(node)
        return levels

    def path_to(self, node_id: str) -> list[Node]:
        """Root first."""
        path = []
        current: str | None = node_id
        while current is not None:
            node = self.state.nodes[current]
            path.append(node)
            current = node.parent_id
        return path[::-1]
