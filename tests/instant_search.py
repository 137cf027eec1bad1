"""A search on a real nats-server and log whose agents answer at once (see
`benchmarks/instant_agents.py`): the orchestration alone, in seconds."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from bus.service import Service
from eventstore.events import Event
from eventstore.log import EventLog
from kernelgraph.client import KernelRequest, SearchLimits, submit, wait
from kernelgraph.runtime import Runtime, RuntimeConfig

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT / "benchmarks"))

from instant_agents import FAIL_HINT, INSTANT_AGENTS, InstantTrajectory  # noqa: E402

TASK = ROOT / "tasks" / "gelu.py"

__all__ = ["FAIL_HINT", "search"]


LIMITS = {f.name for f in dataclasses.fields(SearchLimits)}


async def search(tmp: Path, *, expect: str = "completed",
                 trajectory: type[Service] = InstantTrajectory, **request: object) -> list[Event]:
    """One search on a fresh runtime; the run's events as the log recorded them. `request`
    holds `KernelRequest` fields and `SearchLimits` fields alike; `trajectory` is the agent
    that runs the nodes (`ExpandNode`), for a test that records what they are told."""
    limits = SearchLimits(**{k: request.pop(k) for k in list(request) if k in LIMITS})  # type: ignore[arg-type]
    db = tmp / "log.duckdb"
    config = RuntimeConfig(db_path=db, agents=["search"])
    async with Runtime(config) as runtime:
        assert runtime.client is not None and runtime.recorder is not None
        nc = runtime.client.nc
        agents = [trajectory if cls is InstantTrajectory else cls for cls in INSTANT_AGENTS]
        fakes = [cls(nc, settings=config.settings, concurrency=16) for cls in agents]
        for fake in fakes:
            await fake.start()
        try:
            run = await submit(nc, KernelRequest(task=TASK, iterations=1, limits=limits, **request))  # type: ignore[arg-type]
            result = await wait(nc, run.run_id, timeout=120)
            await runtime.recorder.wait_idle(timeout=30)
        finally:
            for fake in fakes:
                await fake.stop()
    assert result.status == expect, result.reason
    with EventLog(db, read_only=True) as log:
        assert log.verify().ok
        return list(log.events(run_id=run.run_id))
