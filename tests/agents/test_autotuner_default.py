"""The autotuner takes the default configuration's price from the iteration that already
priced it (the test run's verdict, or the compile check the command passes on) and lowers
only the other configurations; without it, it lowers the default too. Real lowerings in the
sandbox, the real cost model, the real evaluator."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nats.aio.client import Client as NATS

from agents.autotuner import AutotunerAgent, known_default
from agents.base import AgentContext, Workspace
from agents.commands import TuneKernel
from agents.executor import verdict_record
from eventstore.codec import decode_event, encode_event
from eventstore.events import CompileChecked
from tools import api
from tools.correctness.testsuite import build_suite
from tools.inputs.tasks import load_task
from tools.sandbox.launcher import Limits

ROOT = Path(__file__).resolve().parents[2]
RMSNORM = ROOT / "tests" / "evaltasks" / "rmsnorm_small.py"
RMSNORM_KERNEL = ROOT / "kernels" / "rmsnorm.py"
SCALE = ROOT / "tests" / "perf_kernels" / "scale_task.py"
CLAMPED = ROOT / "tests" / "perf_kernels" / "clamped_candidate.py"  # 64, 128, 256: one program
TARGET = "sim-tpu-v6e"
LIMITS = Limits(wall_s=300.0, memory_bytes=8 << 30)


class CountingTuner(AutotunerAgent):
    """The real tuner, keeping every configuration it lowers."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lowered_configs: list[dict[str, Any]] = []

    async def lowered(self, ctx: AgentContext[TuneKernel], tool: Any,
                      configs: list[dict[str, Any]]) -> list[Any]:
        self.lowered_configs.extend(configs)
        return await super().lowered(ctx, tool, configs)


def tuner_context(tmp: Path, **fields: Any) -> tuple[CountingTuner, AgentContext[TuneKernel]]:
    """A sweep of the clamped candidate on scale_task, its files already in the workspace."""
    workspace = Workspace(tmp / "work")
    task, code = SCALE.read_bytes(), CLAMPED.read_bytes()
    cmd = TuneKernel.create(
        run_id="run-t", node_id="n1", task_sha256=hashlib.sha256(task).hexdigest(),
        task_file=SCALE.name, target_name=TARGET, code_sha256=hashlib.sha256(code).hexdigest(),
        recipe_sha256="0" * 64, budget=8, **fields)
    Workspace.write_once(workspace.task_file(cmd.task_sha256, cmd.task_file), task)
    Workspace.write_once(workspace.kernel_file(cmd.code_sha256), code)
    agent = CountingTuner(NATS(), workspace=workspace)
    return agent, AgentContext(agent, cmd)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_verdict_names_the_program_it_priced_as_the_tuners_pricing_does() -> None:
    """The compile check's and the test run's price of the default configuration are those of
    `price_config`, the tuner's own pricing, for the same program hash."""
    task = load_task(RMSNORM)
    suite = build_suite(task, seeds=(0,))
    default = api.candidate_configs(RMSNORM_KERNEL)[0]
    own = api.price_config(str(RMSNORM), str(RMSNORM_KERNEL), default, TARGET)
    assert own.program_sha256 and own.latency_s
    checked = api.compile_check(RMSNORM, RMSNORM_KERNEL, target=TARGET, suite=suite,
                                limits=LIMITS)
    tested = api.evaluate(RMSNORM, RMSNORM_KERNEL, target=TARGET, suite=suite, limits=LIMITS)
    assert api.compiled(checked) and tested.passed, tested.reasons
    for verdict in (checked, tested):
        assert verdict.measurement is not None
        assert verdict.measurement.breakdown["program_sha256"] == own.program_sha256
        assert verdict.measurement.latency_s == pytest.approx(own.latency_s, rel=1e-9)
        # the receipt names the program too
        assert verdict.receipt["measurement"]["program_sha256"] == own.program_sha256
    # what the executor stores is what the tuner reads back, as JSON
    record = msgspec.json.decode(msgspec.json.encode(verdict_record(tested)))
    cmd = TuneKernel.create(run_id="r", task_sha256="0" * 64, task_file="t.py",
                            target_name=TARGET, code_sha256="0" * 64, recipe_sha256="0" * 64)
    known, source = known_default(default, record, cmd)
    assert source == "the test run's verdict" and known is not None
    assert known.program_sha256 == own.program_sha256
    assert known.latency_s == tested.measurement.latency_s
    # another configuration's verdict is not the default's price
    assert known_default({"block_rows": 128}, record, cmd) == (None, "")
    # a sweep before any test reads the compile check's record (no case ran) the same way
    record = msgspec.json.decode(msgspec.json.encode(verdict_record(checked)))
    known, source = known_default(default, record, cmd)
    assert source == "the compile check's verdict" and known is not None
    assert (known.program_sha256, known.latency_s) == (own.program_sha256,
                                                      checked.measurement.latency_s)


