"""Shared by the tests that run a whole search in real `kernelgraph` processes: the small
task and search they run, their environment, and the facts read back from the log."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from eventstore.log import EventLog
from tests.realrun import kg  # noqa: F401  (the tests that share this module call it from here)

TASK = Path(__file__).parents[1] / "evaltasks" / "rmsnorm_small.py"
SEARCH = ["--policy", "parallel", "--param", "trajectories=2", "--iterations", "1",
          "--tune-budget", "1", "--fix-rounds", "1", "--concurrency", "2"]
"""Two trajectories of one iteration: an uninterrupted run always ends with two nodes."""
NODES = 2


def environment(tmp: Path) -> dict[str, str]:
    return {**os.environ, "KG_WORKSPACE": str(tmp / "work"), "KG_KNOWLEDGE_PATH": str(tmp / "knowledge"),
            "KG_BUS_ACK_WAIT_S": "5", "KG_AUDIT_INTERVAL_S": "20"}


def run_until(args: list[str], env: dict[str, str], marker: str, timeout: float = 600) -> str:
    """Start `kernelgraph ARGS`, SIGKILL it when a progress line contains `marker`; its stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "kernelgraph", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if marker in line:
                seen.set()
                proc.send_signal(signal.SIGKILL)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(timeout=10)
    assert seen.is_set(), f"never saw {marker!r}; exit {proc.returncode}:\n{''.join(lines)[-3000:]}"
    assert proc.returncode == -signal.SIGKILL
    return "".join(lines)


def run_facts(db: Path) -> dict[str, object]:
    with EventLog(db, read_only=True) as log:
        assert log.verify().ok
        (run,) = log.runs()
        events = list(log.events(run_id=run.run_id))
    requested = [e.node_id for e in events if e.type_name == "ExpansionRequested"]
    evaluated = [e.node_id for e in events if e.type_name == "NodeEvaluated"]
    audits = [e for e in events if e.type_name == "RunAudited" and e.final]
    finished = [e for e in events if e.type_name == "RunFinished"]
    return {"run_id": run.run_id, "requested": requested, "evaluated": evaluated,
            "decisions": [e.decision for e in events if e.type_name == "PolicyDecided"],
            "audits": audits, "finished": finished, "events": events}
