"""A search on a deployment whose two executor processes share it, and the same search on
the embedded runtime killed twice with SIGKILL and resumed.

Both use real processes (nats-server, recorder, every agent, the offline author) on a small
task with the `parallel` policy: two trajectories of one iteration, so an uninterrupted run
always ends with two nodes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from bus.server import EmbeddedNats
from eventstore.log import EventLog

TASK = Path(__file__).parents[1] / "evaltasks" / "rmsnorm_small.py"
SEARCH = ["--policy", "parallel", "--param", "trajectories=2", "--iterations", "1",
          "--tune-budget", "1", "--fix-rounds", "1", "--concurrency", "2"]


def environment(tmp: Path) -> dict[str, str]:
    return {**os.environ, "KG_WORKSPACE": str(tmp / "work"), "KG_KNOWLEDGE_PATH": str(tmp / "knowledge"),
            "KG_BUS_ACK_WAIT_S": "5", "KG_AUDIT_INTERVAL_S": "20"}


def kg(*args: str, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernelgraph", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


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


AGENTS = ("test_synth", "baseline", "planner", "implementer", "fixer", "autotuner", "profiler",
          "verifier", "auto", "search", "auditor")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object], dict[str, object]]:
    """The search on a deployment: a nats-server, `kernelgraph up` with every agent but the
    executor, two `kernelgraph serve executor` processes sharing the work, `submit --wait`."""
    tmp = tmp_path_factory.mktemp("search")
    db = tmp / "runs.duckdb"
    env = environment(tmp)
    server = EmbeddedNats(tmp / "nats")
    server.start()
    kg_cmd = [sys.executable, "-m", "kernelgraph"]
    agents = [arg for name in AGENTS for arg in ("--agent", name)]
    up = subprocess.Popen([*kg_cmd, "up", "--nats", server.url, "--db", str(db), *agents], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    executors = [subprocess.Popen([*kg_cmd, "serve", "executor", "--nats", server.url,
                                   "--concurrency", "1", "--json"], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                 for _ in range(2)]
    try:
        done = kg("submit", str(TASK), "--nats", server.url, "--wait", "--json",
                  "--winner-dir", str(db), *SEARCH, env=env)
    finally:
        for proc in (*executors, up):
            proc.send_signal(signal.SIGTERM)
        handled = []
        for proc in executors:
            out, _ = proc.communicate(timeout=120)
            handled.append(json.loads(out)["completed"] if out.strip() else 0)
        _, up_err = up.communicate(timeout=120)
        server.stop()
    assert done.returncode == 0, done.stderr[-4000:] + up_err[-3000:]
    assert all(n > 0 for n in handled), f"commands handled per executor process: {handled}"
    return db, json.loads(done.stdout), run_facts(db)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_parallel_search_shared_by_two_executor_processes_ends_after_a_clean_audit(
        uninterrupted) -> None:
    db, summary, facts = uninterrupted
    assert summary["status"] == "completed" and summary["best"]["verified"]
    assert summary["nodes"] == 2 and len(facts["requested"]) == 2
    assert sorted(facts["requested"]) == sorted(facts["evaluated"])
    assert facts["decisions"][0] == 0 and len(facts["decisions"]) == len(set(facts["decisions"]))
    (audit,) = facts["audits"]
    assert audit.clean and audit.chain_ok
    (finished,) = facts["finished"]
    assert finished.best_node_id in facts["requested"] and finished.status == "completed"
    audited = kg("audit", str(db), "--json", env=environment(db.parent))
    assert audited.returncode == 0, audited.stdout[-2000:] + audited.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_search_killed_twice_resumes_without_redoing_or_duplicating_a_node(
        tmp_path: Path, uninterrupted) -> None:
    _, _, reference = uninterrupted
    env = environment(tmp_path)
    db = tmp_path / "runs.duckdb"
    first = run_until(["search", str(TASK), "--db", str(db), *SEARCH], env, "compile ok")
    assert "requested under root" in first
    second = run_until(["resume", str(db)], env, "evaluated:")
    assert "n1" in second or "n2" in second
    done = kg("resume", str(db), "--json", env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    assert json.loads(done.stdout)["best"]["verified"]

    facts = run_facts(db)
    assert len(facts["requested"]) == len(reference["requested"]) == 2
    assert len(set(facts["requested"])) == 2, "a node was requested twice"
    assert Counter(facts["evaluated"]) == Counter(facts["requested"]), "a node was judged twice or never"
    assert len(facts["decisions"]) == len(set(facts["decisions"]))
    (audit,) = facts["audits"]
    assert audit.clean, audit.findings
    (finished,) = facts["finished"]
    assert finished.status == "completed" and finished.best_node_id in facts["requested"]
    by_type = Counter((e.type_name, e.node_id, getattr(e, "iteration", None)) for e in facts["events"]
                      if e.type_name in ("PlanProposed", "KernelWritten", "TestsRun"))
    assert max(by_type.values()) == 1, "a finished step was redone"
