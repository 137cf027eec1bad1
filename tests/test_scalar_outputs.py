"""0-d arrays (a loss, a sum, a scale) cross every evaluation path as shape (), never (1,):
the wire, the hashes, the suite's spilled arrays, the runner's rebuilt program, the worker's
cases, the direct calls and the second poison. ``np.ascontiguousarray`` returns ndim >= 1,
and once turned an honest scalar kernel into a shape failure (JAXBench 13p_Cross_Entropy)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import ml_dtypes
import numpy as np
import pytest

from tools.child import interpret, programs
from tools.correctness.store import is_mapped, spill
from tools.correctness.testsuite import FrozenSuite, build_suite
from tools.inputs.tasks import load_task
from tools.sandbox import wire
from tools.verification.receipts import check_receipt
from tools.verification.verify import evaluate

ROOT = Path(__file__).resolve().parent.parent
TASK = ROOT / "tests" / "evaltasks" / "sum_scalar.py"
HONEST = ROOT / "tests" / "candidates" / "scalar_sum.py"


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_, ml_dtypes.bfloat16])
def test_a_0d_array_keeps_its_shape_on_the_wire(dtype) -> None:
    for value in (np.asarray(3, dtype), np.asarray(3, dtype)[()], jax.numpy.asarray(3, dtype)):
        sent = wire.decode(wire.encode(wire.WireArray.of(value)), wire.WireArray)
        assert sent.shape == () and sent.numpy().shape == ()
        assert sent.numpy()[()] == np.asarray(value)[()]
    assert wire.WireArray.of(np.ones((1,), dtype)).numpy().shape == (1,)


def test_the_array_hash_tells_0d_from_1d() -> None:
    scalar = np.float32(2.0)
    assert wire.hash_arrays([scalar]) != wire.hash_arrays([np.asarray([scalar])])
    assert wire.hash_arrays([scalar]) == wire.hash_arrays([jax.numpy.float32(2.0)])


def test_a_spilled_0d_array_keeps_its_shape(tmp_path: Path) -> None:
    for threshold in (1 << 20, 1):  # in memory, and memory-mapped from disk
        kept = spill(np.asarray(1.5, np.float64), tmp_path, spill_bytes=threshold)
        assert is_mapped(kept) == (threshold == 1)
        assert kept.shape == () and kept.numpy().shape == () and kept.numpy()[()] == 1.5


def test_the_rebuilt_program_takes_and_returns_0d_arrays() -> None:
    spec = importlib.util.spec_from_file_location("kg_test_scalar_sum", HONEST)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    inputs = load_task(TASK).make_inputs(0, 0)
    assert inputs[1].shape == ()
    traced = jax.jit(module.build()).trace(*inputs)
    rebuilt = programs.as_function(programs.decode(programs.encode(traced.jaxpr)))
    again = jax.jit(rebuilt).trace(*inputs)
    settings = interpret.InterpretSettings(num_cores=1)
    [want] = interpret.interpreted(traced.jaxpr, settings)(*inputs)
    [got] = interpret.interpreted(again.jaxpr, settings)(*inputs)
    assert np.asarray(want).shape == np.asarray(got).shape == ()
    assert np.array_equal(np.asarray(want), np.asarray(got))


@pytest.fixture(scope="module")
def suite() -> FrozenSuite:
    return build_suite(load_task(TASK), seeds=(0, 1))


def test_an_honest_scalar_kernel_passes_with_a_0d_input_and_output(suite: FrozenSuite) -> None:
    assert all(tuple(c.out_shapes[0]) == () for c in suite.cases)
    assert all(c.oracle[0].numpy().shape == () for c in suite.cases)
    verdict = evaluate(TASK, HONEST, suite=suite)
    assert verdict.verdict == "pass", verdict.reasons
    assert len(verdict.cases) == len(suite.cases) >= 5 and all(c.passed for c in verdict.cases)
    assert verdict.audit is not None and verdict.audit.kernels == 1
    assert check_receipt(verdict.receipt).ok


def test_a_scalar_kernel_that_returns_shape_1_fails(suite: FrozenSuite, tmp_path: Path) -> None:
    """Right values in the wrong shape: every case fails on shape. The direct calls fail the
    same cases, so they are not reported apart (the traced failure is the reason)."""
    source = HONEST.read_text()
    assert source.count("return out.reshape(())") == 1
    wrong = tmp_path / "scalar_sum_1d.py"
    wrong.write_text(source.replace("return out.reshape(())", "return out.reshape((1,))"))
    verdict = evaluate(TASK, wrong, suite=suite)
    assert verdict.verdict == "fail"
    shape_problem = "output 0 has shape (1,), the reference's is ()"
    assert all(any(shape_problem in p for o in c.outputs for p in o.problems)
               for c in verdict.cases)
    assert not any("called directly" in r for r in verdict.reasons), verdict.reasons
    assert verdict.measurement is None