def test_the_default_price_comes_from_the_verdict_else_the_command_else_nowhere() -> None:
    default = {"block_rows": 64}
    measurement = {"measured_on": "simulated", "latency_s": 2e-6, "speedup": 1.5, "valid": True,
                   "breakdown": {"program_sha256": "p" * 64}}
    record = {"config": default, "measurement": measurement, "cases": [{"id": "seed0"}]}
    bare = TuneKernel.create(run_id="r", task_sha256="0" * 64, task_file="t.py",
                             target_name=TARGET, code_sha256="0" * 64, recipe_sha256="0" * 64)
    checked = msgspec.structs.replace(bare, default_latency_s=3e-6,
                                      default_program_sha256="c" * 64)
    known, source = known_default(default, record, checked)
    assert source == "the test run's verdict" and known is not None
    assert (known.latency_s, known.program_sha256) == (2e-6, "p" * 64)
    # a sweep before any test gets the compile check's verdict: no case ran
    known, source = known_default(default, {**record, "cases": []}, checked)
    assert source == "the compile check's verdict" and known is not None
    assert (known.latency_s, known.program_sha256) == (2e-6, "p" * 64)
    known, source = known_default(default, None, checked)
    assert source == "the compile check" and known is not None
    assert (known.latency_s, known.program_sha256) == (3e-6, "c" * 64)
    # a verdict from before programs were named, an invalid or a measured one: not a price
    for wrong in ({"breakdown": {}}, {"valid": False}, {"measured_on": "real"}):
        assert known_default(default, {"config": default,
                                       "measurement": {**measurement, **wrong}}, bare) == (None, "")
    assert known_default(default, None, msgspec.structs.replace(
        bare, default_latency_s=3e-6)) == (None, "")  # a price without its program


def test_compile_checked_names_its_program_and_old_logs_still_decode() -> None:
    event = CompileChecked.create(run_id="r", producer="p", code_sha256="a" * 64, ok=True,
                                  estimate_s=1e-6, program_sha256="b" * 64)
    assert decode_event(encode_event(event)) == event
    old = encode_event(msgspec.structs.replace(event, program_sha256=None)).replace(
        b',"program_sha256":null', b"").replace(b',"verdict_sha256":null', b"")
    assert b"program_sha256" not in old and decode_event(old).program_sha256 is None
    assert b"verdict_sha256" not in old and decode_event(old).verdict_sha256 is None


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_default_priced_by_its_compile_check_is_not_lowered_again(tmp_path: Path) -> None:
    """The clamped candidate's default (64 rows) has the program of 128 and 256: known from
    the compile check alone, it is still the program they repeat, and only the planned
    configurations are lowered."""
    task = load_task(SCALE)
    checked = api.compile_check(SCALE, CLAMPED, target=TARGET, suite=build_suite(task, seeds=(0,)),
                                limits=LIMITS)
    assert api.compiled(checked) and checked.measurement is not None, checked.reasons
    default, *planned = api.candidate_configs(CLAMPED)
    agent, ctx = tuner_context(
        tmp_path, default_latency_s=checked.measurement.latency_s,
        default_program_sha256=checked.measurement.breakdown["program_sha256"])
    known = known_default(default, None, ctx.cmd)
    chosen, skipped, rows, price = asyncio.run(agent.price(ctx, default, planned, known))
    assert agent.lowered_configs == planned  # [128, 32, 256]: never the default
    assert price is not None and price["priced_from"] == "the compile check"
    assert price["estimate_s"] == checked.measurement.latency_s
    assert skipped == [{"config": {"block_rows": c}, "same_program_as": default}
                       for c in (128, 256)]
    (row,) = rows  # 32 rows: twice the steps of the default, priced slower, not tested
    assert row["config"] == {"block_rows": 32} and row["fate"].startswith("not tested")
    assert row["fate"].endswith("not compiled") and row["kernels_floor_s"] >= price["estimate_s"]
    assert chosen == []


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_default_without_a_known_price_is_lowered_in_the_sweep(tmp_path: Path) -> None:
    agent, ctx = tuner_context(tmp_path)
    default, planned = {"block_rows": 64}, [{"block_rows": 32}]
    known = known_default(default, None, ctx.cmd)
    assert known == (None, "")
    chosen, skipped, rows, price = asyncio.run(agent.price(ctx, default, planned, known))
    assert agent.lowered_configs == [default, *planned]
    assert price is not None and price["priced_from"] == "lowered in this sweep"
    assert price["estimate_s"] and price["program_sha256"]
    assert skipped == [] and chosen == [] and len(rows) == 1
