"""A sweep's configurations priced through one worker and one runner (`price_configs`) get
the prices and programs they get one at a time, each failure stays its own, and what one
configuration's build tampers with fails it and every configuration after it.

Real sandboxed children, the TPU lowering and the cost model on a tiny task."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.child import worker
from tools.performance.autotune import price_config, price_configs
from tools.sandbox import wire

HERE = Path(__file__).resolve().parent / "perf_kernels"
TASK = str(HERE / "scale_task.py")
CLAMPED = str(HERE / "clamped_candidate.py")
TARGET = "sim-tpu-v6e"

TAMPERS_AT_32 = '''
import functools

import jax
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.interpreters import mlir

TUNABLES = {"block_rows": [64, 32, 16]}


def _kernel(x_ref, o_ref):
    o_ref[...] = 3.0 * x_ref[...] + 1.0


def _constant(ctx, *args, **params):
    return [mlir.ir_constant(np.zeros(aval.shape, aval.dtype)) for aval in ctx.avals_out]


def build(block_rows=64):
    if block_rows == 32:  # this configuration's build makes multiplication free on TPU
        mlir.register_lowering(lax.mul_p, _constant, platform="tpu")

    def kernel(x):
        spec = pl.BlockSpec((block_rows, x.shape[1]), lambda i: (i, 0))
        return pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(x.shape[0] // block_rows,), in_specs=[spec],
                              out_specs=spec)(x)

    return kernel
'''


EXITS_AT_32 = TAMPERS_AT_32.replace(
    "        mlir.register_lowering(lax.mul_p, _constant, platform=\"tpu\")",
    "        import os\n        os._exit(3)  # takes the whole worker down")


@pytest.mark.timeout(600)
def test_a_configuration_that_kills_the_batchs_worker_fails_alone(tmp_path: Path) -> None:
    """The batch's worker dies with it; each configuration is then lowered alone, so the
    others are still priced, as one at a time."""
    candidate = tmp_path / "exits_at_32.py"
    candidate.write_text(EXITS_AT_32)
    assert "os._exit(3)" in EXITS_AT_32
    before, exits, after = price_configs(
        TASK, str(candidate), [{"block_rows": 64}, {"block_rows": 32}, {"block_rows": 16}],
        TARGET)
    assert before.program_sha256 and before.latency_s and not before.problem
    assert after.program_sha256 and after.latency_s and not after.problem
    assert exits.program_sha256 is None and exits.latency_s is None and exits.problem


@pytest.mark.timeout(600)
def test_a_batch_prices_each_configuration_as_it_is_priced_alone() -> None:
    configs = [{"block_rows": 64}, {"block_rows": 0}, {"block_rows": 32},
               {"block_rows": 256}, {"unknown_knob": 1}]
    batch = price_configs(TASK, CLAMPED, configs, TARGET)
    assert [row.config for row in batch] == configs
    for row in (batch[0], batch[2]):
        alone = price_config(TASK, CLAMPED, row.config, TARGET)
        assert (row.program_sha256, row.latency_s, row.speedup) == (
            alone.program_sha256, alone.latency_s, alone.speedup)
        assert row.program_sha256 and row.latency_s and not row.problem
    assert batch[3].program_sha256 == batch[0].program_sha256  # clamped to 64 rows
    assert batch[0].program_sha256 != batch[2].program_sha256
    # a block of 0 rows fails in its build, a knob the file does not declare before any
    # child starts: each fails alone, with its reason
    assert batch[1].program_sha256 is None and batch[1].latency_s is None and batch[1].problem
    assert batch[4].program_sha256 is None and "unknown_knob" in batch[4].problem


@pytest.mark.timeout(600)
def test_tampering_in_one_configurations_build_fails_it_and_every_later_one(
        tmp_path: Path) -> None:
    candidate = tmp_path / "tampers_at_32.py"
    candidate.write_text(TAMPERS_AT_32)
    before, tampering, after = price_configs(
        TASK, str(candidate), [{"block_rows": 64}, {"block_rows": 32}, {"block_rows": 16}],
        TARGET)
    assert before.program_sha256 and before.latency_s and not before.problem
    for row in (tampering, after):
        assert row.program_sha256 is None and row.latency_s is None
        assert "tampered with the child" in row.problem and "mul" in row.problem


def test_a_batch_serves_lowering_requests_only(tmp_path: Path) -> None:
    """A request that would run cases is refused before the candidate is even loaded."""
    shapes = (wire.WireArray("float32", (64, 128), b""),)
    running = wire.EvalRequest(
        candidate_file="missing.py", config={},
        groups=(wire.ShapeGroup(0, 0, (wire.CaseRequest("c", shapes),)),), order_seed=0)
    (answer,) = worker.evaluate_batch(tmp_path, wire.EvalBatch((running,))).responses
    assert answer.load_error.startswith("a batch serves lowering-only requests")
    assert not answer.groups
    assert wire.is_batch(wire.encode(wire.EvalBatch((running,))))
    assert not wire.is_batch(wire.encode(running))


@pytest.mark.timeout(600)
def test_a_configuration_whose_kernels_alone_miss_the_bar_is_not_compiled(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The floor is the kernels' price without the ops around them: never above the whole
    price. With the bar between two configurations' prices, the slower one gets only its
    floor and its program never reaches the TPU compiler; the faster one is priced whole,
    as without a bar."""
    from tools.lowered import tpu_compiler

    monkeypatch.setenv(tpu_compiler.CACHE_ENV, str(tmp_path / "tpu-compile"))
    monkeypatch.setattr(tpu_compiler, "CACHE", tpu_compiler._Cache())  # this test's compiles
    configs = [{"block_rows": 64}, {"block_rows": 32}]
    whole = price_configs(TASK, CLAMPED, configs, TARGET)
    fast, slow = sorted(whole, key=lambda row: row.latency_s or 0.0)
    assert fast.latency_s and slow.latency_s and fast.latency_s < slow.latency_s
    monkeypatch.setenv(tpu_compiler.CACHE_ENV, str(tmp_path / "fresh"))
    monkeypatch.setattr(tpu_compiler, "CACHE", tpu_compiler._Cache())
    bar_s = (fast.latency_s + slow.latency_s) / 2
    barred = {str(row.config): row for row in price_configs(TASK, CLAMPED, configs, TARGET,
                                                             bar_s=bar_s)}
    kept, floored = barred[str(fast.config)], barred[str(slow.config)]
    assert (kept.program_sha256, kept.latency_s, kept.floor_s) == (fast.program_sha256,
                                                                   fast.latency_s, None)
    assert floored.latency_s is None and floored.program_sha256 == slow.program_sha256
    assert floored.floor_s is not None and bar_s <= floored.floor_s <= slow.latency_s
    compiled = {path.name.split("-")[0] for path in (tmp_path / "fresh").iterdir()}
    assert fast.program_sha256 in compiled and slow.program_sha256 not in compiled
