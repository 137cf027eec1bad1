"""Logs for the analysis tests: many synthetic runs over several policies and both labels."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import msgspec

from eventstore.events import Event, ExpansionRequested, MeasuredOn, NodeEvaluated, RunRequested
from eventstore.log import EventLog
from eventstore.synthetic import synthetic_run


def _as_policy(events: Iterator[Event], policy: str) -> list[Event]:
    out: list[Event] = []
    for e in events:
        if isinstance(e, RunRequested | ExpansionRequested):
            e = msgspec.structs.replace(e, policy=policy)
        out.append(e)
    return out


def no_valid_run(run_id: str, policy: str = "greedy") -> list[Event]:
    """A finished run none of whose trajectories produced a correct kernel."""
    for seed in range(500):
        events = list(synthetic_run(random.Random(seed), run_id=run_id, nodes=2, iterations=1))
        if not any(isinstance(e, NodeEvaluated) and e.valid for e in events):
            return _as_policy(iter(events), policy)
    raise AssertionError("no seed below 500 gives a run without a valid node")


def mixed_runs(seed: int = 3) -> list[Event]:
    """Beam, greedy and parallel runs, simulated and real, one unfinished, one with no valid node;
    in every other run two more nodes wrote no kernel (their plans found nothing to write)."""
    rng = random.Random(seed)
    events: list[Event] = []
    plan: list[tuple[str, MeasuredOn, bool]] = [
        ("beam", "simulated", True), ("beam", "simulated", True), ("beam", "real", True),
        ("greedy", "simulated", True), ("greedy", "simulated", False),
        ("parallel", "simulated", True), ("parallel", "real", True), ("parallel", "simulated", True),
    ]
    for i, (policy, label, finish) in enumerate(plan):
        run = synthetic_run(rng, run_id=f"run-{i:02d}", nodes=rng.randrange(2, 7),
                            iterations=rng.randrange(1, 4), measured_on=label, finish=finish,
                            stopped_nodes=2 * (i % 2), priced_nodes=i % 3)
        events.extend(_as_policy(run, policy))
    events.extend(no_valid_run("run-novalid"))
    return events


def write_log(path: Path, events: list[Event]) -> Path:
    with EventLog(path) as log:
        log.append(events)
    return path
