"""HITL driven through its commands: one phase per `next`, edits and jumps as events; a
finished session audits clean, as an Auto run must."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from eventstore.events import (
    HumanFeedbackGiven,
    IterationFinished,
    LlmCalled,
    NodeEvaluated,
    RunAudited,
    RunFinished,
    TestsRun,
    TuningSwept,
    WinnerVerified,
)
from eventstore.log import EventLog
from kernelgraph.cli import app, load_commands

TASK = Path(__file__).parents[1] / "evaltasks" / "rmsnorm_small.py"
PROVIDER = ["--provider", "scripted_provider:ScriptedProvider"]


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KG_WORKSPACE", str(tmp_path / "work"))
    monkeypatch.setenv("KG_KNOWLEDGE_PATH", str(tmp_path / "knowledge"))
    load_commands()


def kg(*args: str, env: dict[str, str] | None = None) -> str:
    result = CliRunner().invoke(app, list(args), env=env)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_session_runs_one_phase_per_step_and_resumes_from_the_log(tmp_path: Path) -> None:
    db = str(tmp_path / "session.duckdb")
    started = json.loads(kg("hitl", "start", str(TASK), "--db", db, *PROVIDER, "--json"))
    assert started["next_phase"] == "suite"
    assert "suite frozen" in kg("hitl", "next", "--db", db)
    assert "baseline" in kg("hitl", "next", "--db", db)
    # a jump whose inputs do not exist yet is refused
    refused = CliRunner().invoke(app, ["hitl", "goto", "test", "--db", db])
    assert refused.exit_code == 2 and "needs a kernel first" in refused.output
    assert "## Strategy" in kg("hitl", "next", "--db", db)
    kernel = kg("hitl", "next", "--db", db, "--feedback", "prefer 128-row blocks")
    assert "def build" in kernel
    editor = tmp_path / "editor.sh"
    editor.write_text('#!/bin/sh\nsed -i "s/\\[64, 32\\]/[128, 64]/" "$1"\n')
    editor.chmod(editor.stat().st_mode | stat.S_IEXEC)
    assert "next: compile" in kg("hitl", "edit", "kernel", "--db", db, env={"EDITOR": str(editor)})
    assert kg("hitl", "next", "--db", db).strip() == "compiled"
    assert "tests pass" in kg("hitl", "next", "--db", db)
    status = json.loads(kg("hitl", "status", "--db", db, "--json"))
    assert status["next_phase"] == "tune" and status["best"] is None
    assert "configuration" in kg("hitl", "next", "--db", db)
    status = json.loads(kg("hitl", "status", "--db", db, "--json"))
    assert status["best"]["config"] == {"block_rows": 128}, status  # the edited default
    # a second plan ends iteration 1; iteration 2 goes no further than its plan
    assert "next: plan" in kg("hitl", "goto", "plan", "--db", db)
    assert "## Strategy" in kg("hitl", "next", "--db", db)
    assert "audit: none yet" in kg("hitl", "status", "--db", db)
    assert "next: verify" in kg("hitl", "goto", "verify", "--db", db)
    closing = kg("hitl", "next", "--db", db)
    assert "re-verification: pass" in closing and "audit: clean" in closing, closing
    assert "session ended: completed" in closing
    ended = CliRunner().invoke(app, ["hitl", "next", "--db", db])
    assert ended.exit_code == 2 and "has ended" in ended.output
    status = json.loads(kg("hitl", "status", "--db", db, "--json"))
    assert status["finished"] == "completed" and status["audit"]["clean"], status
    assert "audit: clean" in kg("hitl", "status", "--db", db)
    audited = json.loads(kg("audit", db, "--run", started["run_id"], "--json"))
    assert audited["clean"] and audited["runs"][0]["findings"] == [], audited

    with EventLog(db, read_only=True) as log:
        events = list(log.events(run_id=started["run_id"]))
        human = [e for e in events if isinstance(e, HumanFeedbackGiven)]
        assert [(h.action, h.phase_name) for h in human] == [
            ("feedback", "implement"), ("edit", "kernel"), ("goto", "plan"), ("goto", "verify")]
        implement = next(e for e in events if isinstance(e, LlmCalled) and e.agent == "implementer")
        assert "prefer 128-row blocks" in log.get_artifact(implement.prompt_sha256).decode()
        (verified,) = [e for e in events if isinstance(e, WinnerVerified)]
        assert verified.verdict == "pass"
        (finished,) = [e for e in events if isinstance(e, RunFinished)]
        assert finished.best_node_id is not None and finished.status == "completed"
        # the session ends as Auto does: evaluated, re-verified, audited, then finished
        order = [type(e) for e in events
                 if isinstance(e, NodeEvaluated | WinnerVerified | RunAudited | RunFinished)]
        assert order == [NodeEvaluated, WinnerVerified, RunAudited, RunFinished]
        (audit,) = [e for e in events if isinstance(e, RunAudited)]
        assert audit.final and audit.clean
        first_it, second_it = [e for e in events if isinstance(e, IterationFinished)]
        proof = next(e for e in events if e.event_id == first_it.proof_event_id)
        assert isinstance(proof, TestsRun | TuningSwept) and first_it.valid
        assert first_it.verdict_sha256 is not None
        assert proof.verdict_sha256 == first_it.verdict_sha256
        assert not second_it.valid and second_it.iteration == 2
        (node,) = [e for e in events if isinstance(e, NodeEvaluated)]
        assert node.best_iteration == 1 and node.verdict_sha256 == first_it.verdict_sha256
        assert node.speedup == first_it.speedup and finished.speedup is not None
        assert log.get_artifact(human[1].artifact_sha256 or "").decode().count("[128, 64]") == 1


def test_status_of_a_log_without_a_session_is_a_clear_error(tmp_path: Path) -> None:
    missing = CliRunner().invoke(app, ["hitl", "status", "--db", str(tmp_path / "none.duckdb")])
    assert missing.exit_code == 2 and "start a session" in missing.output
