"""One search over agents in separate `kernelgraph serve` processes, as compose.yaml runs them.

The executor is SIGKILLed in the middle of a test run and the Auto orchestrator in the
middle of the trajectory; replacements pick up the redelivered commands, and the log ends
with every phase recorded exactly once.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from bus.connection import Credentials, connect
from bus.server import EmbeddedNats
from eventstore.events import Event, IterationFinished, RunFinished, TestsRun, WinnerVerified
from eventstore.log import EventLog
from kernelgraph.client import KernelRequest, follow, submit

TASK = Path(__file__).parents[1] / "evaltasks" / "rmsnorm_small.py"
AGENTS = ("test_synth", "baseline", "planner", "implementer", "fixer", "autotuner", "profiler",
          "verifier", "auditor")


class Services:
    def __init__(self, url: str, tmp: Path) -> None:
        self.url, self.tmp = url, tmp
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.env = {**os.environ, "KG_BUS_ACK_WAIT_S": "2", "KG_BUS_MAX_DELIVER": "5",
                    "KG_WORKSPACE": str(tmp / "work"),
                    "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent),
                                                   os.environ.get("PYTHONPATH", "")])}

    def start(self, name: str, agent: str, *args: str) -> None:
        env = {**self.env, "KG_KNOWLEDGE_PATH": str(self.tmp / f"knowledge-{name}")}
        log = (self.tmp / f"{name}.log").open("ab")
        self.processes[name] = subprocess.Popen(
            [sys.executable, "-m", "kernelgraph", "serve", agent, "--nats", self.url, *args],
            env=env, stdout=log, stderr=log)

    def kill(self, name: str) -> None:
        process = self.processes.pop(name)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)

    def tails(self, lines: int = 15) -> str:
        out = []
        for path in sorted(self.tmp.glob("*.log")):
            text = path.read_text(errors="replace").splitlines()
            out += [f"== {path.name}", *text[-lines:]]
        return "\n".join(out)

    def stop(self) -> None:
        for process in self.processes.values():
            process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_agents_in_separate_processes_survive_sigkill_mid_command(
    nats_server: EmbeddedNats, tmp_path: Path
) -> None:
    services = Services(nats_server.url, tmp_path)
    db = tmp_path / "log.duckdb"
    services.start("recorder", "recorder", "--db", str(db))
    services.start("auto", "auto")
    services.start("executor", "executor", "--concurrency", "1")
    for agent in AGENTS:
        services.start(agent, agent)
    nc = await connect(nats_server.url, name="test", credentials=Credentials())
    killed: list[str] = []
    try:
        request = KernelRequest(task=TASK, provider="scripted_provider:ScriptedProvider",
                                iterations=1, fix_rounds=1, tune_budget=1,
                                provider_options={"script": "fixed_once"})
        run = await submit(nc, request)
        events: list[Event] = []
        async with asyncio.timeout(780):
            async for event in follow(nc, run.run_id):
                events.append(event)
                if event.type_name == "CompileChecked" and event.ok and "executor" not in killed:
                    await asyncio.sleep(1.0)  # the executor is now running the tests
                    services.kill("executor")
                    killed.append("executor")
                    services.start("executor2", "executor", "--concurrency", "1")
                if isinstance(event, IterationFinished) and event.iteration == 1:
                    services.kill("auto")
                    killed.append("auto")
                    services.start("auto2", "auto")
    except BaseException:
        print(services.tails())
        raise
    finally:
        await nc.drain()
        services.stop()
    assert killed == ["executor", "auto"]
    with EventLog(db, read_only=True) as log:
        assert log.verify().ok
        recorded = list(log.events(run_id=run.run_id))
    assert len({e.event_id for e in recorded}) == len(recorded)
    per_phase = Counter((e.type_name, getattr(e, "iteration", None)) for e in recorded
                        if e.type_name not in ("LlmCalled", "ConfigMeasured"))
    # the broken kernel's check, one fix, the fixed kernel's check; everything else once
    assert per_phase[("CompileChecked", 1)] == 2 and per_phase[("FixAttempted", 1)] == 1
    for phase in ("PlanProposed", "KernelWritten", "TestsRun", "TuningSwept", "ProfileCaptured",
                  "IterationFinished"):
        assert per_phase[(phase, 1)] == 1, phase
    assert per_phase[("NodeEvaluated", None)] == 1
    assert [e.verdict for e in recorded if isinstance(e, WinnerVerified)] == ["pass"]
    (finished,) = [e for e in recorded if isinstance(e, RunFinished)]
    assert finished.status == "completed" and finished.best_node_id is not None
    assert all(t.passed for t in recorded if isinstance(t, TestsRun))
