"""Executors bound to targets on one bus: each command reaches an executor serving its target.

A stand-in executor keeps the real executor's routing (one consumer per served target) and
its refusal, and answers with a made-up verdict instead of a real one, so these tests take
seconds and need no device.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, ClassVar

import pytest

from agents.base import AgentContext
from agents.commands import CheckCompile, MeasureConfig, RunTests
from agents.executor import EXECUTOR_TARGET_ENV, ExecutorAgent, served_targets
from bus import subjects
from bus.client import BusClient
from bus.codec import decode_event, encode
from bus.connection import BusConfigError, Credentials, connect
from bus.server import EmbeddedNats
from bus.streams import BusSettings
from eventstore.events import AgentFailed, CompileChecked, Event
from tools import api

SETTINGS = BusSettings(ack_wait_s=2.0, max_deliver=3, max_backoff_s=1.0)
FAKE_SHA = "0" * 64
TPU, SIM = "tpu", "sim-tpu-v6e"


class StandInExecutor(ExecutorAgent):
    """The executor's routing and refusal; every command answered by a passing compile check."""

    version: ClassVar[str] = "stand-in"

    def __init__(self, *args: Any, delay_s: float = 0.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.delay_s = delay_s
        self.handled: list[str] = []
        self.running = self.most_running = 0

    async def _run(self, ctx: AgentContext[Any]) -> AsyncIterator[Event]:
        cmd = ctx.cmd
        self.check_served(cmd)
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            await asyncio.sleep(self.delay_s)
        finally:
            self.running -= 1
        self.handled.append(cmd.target_name)
        yield self.event(CompileChecked, cmd, code_sha256=cmd.code_sha256, ok=True,
                         attempt=getattr(cmd, "attempt", 0), diagnostics=[], iteration=cmd.iteration,
                         wall_s=0.0)


def check_compile(target: str, run_id: str = "routing") -> CheckCompile:
    return CheckCompile.create(run_id=run_id, task_sha256=FAKE_SHA, task_file="task.py",
                               target_name=target, code_sha256=FAKE_SHA, recipe_sha256=FAKE_SHA)


Start = Callable[..., Any]
Fleet = tuple[Start, BusClient, AsyncExitStack]


async def _executors(stack: AsyncExitStack, server: EmbeddedNats) -> Start:
    async def start(targets: tuple[str, ...], **kwargs: Any) -> StandInExecutor:
        nc = await connect(server.url, name="executor", credentials=Credentials())
        stack.push_async_callback(nc.close)
        kwargs.setdefault("fetch_timeout_s", 0.2)
        svc = StandInExecutor(nc, settings=SETTINGS, targets=targets, **kwargs)
        await svc.start()
        stack.push_async_callback(svc.stop)
        return svc

    return start


async def _client(stack: AsyncExitStack, server: EmbeddedNats) -> BusClient:
    nc = await connect(server.url, name="test", credentials=Credentials())
    stack.push_async_callback(nc.close)
    client = BusClient(nc, settings=SETTINGS)
    stack.push_async_callback(client.close)
    await client.ensure_streams()
    return client


@pytest.fixture
async def fleet(nats_server: EmbeddedNats) -> AsyncIterator[Fleet]:
    """Start executors bound to targets (`start(targets)`) and a client, on one bus; the
    stack closes what a test adds to it as well."""
    async with AsyncExitStack() as stack:
        yield await _executors(stack, nats_server), await _client(stack, nats_server), stack


async def test_executors_bound_to_two_targets_each_take_only_their_own_commands(
    fleet: Fleet,
) -> None:
    start, client, _stack = fleet
    tpu, sim = await start((TPU,)), await start((SIM,))
    assert (tpu.consumers, sim.consumers) == (("agent_executor-tpu",), ("agent_executor-sim-tpu-v6e",))
    commands = [check_compile(target) for _ in range(4) for target in (TPU, SIM)]
    answers = await asyncio.gather(*(client.request(c, timeout=20) for c in commands))
    assert all(isinstance(a[0], CompileChecked) and a[0].ok for a in answers)
    assert (tpu.handled, sim.handled) == ([TPU] * 4, [SIM] * 4)
    assert tpu.stats.failed == sim.stats.failed == 0


async def test_a_command_for_a_target_nobody_serves_waits_until_its_executor_starts(
    fleet: Fleet,
) -> None:
    start, client, stack = fleet
    sim = await start((SIM,))
    waiting = asyncio.ensure_future(client.request(check_compile(TPU), timeout=30))
    stack.callback(waiting.cancel)
    await client.request(check_compile(SIM), timeout=10)  # the sim executor is taking work
    await asyncio.sleep(1.0)
    assert not waiting.done()  # not failed: nobody took it
    stream = await client.js.stream_info(subjects.COMMANDS_STREAM, subjects_filter="kg.cmd.executor.>")
    assert stream.state.subjects == {"kg.cmd.executor.tpu": 1}
    assert sim.handled == [SIM] and sim.stats.failed == 0
    tpu = await start((TPU,))
    (answer,) = await waiting
    assert isinstance(answer, CompileChecked) and answer.ok
    assert tpu.handled == [TPU]


async def test_an_unbound_executor_serves_every_known_target_beside_a_bound_one(
    fleet: Fleet,
) -> None:
    start, client, _stack = fleet
    anywhere = await start((), concurrency=1, delay_s=0.05)
    await start((TPU,))  # shares agent_executor-tpu: no overlapping consumer
    assert anywhere.consumers == tuple(subjects.agent_consumer("executor", t) for t in api.TARGETS)
    others = [t for t in api.TARGETS if t != TPU]
    kinds = (CheckCompile, RunTests, MeasureConfig)
    commands = [check_compile(t) for t in others]
    commands += [kinds[i % 3].create(run_id="routing", task_sha256=FAKE_SHA, task_file="task.py",
                                     target_name=t, code_sha256=FAKE_SHA, recipe_sha256=FAKE_SHA)
                 for i, t in enumerate(others)]
    assert {c.subject() for c in commands} == {f"kg.cmd.executor.{t}" for t in others}
    answers = await asyncio.gather(*(client.request(c, timeout=20) for c in commands))
    assert len(answers) == len(commands)
    assert sorted(anywhere.handled) == sorted(others * 2)
    assert anywhere.most_running == 1  # several consumers, never more than its concurrency


async def test_a_command_on_another_targets_subject_is_refused_naming_both(
    fleet: Fleet,
) -> None:
    start, client, stack = fleet
    sim = await start((SIM,))
    failures: asyncio.Queue[Event] = asyncio.Queue()

    async def on_event(msg: Any) -> None:
        failures.put_nowait(decode_event(msg.data))

    sub = await client.nc.subscribe(subjects.run_events_subject("stray"), cb=on_event)
    stack.push_async_callback(sub.unsubscribe)
    stray = check_compile(TPU, run_id="stray")
    await client.js.publish(subjects.command_subject("executor", SIM), encode(stray),
                            headers={subjects.MSG_ID_HEADER: stray.command_id})
    failed = await asyncio.wait_for(failures.get(), timeout=10)
    assert isinstance(failed, AgentFailed) and failed.deliveries == 1
    assert "'tpu'" in failed.error and "serving only sim-tpu-v6e" in failed.error
    assert "kg.cmd.executor.tpu" in failed.error
    assert sim.handled == []


def test_the_binding_comes_from_the_environment_and_refuses_unknown_targets() -> None:
    assert served_targets(env={EXECUTOR_TARGET_ENV: " tpu, sim-tpu-v6e,,tpu"}) == (TPU, SIM)
    assert served_targets(env={}) == ()
    assert served_targets(["gpu"], env={EXECUTOR_TARGET_ENV: "tpu"}) == ("gpu",)
    with pytest.raises(BusConfigError, match="sim-tpu-6e"):
        served_targets(env={EXECUTOR_TARGET_ENV: "sim-tpu-6e"})


@pytest.mark.parametrize("command", ["search", "bench"])
def test_the_embedded_runtime_refuses_a_target_its_own_executor_does_not_serve(
    command: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    from typer.testing import CliRunner

    from kernelgraph.cli import app, load_commands

    load_commands()
    monkeypatch.setenv(EXECUTOR_TARGET_ENV, TPU)
    result = CliRunner().invoke(app, [command, "rmsnorm", "--db", str(tmp_path / "x.duckdb")])
    assert result.exit_code != 0
    assert f"{EXECUTOR_TARGET_ENV}=tpu binds this process's executor" in result.output
    assert not (tmp_path / "x.duckdb").exists()  # refused before anything started
