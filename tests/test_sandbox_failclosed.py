"""Fail closed: without the full sandbox no candidate code runs, and every command that
would run some refuses up front with one line; the explicit opt-in runs anyway and is
recorded in the verdict, the receipt, the run's events and the report.

A machine without namespaces is simulated for real: the launcher is pointed at an
`unshare` that does not exist, so the probe itself fails (as on a host without util-linux
or without the rights). The candidate writes a marker file when it is imported and when it
builds: the marker must not appear unless the user opted in.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from typer.testing import CliRunner

from tools.sandbox import namespaces, policy
from tools.sandbox.launcher import run_sandboxed

ROOT = Path(__file__).resolve().parent.parent
TASK = ROOT / "tests" / "evaltasks" / "gelu_small.py"
REFUSAL = "no candidate code runs here"


@pytest.fixture
def no_namespaces(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This host as one where the namespace sandbox cannot be built, and nobody opted in."""
    monkeypatch.setattr(namespaces, "UNSHARE", "kg-no-such-unshare")
    monkeypatch.setenv(policy.ALLOW_ENV, "")
    namespaces.probe.cache_clear()
    namespaces._userns.cache_clear()
    yield
    monkeypatch.undo()
    namespaces.probe.cache_clear()
    namespaces._userns.cache_clear()


@pytest.fixture
def marked(tmp_path: Path) -> tuple[Path, Path]:
    """(candidate, marker): a correct GELU kernel that leaves the marker when it runs."""
    marker = tmp_path / "candidate-ran"
    source = (ROOT / "kernels" / "gelu.py").read_text()
    candidate = tmp_path / "marked_gelu.py"
    candidate.write_text(
        source.replace("def build(", "def _build(", 1)
        + f"\n\ndef _mark():\n    with open({str(marker)!r}, 'a') as f:\n        f.write('ran')\n"
        + "\n\n_mark()\n\n\ndef build(block_rows: int = 256):\n    _mark()\n"
        + "    return _build(block_rows)\n")
    return candidate, marker


def _cli(*args: str):
    from kernelgraph.cli import app, load_commands

    load_commands()
    return CliRunner().invoke(app, list(args))


def test_without_the_sandbox_no_candidate_code_runs(no_namespaces, marked) -> None:
    from tools.performance.estimate import estimate
    from tools.sandbox import wire
    from tools.verification.verify import evaluate

    candidate, marker = marked
    assert policy.problem() and "kg-no-such-unshare not found" in policy.problem()
    with pytest.raises(policy.SandboxUnavailable, match=REFUSAL):
        evaluate(TASK, candidate)
    with pytest.raises(policy.SandboxUnavailable, match=REFUSAL):
        estimate(TASK, candidate)
    request = wire.EvalRequest(candidate_file="candidate.py", config={}, groups=(), order_seed=0)
    with pytest.raises(policy.SandboxUnavailable, match=REFUSAL):
        run_sandboxed("tools.child.worker", wire.encode(request),
                      files={"candidate.py": candidate.read_bytes()})
    with pytest.raises(policy.SandboxUnavailable, match="asked for no namespaces"):
        run_sandboxed("tools.child.worker", wire.encode(request), isolate=False,
                      files={"candidate.py": candidate.read_bytes()})
    assert not marker.exists()


