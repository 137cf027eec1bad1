"""compose.yaml's structure and the bus commands of the CLI (`up`, `serve`, `agents`, `ping`)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml
from typer.testing import CliRunner

from bus import subjects
from bus.client import BusClient
from bus.commands import Ping
from bus.connection import Credentials, connect
from bus.registry import RECORDER, load_agents
from bus.server import EmbeddedNats
from eventstore.log import EventLog
from kernelgraph.cli import app, load_commands
from kernelgraph.runtime import AGENT_MODULES

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "compose.yaml"


def _compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


def _kernelgraph_services() -> dict[str, dict[str, Any]]:
    return {name: s for name, s in _compose()["services"].items() if name not in ("nats", "qdrant")}


def test_compose_parses_and_runs_nats_with_jetstream_and_env_file_auth() -> None:
    compose = _compose()
    nats = compose["services"]["nats"]
    assert nats["image"].startswith("nats:")
    assert "-js" in nats["command"]
    assert "deploy/nats.env" in nats["env_file"]
    config_mount = next(v for v in nats["volumes"] if v.startswith("./deploy/nats.conf:"))
    config = (ROOT / config_mount.split(":")[0]).read_text()
    assert "token: $KG_NATS_TOKEN" in config  # from the environment, not the file
    example = (ROOT / "deploy" / "nats.env.example").read_text()
    assert "KG_NATS_TOKEN=" in example
    assert set(compose["volumes"]) >= {"nats-data", "kernelgraph-log"}


def test_every_compose_service_runs_an_existing_cli_command() -> None:
    load_commands()
    cli = typer.main.get_command(app)
    services = _kernelgraph_services()
    assert {"recorder", "auto", "executor"} <= set(services)
    for name, service in services.items():
        command = service["command"]
        assert command[0] == "serve", f"{name}: {command}"
        assert "--nats" in command, f"{name} names no NATS server"
        assert not any("token" in part.lower() or "password" in part.lower() for part in command)
        assert "deploy/nats.env" in service["env_file"], f"{name} gets no credentials"
        # Click parses the arguments exactly as `kernelgraph ...` would (unknown options fail here).
        context = cli.make_context("kernelgraph", list(command), resilient_parsing=False)  # type: ignore[attr-defined]
        sub = context.command.get_command(context, command[0])
        assert sub is not None
        sub.make_context(command[0], list(command[1:]), parent=context)
        assert command[1] == name.replace("-", "_"), f"service {name} runs agent {command[1]}"


def test_recorder_writes_to_a_volume_and_executors_scale_out() -> None:
    services = _kernelgraph_services()
    recorder = services["recorder"]["command"]
    db = recorder[recorder.index("--db") + 1]
    mounts = [v.split(":")[1] for v in services["recorder"]["volumes"]]
    assert any(db.startswith(mount.rstrip("/") + "/") for mount in mounts)
    assert services["executor"]["deploy"]["replicas"] >= 2
    assert all("--db" not in s["command"] for n, s in services.items() if n != "recorder")


def test_every_compose_agent_is_registered() -> None:
    registry = load_agents(AGENT_MODULES)
    missing = [
        s["command"][1] for s in _kernelgraph_services().values()
        if s["command"][1] != RECORDER and s["command"][1] not in registry
    ]
    assert not missing, f"compose.yaml runs unregistered agents: {missing}"


def test_compose_binds_its_executors_to_known_targets() -> None:
    from agents.executor import EXECUTOR_TARGET_ENV, served_targets

    executor = _kernelgraph_services()["executor"]
    assert EXECUTOR_TARGET_ENV in executor["environment"]
    assert served_targets(env=executor["environment"])  # every name a known target


def test_agents_and_serve_errors() -> None:
    load_commands()
    runner = CliRunner()
    listed = runner.invoke(app, ["agents", "--json"])
    assert listed.exit_code == 0, listed.output
    assert {"agent": "echo", "version": "1", "class": "bus.echo.EchoService", "commands": ["Ping"]} in json.loads(
        listed.stdout
    )["agents"]
    env = {"KG_NATS_URL": ""}
    missing_db = runner.invoke(app, ["serve", "recorder", "--nats", "nats://127.0.0.1:1"], env=env)
    assert missing_db.exit_code == 2 and "--db" in missing_db.output
    secret = runner.invoke(app, ["serve", "echo", "--nats", "nats://me:pw@127.0.0.1:1"], env=env)
    assert secret.exit_code == 2 and "credentials in the URL are refused" in secret.output
    assert "Traceback" not in secret.output


def test_ping_through_an_embedded_runtime() -> None:
    load_commands()
    result = CliRunner().invoke(app, ["ping", "--count", "5", "--json"], env={"KG_NATS_URL": ""})
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["pings"] == 5 and answer["p50_ms"] > 0


@pytest.mark.slow
def test_up_with_an_external_server_records_and_drains_on_sigint(nats_server: EmbeddedNats, tmp_path: Path) -> None:
    db = tmp_path / "log.duckdb"
    up = subprocess.Popen(
        [sys.executable, "-m", "kernelgraph", "up", "--nats", nats_server.url, "--db", str(db), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "KG_NATS_URL": ""},
    )
    try:

        async def drive() -> int:
            nc = await connect(nats_server.url, name="test", credentials=Credentials())
            js = nc.jetstream()
            deadline = time.monotonic() + 30
            while True:  # until the echo agent pulls
                try:
                    if (await js.consumer_info(subjects.COMMANDS_STREAM, "agent_echo")).num_waiting:
                        break
                except Exception:
                    pass
                assert time.monotonic() < deadline and up.poll() is None, "up did not start"
                await asyncio.sleep(0.05)
            client = BusClient(nc)
            answers = await asyncio.gather(
                *(client.request(Ping.create(run_id="up", seq=i, events=3), expect=3) for i in range(20))
            )
            await client.close()
            await nc.close()
            return sum(len(a) for a in answers)

        answered = asyncio.run(drive())
        up.send_signal(signal.SIGINT)
        stdout, stderr = up.communicate(timeout=30)
    finally:
        up.kill()
    assert up.returncode == 0, stderr.decode()
    summary = json.loads(stdout)
    assert summary["services"]["echo"]["completed"] == 20
    assert summary["recorder"]["events_recorded"] == answered == 60
    with EventLog(db, read_only=True) as log:
        assert log.count() == 60


@pytest.mark.slow
def test_up_embedded_starts_and_stops_its_own_server(tmp_path: Path) -> None:
    db = tmp_path / "log.duckdb"
    result = subprocess.run(
        [sys.executable, "-m", "kernelgraph", "up", "--db", str(db), "--duration", "0.5", "--json"],
        capture_output=True, timeout=60, env={**os.environ, "KG_NATS_URL": ""},
    )
    assert result.returncode == 0, result.stderr.decode()
    summary = json.loads(result.stdout)
    assert summary["embedded_server"] is True
    assert summary["services"]["echo"]["concurrency"] == 4
    assert (tmp_path / "log.duckdb.nats" / "jetstream").is_dir()
    assert db.exists()
