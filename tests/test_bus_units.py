"""Bus pieces that need no server: ids, subjects, settings, commands, registry, credentials."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import msgspec
import pytest

from bus import subjects
from bus.codec import (
    FAILURE_INDEX,
    DerivedIds,
    command_decoder,
    derived_event_id,
    encode,
    is_ulid,
    salvage_run_id,
)
from bus.commands import Command, Ping, command_types
from bus.connection import BusConfigError, Credentials, check_url
from bus.registry import RECORDER, get, load_agents, register
from bus.server import find_nats_server
from bus.service import Service
from bus.streams import BusSettings, agent_consumer_config
from eventstore.events import event_id_time, new_event_id


def test_derived_ids_are_deterministic_ulids_that_keep_time_and_yield_order() -> None:
    command_id = new_event_id()
    first = [derived_event_id(command_id, i, fallback_ms=0) for i in range(300)]
    again = [DerivedIds(command_id, fallback_ms=0)[i] for i in range(300)]
    assert first == again
    assert len(set(first)) == 300
    assert all(is_ulid(i) for i in first)
    assert first == sorted(first)
    assert event_id_time(first[0]) == event_id_time(command_id)
    other = derived_event_id(new_event_id(), 0, fallback_ms=0)
    assert other not in first
    assert derived_event_id(command_id, FAILURE_INDEX, fallback_ms=0) not in first
    with pytest.raises(ValueError):
        derived_event_id(command_id, FAILURE_INDEX + 1, fallback_ms=0)


def test_derived_ids_of_non_ulid_seeds_use_the_fallback_time() -> None:
    event_id = derived_event_id("KG_CMD:17", 0, fallback_ms=1_700_000_000_123)
    assert is_ulid(event_id)
    assert event_id_time(event_id) == pytest.approx(1_700_000_000.123)
    assert derived_event_id("KG_CMD:17", 0, fallback_ms=1_700_000_000_123) == event_id


def test_subjects_route_and_refuse_bad_tokens() -> None:
    assert subjects.command_subject("echo") == "kg.cmd.echo"
    assert subjects.event_subject("run-1", "PingAnswered") == "kg.evt.run-1.PingAnswered"
    assert subjects.event_subject("", "MessageDeadLettered") == "kg.evt._.MessageDeadLettered"
    assert subjects.event_subject("a.b c>", "X") == "kg.evt.a_b_c_.X"
    assert subjects.run_events_subject("a.b") == "kg.evt.a_b.>"
    assert subjects.agent_consumer("test-synth") == "agent_test_synth"
    for bad in ("Echo", "a.b", "*", "", "x y"):
        with pytest.raises(ValueError):
            subjects.command_subject(bad)
    with pytest.raises(ValueError):
        subjects.artifact_subject("not-a-sha")


def test_a_routed_command_travels_on_its_route_and_its_consumer_never_clashes_with_an_agents() -> None:
    class Routed(Command, frozen=True, kw_only=True, tag="UnitTestRouted"):
        target: ClassVar[str | None] = "worker"
        route_field: ClassVar[str | None] = "where"

        where: str

    assert Routed.create(run_id="r", where="sim-tpu-v6e").subject() == "kg.cmd.worker.sim-tpu-v6e"
    assert Routed.create(run_id="r", where="a.b").subject("other") == "kg.cmd.other.a_b"
    assert Ping.create(run_id="r").route is None
    assert Ping.create(run_id="r").subject() == "kg.cmd.echo"
    with pytest.raises(ValueError, match="names no target agent"):
        Command.create(run_id="r").subject()
    assert subjects.command_subject("executor", "tpu") == "kg.cmd.executor.tpu"
    assert subjects.agent_consumer("executor", "sim-tpu-v6e") == "agent_executor-sim-tpu-v6e"
    assert subjects.agent_consumer("executor-tpu") == "agent_executor_tpu"  # an agent's - is _
    config = agent_consumer_config("executor", BusSettings(), "tpu")
    assert (config.durable_name, config.filter_subject) == ("agent_executor-tpu", "kg.cmd.executor.tpu")


def test_settings_from_env_and_backoff() -> None:
    settings = BusSettings.from_env(
        {"KG_BUS_ACK_WAIT_S": "2", "KG_BUS_MAX_DELIVER": "4", "KG_BUS_MEMORY_STORAGE": "yes"}
    )
    assert (settings.ack_wait_s, settings.max_deliver, settings.memory_storage) == (2.0, 4, True)
    assert settings.backoff_s == [2.0, 4.0, 8.0]
    assert BusSettings(ack_wait_s=100, max_deliver=3, max_backoff_s=150).backoff_s == [100, 150]
    assert BusSettings(max_deliver=1).backoff_s == []
    assert settings.retry_delay_s(1, 0.5) == 0.5
    assert settings.retry_delay_s(3, 0.5) == 2.0
    with pytest.raises(BusConfigError, match="KG_BUS_MAX_DELIVER"):
        BusSettings.from_env({"KG_BUS_MAX_DELIVER": "many"})
    with pytest.raises(ValueError):
        BusSettings(ack_wait_s=0)
    config = agent_consumer_config("echo", settings)
    assert config.filter_subject == "kg.cmd.echo"
    assert config.max_deliver == 4
    assert config.backoff == [2.0, 4.0, 8.0]


def test_commands_are_tagged_and_decoded_by_tag() -> None:
    ping = Ping.create(run_id="r", seq=3, echo="hi")
    assert is_ulid(ping.command_id)
    data = encode(ping)
    assert msgspec.json.decode(data)["type"] == "Ping"
    assert command_decoder([Ping]).decode(data) == ping
    assert command_types()["Ping"] is Ping
    with pytest.raises(msgspec.ValidationError):
        command_decoder([Ping]).decode(b'{"type":"Other","command_id":"x","run_id":"r","ts":0}')


def test_two_command_classes_may_not_share_a_tag() -> None:
    class First(Command, frozen=True, kw_only=True, tag="UnitTestClash"):
        pass

    class Second(Command, frozen=True, kw_only=True, tag="UnitTestClash"):
        pass

    with pytest.raises(TypeError, match="UnitTestClash"):
        command_types()
    del First, Second
    import gc

    gc.collect()
    assert "UnitTestClash" not in command_types()


def test_salvage_run_id() -> None:
    assert salvage_run_id(b'{"run_id": "r-1", "type": "Nope"}') == "r-1"
    assert salvage_run_id(b"\xff not json") == ""
    assert salvage_run_id(b'{"run_id": 5}') == ""


def test_registry_knows_echo_and_refuses_clashes() -> None:
    registry = load_agents()
    assert registry["echo"].commands == (Ping,)
    assert get("echo") is registry["echo"]
    with pytest.raises(KeyError, match=r"registered agents: .*echo"):
        get("no-such-agent")

    class Impostor(Service):
        agent: ClassVar[str] = "echo"
        commands: ClassVar[tuple[type[Command], ...]] = (Ping,)

    with pytest.raises(ValueError, match="registered twice"):
        register(Impostor)

    class Reserved(Service):
        agent: ClassVar[str] = RECORDER
        commands: ClassVar[tuple[type[Command], ...]] = (Ping,)

    with pytest.raises(ValueError, match="reserved"):
        register(Reserved)


def test_service_subclasses_are_checked_when_defined() -> None:
    with pytest.raises(ValueError):

        class BadName(Service):
            agent: ClassVar[str] = "Bad.Name"

    with pytest.raises(TypeError):

        class NoCommands(Service):
            agent: ClassVar[str] = "nocommands"
            commands: ClassVar[tuple[type[Command], ...]] = ()


def test_credentials_only_from_the_environment() -> None:
    assert Credentials.from_env({"KG_NATS_TOKEN": "t"}).connect_options() == {"token": "t"}
    assert Credentials.from_env({"KG_NATS_USER": "u", "KG_NATS_PASSWORD": "p"}).connect_options() == {
        "user": "u",
        "password": "p",
    }
    with pytest.raises(BusConfigError, match="both"):
        Credentials.from_env({"KG_NATS_USER": "u"})
    with pytest.raises(BusConfigError, match="credentials in the URL"):
        check_url("nats://user:secret@localhost:4222")
    with pytest.raises(BusConfigError, match="scheme"):
        check_url("http://localhost:4222")
    assert check_url("nats://a:4222,nats://b:4222")


def test_nats_server_binary_comes_from_the_wheel() -> None:
    path = find_nats_server()
    assert path.name == "nats-server"
    assert path.is_file()


def test_agent_modules_from_the_environment_are_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "kg_plugin_agent.py").write_text(
        "from typing import ClassVar\n"
        "from bus.commands import Ping\n"
        "from bus.registry import register\n"
        "from bus.service import Service\n"
        "@register\n"
        "class PluginAgent(Service):\n"
        "    agent: ClassVar[str] = 'plugin-agent'\n"
        "    commands: ClassVar[tuple] = (Ping,)\n"
    )
    import bus.registry

    monkeypatch.setattr(bus.registry, "_agents", dict(bus.registry._agents))  # restored afterwards
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("KG_AGENT_MODULES", "kg_plugin_agent")
    assert load_agents()["plugin-agent"].__name__ == "PluginAgent"
    assert get("plugin-agent") is load_agents()["plugin-agent"]
    monkeypatch.setenv("KG_AGENT_MODULES", "no_such_agent_module")
    with pytest.raises(ImportError, match="no_such_agent_module"):
        load_agents()
