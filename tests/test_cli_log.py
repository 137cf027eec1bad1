from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import msgspec
import pytest
from typer.testing import CliRunner

from eventstore.log import EventLog
from eventstore.synthetic import synthetic_log
from kernelgraph.cli import app, load_commands
from kernelgraph.cli.app import console
from projections import LogView

load_commands()
console.width = 200
runner = CliRunner()


@pytest.fixture(scope="module")
def log_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "log.duckdb"
    with EventLog(path) as log:
        log.append(list(synthetic_log(1_500, seed=11)))
    return path


def test_runs_lists_every_run(log_path: Path) -> None:
    result = runner.invoke(app, ["runs", str(log_path), "--json"])
    assert result.exit_code == 0, result.output
    runs = msgspec.json.decode(result.stdout)["runs"]
    with EventLog(log_path, read_only=True) as log:
        expected = {e.run_id for e in log.events()}
    assert {r["run_id"] for r in runs} == expected
    human = runner.invoke(app, ["runs", str(log_path)])
    assert human.exit_code == 0 and "simulated" in human.stdout


def test_events_filters_by_run_and_type(log_path: Path) -> None:
    result = runner.invoke(app, ["events", str(log_path), "--type", "RunRequested", "--json"])
    assert result.exit_code == 0, result.output
    lines = [msgspec.json.decode(line) for line in result.stdout.splitlines()]
    assert lines and all(e["type"] == "RunRequested" for e in lines)
    run_id = lines[0]["run_id"]
    one_run = runner.invoke(app, ["events", str(log_path), "--run", run_id, "--limit", "5"])
    assert one_run.exit_code == 0
    assert len(one_run.stdout.splitlines()) == 5 and run_id in one_run.stdout


def test_events_refuses_an_unknown_type(log_path: Path) -> None:
    result = runner.invoke(app, ["events", str(log_path), "--type", "Bogus"])
    assert result.exit_code == 2
    assert "unknown event type 'Bogus'" in result.output


def test_replay_json_matches_the_projections(log_path: Path) -> None:
    result = runner.invoke(app, ["replay", str(log_path), "--json"])
    assert result.exit_code == 0, result.output
    out = msgspec.json.decode(result.stdout)
    with EventLog(log_path, read_only=True) as log:
        view = LogView().apply_records(log.read())
    assert out["events"] == 1_500
    assert out["metrics"] == msgspec.json.decode(msgspec.json.encode(view.metrics.summary()))
    run_id, graph = next(iter(view.graphs.items()))
    assert out["runs"][run_id]["best_node"] == (graph.best.node_id if graph.best else None)


def test_replay_of_one_run_and_the_human_view(log_path: Path) -> None:
    with EventLog(log_path, read_only=True) as log:
        run_id = log.runs()[0].run_id
    result = runner.invoke(app, ["replay", str(log_path), "--run", run_id])
    assert result.exit_code == 0, result.output
    assert run_id in result.stdout and "geomean_speedup" in result.stdout
    missing = runner.invoke(app, ["replay", str(log_path), "--run", "nope"])
    assert missing.exit_code == 2 and "no run 'nope'" in missing.output


def test_log_verify_exit_codes(tmp_path: Path) -> None:
    path = tmp_path / "v.duckdb"
    with EventLog(path) as log:
        log.append(list(synthetic_log(40, seed=12)))
    ok = runner.invoke(app, ["log", "verify", str(path), "--json"])
    assert ok.exit_code == 0 and msgspec.json.decode(ok.stdout)["ok"] is True
    con = duckdb.connect(str(path))
    con.execute("UPDATE events SET body = replace(body, 'beam', 'BEAM') WHERE seq = 1")
    con.close()
    broken = runner.invoke(app, ["log", "verify", str(path), "--json"])
    assert broken.exit_code == 1
    assert msgspec.json.decode(broken.stdout)["first_broken_seq"] == 1


def test_bad_paths_get_one_line_errors(tmp_path: Path) -> None:
    missing = runner.invoke(app, ["replay", str(tmp_path / "nope.duckdb")])
    assert missing.exit_code == 2 and "no such log" in missing.output
    junk = tmp_path / "junk.duckdb"
    junk.write_bytes(b"\x00garbage" * 1000)
    bad = runner.invoke(app, ["runs", str(junk)])
    assert bad.exit_code == 2 and "not a kernelgraph log" in bad.output
    assert "Traceback" not in bad.output


def test_the_installed_command_has_help() -> None:
    result = subprocess.run([sys.executable, "-m", "kernelgraph", "--help"], capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0
    for command in ("runs", "events", "replay", "log"):
        assert command in result.stdout


def test_events_follow_prints_events_recorded_later(tmp_path: Path) -> None:
    path = tmp_path / "follow.duckdb"
    events = list(synthetic_log(30, seed=13))
    with EventLog(path) as log:
        log.append(events[:10])
    follower = subprocess.Popen(
        [sys.executable, "-m", "kernelgraph", "events", str(path), "--follow", "--json",
         "--interval", "0.05"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert follower.stdout is not None
        seen = [msgspec.json.decode(follower.stdout.readline()) for _ in range(10)]
        with EventLog(path) as log:  # the follower waits while a writer holds the file
            log.append(events[10:])
        seen += [msgspec.json.decode(follower.stdout.readline()) for _ in range(20)]
    finally:
        follower.terminate()
        follower.wait(timeout=30)
    assert [e["seq"] for e in seen] == list(range(1, 31))
    assert [e["event_id"] for e in seen] == [e.event_id for e in events]


def test_the_human_tree_names_each_nodes_lever_and_its_plans_next_levers(tmp_path: Path) -> None:
    from searchpolicies.common import hint
    from searchpolicies.testing import GraphBuilder

    g = GraphBuilder(policy="greedy")
    g.expand("n1", strategy=hint(["block_shape"], "attention"))
    g.evaluate("n1", 0.9, next_levers=["block_skipping", "head_packing"])
    g.expand("n2", "n1", hint(["block_skipping"], "attention")).evaluate("n2", 1.1)
    g.expand("n3", "n1", "pack more heads per block").evaluate("n3", None)
    path = tmp_path / "tree.duckdb"
    with EventLog(path) as log:
        log.append(g.events)
    result = runner.invoke(app, ["replay", str(path)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    n1, n2, n3 = (next(line for line in lines if f"{n} " in line) for n in ("n1", "n2", "n3"))
    assert "valid [block_shape] 0.90x" in n1 and "next: block_skipping, head_packing" in n1
    assert "valid [block_skipping] 1.10x" in n2 and "<- best" in n2 and "next:" not in n2
    assert "invalid pack more heads per block" in n3