@pytest.mark.parametrize("command", [
    ["verify", "{task}", "{candidate}"],
    ["estimate", "{task}", "{candidate}"],
    ["tune", "{task}", "{candidate}"],
    ["profile", "{task}", "{candidate}"],
    ["search", "{task}", "--quiet", "--db", "{tmp}/search.duckdb"],
    ["bench", "{task}", "--quiet", "--db", "{tmp}/bench.duckdb"],
    ["hitl", "start", "{task}", "--db", "{tmp}/hitl.duckdb"],
    ["hitl", "next", "--db", "{tmp}/hitl.duckdb"],
    ["resume", "{tmp}/resume.duckdb"],
    ["serve", "executor", "--nats", "nats://127.0.0.1:9"],
    ["up", "--db", "{tmp}/up.duckdb", "--duration", "1"],
], ids=lambda c: "-".join(c[:2]) if c[0] in ("hitl", "serve") else c[0])
def test_commands_refuse_up_front_in_one_line(no_namespaces, marked, tmp_path, command) -> None:
    candidate, marker = marked
    args = [a.format(task=TASK, candidate=candidate, tmp=tmp_path) for a in command]
    result = _cli(*args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and REFUSAL in lines[0], result.output
    assert "--allow-weak-sandbox" in lines[0] and policy.ALLOW_ENV in lines[0]
    assert "Traceback" not in result.output
    assert not marker.exists()
    assert not list(tmp_path.glob("*.duckdb")), "nothing is recorded for a refused run"


def test_the_opt_in_runs_and_every_verdict_records_it(no_namespaces, marked, tmp_path) -> None:
    candidate, marker = marked
    receipt = tmp_path / "receipt.json"
    result = _cli("verify", str(TASK), str(candidate), "--allow-weak-sandbox", "--json",
                  "--receipt-out", str(receipt))
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["verdict"] == "pass" and summary["weak_sandbox"] is True
    environment = json.loads(receipt.read_text())["environment"]  # signed with the rest
    assert environment["weak_sandbox"] is True
    assert policy.WEAK_LABEL in environment["isolation"]
    assert "pid-namespace" not in environment["isolation"]
    assert marker.exists()  # it ran, as asked, outside namespaces


def test_the_environment_variable_opts_in_too(no_namespaces, monkeypatch) -> None:
    monkeypatch.setenv(policy.ALLOW_ENV, "1")
    out = run_sandboxed("this", b"")  # prints a poem, exits 0
    assert out.returncode == 0 and policy.WEAK_LABEL in out.isolation
    assert "uid-65534" not in out.isolation


def test_the_run_and_its_report_record_the_opt_in(no_namespaces, tmp_path) -> None:
    from eventstore.events import RunRequested
    from eventstore.log import EventLog
    from projections.report import build_report

    db = tmp_path / "hitl.duckdb"
    result = _cli("hitl", "start", str(TASK), "--db", str(db), "--allow-weak-sandbox", "--json")
    assert result.exit_code == 0, result.output
    with EventLog(db) as log:
        requested = [e for _, e in log.read() if isinstance(e, RunRequested)]
        assert [e.weak_sandbox for e in requested] == [True] and requested[0].v == 2
        page = build_report(log, tmp_path / "report")
    assert "Weak sandbox" in page.read_text()


def test_a_run_recorded_before_the_field_reads_as_full() -> None:
    from eventstore.codec import decode_event
    from eventstore.events import RunRequested

    event = RunRequested.create(run_id="r", producer="p@1", task_name="t", task_sha256="s",
                                policy="auto", target="sim-tpu-v6e", provider="offline")
    body = msgspec.to_builtins(event)
    body.pop("weak_sandbox")
    body["v"] = 1
    old = decode_event(msgspec.json.encode(body))
    assert isinstance(old, RunRequested) and old.weak_sandbox is False and old.v == 2


def test_doctor_says_whether_candidate_code_would_run(no_namespaces) -> None:
    refused = _cli("doctor", "--json")
    assert refused.exit_code == 1, refused.output
    found = json.loads(refused.stdout)
    assert found["candidate_code_runs"] == "no" and not found["checks"]["full_sandbox"]
    assert "kg-no-such-unshare" in found["problem"] and found["fix"]
    assert set(found["checks"]) >= {"user_namespace", "mount_namespace", "pid_namespace",
                                    "net_namespace", "uid_drop", "cgroup_memory",
                                    "cgroup_pids", "private_tmp"}
    assert "tpu_compiler" in found
    text = _cli("doctor")
    assert "candidate code runs: no" in text.output and "fix:" in text.output
    opted = _cli("doctor", "--json", "--allow-weak-sandbox")
    assert opted.exit_code == 0 and json.loads(opted.stdout)["candidate_code_runs"] == (
        "weak sandbox (opted in)")


@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0, reason="the full sandbox needs root")
def test_doctor_on_a_host_with_the_full_sandbox() -> None:
    if not namespaces.namespaces_available():
        pytest.skip(f"no namespace sandbox here: {namespaces.probe().problem}")
    result = _cli("doctor", "--json")
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)
    assert found["candidate_code_runs"] == "full sandbox" and found["problem"] == ""
    assert all(found["checks"][k] for k in ("mount_namespace", "pid_namespace",
                                            "net_namespace", "uid_drop", "private_tmp"))
