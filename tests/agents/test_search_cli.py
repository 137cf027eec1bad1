"""`kernelgraph search` as a user runs it: offline author, embedded runtime, winner on disk.

The search is `real_run` (tests/realrun.py), run once for the tests that read a real run.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from eventstore.log import EventLog
from projections.searchgraph import SearchGraph
from tests.realrun import TASK, RealRun, kg


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_search_writes_a_verified_winner_and_its_receipt_and_replays_alike(
        real_run: RealRun, tmp_path: Path) -> None:
    env, db = real_run.env, real_run.db
    assert real_run.returncode == 0, real_run.stderr[-3000:]
    summary = real_run.summary
    best = summary["best"]
    assert summary["status"] == "completed" and best["verified"] and best["measured_on"] == "simulated"
    assert best["speedup"] > 0 and summary["nodes"] == 1
    kernel = Path(best["kernel_path"])
    assert kernel.parent == db.with_name(db.name + ".winners") and "def build" in kernel.read_text()
    assert "suite frozen" in real_run.stderr and "winner re-verified: pass" in real_run.stderr

    # The file on disk is the kernel the run re-verified in a fresh sandbox, with the winning
    # configuration: its signed receipt names this file's sha256 (the standalone `verify`
    # command itself is tested in tests/test_verify.py).
    receipt = json.loads(Path(best["receipt_path"]).read_text())
    assert receipt["verdict"] == "pass" and receipt["target"] == "sim-tpu-v6e"
    assert receipt["candidate"]["sha256"] == hashlib.sha256(kernel.read_bytes()).hexdigest()
    assert best["config"].items() <= receipt["candidate"]["config"].items()
    assert kg("verify-receipt", best["receipt_path"], "--candidate", str(kernel), "--task",
              str(TASK), env=env).returncode == 0

    replayed = kg("search", str(TASK), "--db", str(tmp_path / "replay.duckdb"), "--iterations", "1",
                  "--tune-budget", "2", "--provider", "replay", "--replay-from", str(db), "--json",
                  env=env)
    assert replayed.returncode == 0, replayed.stderr[-3000:]
    again = json.loads(replayed.stdout)["best"]
    digest = hashlib.sha256(kernel.read_bytes()).hexdigest()
    assert hashlib.sha256(Path(again["kernel_path"]).read_bytes()).hexdigest() == digest
    assert again["config"] == best["config"]
    calls = []
    for log_path, run_id in ((db, summary["run_id"]), (tmp_path / "replay.duckdb", json.loads(replayed.stdout)["run_id"])):
        with EventLog(log_path, read_only=True) as log:
            calls.append([(e.agent, e.prompt_sha256, e.response_sha256, e.provider)
                          for e in log.events(run_id=run_id, types=["LlmCalled"])])
    assert [c[:3] for c in calls[0]] == [c[:3] for c in calls[1]] and calls[0]
    assert {c[3] for c in calls[0]} == {"offline"} and {c[3] for c in calls[1]} == {"replay"}
    # the winner's plan names what can still change in its kernel; the graph rebuilt from
    # the log hands those levers to the policy, first the ones that remove work
    graph = SearchGraph(summary["run_id"])
    with EventLog(db, read_only=True) as log:
        plans = list(log.events(run_id=summary["run_id"], types=["PlanProposed"]))
        graph.apply_all(log.events(run_id=summary["run_id"]))
    (node,) = [n for n in graph.nodes if n.status == "valid"]
    assert node.next_levers == plans[0].next_levers and node.next_levers[0] == "block_shape"
