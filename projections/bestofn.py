"""Best-of-N history: every iteration of every trajectory, and where each rolls back to.

A trajectory runs N iterations and ends on its best valid one, not its last: the
rollback target is the lowest-latency valid iteration (the earliest wins a tie).
"""

from __future__ import annotations

import msgspec

from eventstore.events import Event, IterationFinished, Json, MeasuredOn, NodeEvaluated
from projections.base import Projection, handles


class IterationSnapshot(msgspec.Struct, kw_only=True):
    iteration: int
    valid: bool
    compiled: bool
    latency_s: float | None = None
    speedup: float | None = None
    measured_on: MeasuredOn = "simulated"
    code_sha256: str | None = None
    plan_sha256: str | None = None
    tunables: Json = {}
    failed_phase: str | None = None
    error: str = ""
    no_gain: bool = False
    """The plan wrote no kernel: no failure, and no kernel to count."""


class Trajectory(msgspec.Struct, kw_only=True):
    run_id: str
    node_id: str
    history: list[IterationSnapshot] = []
    rollback: int | None = None
    """Index into `history` of the rollback target."""
    evaluated_iteration: int | None = None
    """What the trajectory's NodeEvaluated reported, for cross-checking."""

    @property
    def target(self) -> IterationSnapshot | None:
        return None if self.rollback is None else self.history[self.rollback]


class BestOfNState(msgspec.Struct, kw_only=True):
    run_id: str | None = None
    trajectories: dict[str, Trajectory] = {}


class BestOfN(Projection[BestOfNState]):
    state_type = BestOfNState

    def __init__(self, run_id: str | None = None) -> None:
        super().__init__()
        self.state.run_id = run_id

    def accepts(self, event: Event) -> bool:
        return self.state.run_id is None or event.run_id == self.state.run_id

    def _trajectory(self, e: Event) -> Trajectory:
        key = f"{e.run_id}/{e.node_id}"
        traj = self.state.trajectories.get(key)
        if traj is None:
            traj = self.state.trajectories[key] = Trajectory(run_id=e.run_id, node_id=e.node_id or "")
        return traj

    @handles(IterationFinished)
    def _iteration(self, e: IterationFinished) -> None:
        traj = self._trajectory(e)
        traj.history.append(
            IterationSnapshot(
                iteration=e.iteration, valid=e.valid, compiled=e.compiled, latency_s=e.latency_s,
                speedup=e.speedup, measured_on=e.measured_on, code_sha256=e.code_sha256,
                plan_sha256=e.plan_sha256, tunables=dict(e.tunables), failed_phase=e.failed_phase,
                error=e.error, no_gain=e.no_gain,
            )
        )
        if e.valid and e.latency_s is not None:
            current = traj.target
            if current is None or e.latency_s < current.latency_s:  # type: ignore[operator]
                traj.rollback = len(traj.history) - 1

    @handles(NodeEvaluated)
    def _evaluated(self, e: NodeEvaluated) -> None:
        self._trajectory(e).evaluated_iteration = e.best_iteration

    def trajectory(self, node_id: str, run_id: str | None = None) -> Trajectory:
        run = run_id or self.state.run_id
        return self.state.trajectories[f"{run}/{node_id}"]

    @property
    def trajectories(self) -> list[Trajectory]:
        return list(self.state.trajectories.values())
