"""A search on a deployment whose two executor processes share it: real processes
(nats-server, `kernelgraph up` with every agent but the executor, two executor processes, the
offline author) on a small task with the `parallel` policy. The same search on the embedded
runtime killed twice and resumed is in `test_search_resume.py`, so the two run side by side.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from search_processes import NODES, SEARCH, TASK, environment, kg, run_facts

from bus.server import EmbeddedNats

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
    assert summary["nodes"] == NODES and len(facts["requested"]) == NODES
    assert sorted(facts["requested"]) == sorted(facts["evaluated"])
    assert facts["decisions"][0] == 0 and len(facts["decisions"]) == len(set(facts["decisions"]))
    (audit,) = facts["audits"]
    assert audit.clean and audit.chain_ok
    (finished,) = facts["finished"]
    assert finished.best_node_id in facts["requested"] and finished.status == "completed"
    audited = kg("audit", str(db), "--json", env=environment(db.parent))
    assert audited.returncode == 0, audited.stdout[-2000:] + audited.stderr[-2000:]
