"""The search of `test_search_run.py` on the embedded runtime, killed twice with SIGKILL
(once mid-node, once after a node was evaluated) and resumed: it ends with the nodes an
uninterrupted run ends with, none requested, judged or stepped through twice, and a clean
final audit. Real processes (nats-server, recorder, every agent, the offline author)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from search_processes import NODES, SEARCH, TASK, environment, kg, run_facts, run_until


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_search_killed_twice_resumes_without_redoing_or_duplicating_a_node(
        tmp_path: Path) -> None:
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
    assert len(facts["requested"]) == NODES  # as many as an uninterrupted run (test_search_run)
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
