"""A reference that rounds to a narrower float mid-way is judged as written.

XLA on the host may drop such a rounding (here: at (2, 4, 512, 32) it keeps the bfloat16
scores of a retention in float32), so the jitted reference is more precise than its program
and a kernel that rounds where the program says would miss the ceiling at the large probe.
The suite also runs the reference op by op: that kernel passes, while kernels that round
more coarsely or mask one position too many still fail.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from tools.correctness import testsuite
from tools.correctness.aswritten import as_written, narrowing_casts
from tools.correctness.compare import compare_case
from tools.inputs.tasks import load_task

TASK = Path(__file__).resolve().parent / "evaltasks" / "retention_bf16_scores.py"
DECAY = 0.97


def retention(inputs: list[np.ndarray], *, mantissa_bits: int = 8, diagonal: int = 0) -> Any:
    """The task in numpy, by another order than XLA's: float32 scores, the rounding to
    ``mantissa_bits`` (8: bfloat16, as the program states) and a float32 value matmul;
    the keywords plant one bug each."""
    q, k, v = (np.asarray(x, np.float32) for x in inputs)
    n = q.shape[2]
    distance = np.arange(n, dtype=np.float32)[:, None] - np.arange(n, dtype=np.float32)
    decay = np.where(distance >= -diagonal, np.float32(DECAY) ** np.maximum(distance, 0),
                     0).astype(np.float32)
    scores = np.einsum("bhsd,bhtd->bhst", q, k) * decay
    scores /= np.maximum(np.abs(scores).sum(-1, keepdims=True), 1.0)
    if mantissa_bits == 8:
        scores = scores.astype(ml_dtypes.bfloat16).astype(np.float32)
    else:  # coarser: keep fewer mantissa bits
        exponent = np.floor(np.log2(np.maximum(np.abs(scores), 1e-30)))
        step = 2.0 ** (exponent - (mantissa_bits - 1))
        scores = (np.round(scores / step) * step).astype(np.float32)
    return np.einsum("bhst,bhtd->bhsd", scores, v).astype(ml_dtypes.bfloat16)


def test_the_narrowing_casts_a_reference_reads_again_are_found() -> None:
    x = jnp.ones((8, 128), jnp.float32)
    assert narrowing_casts(jax.make_jaxpr(lambda a: a.astype(jnp.bfloat16) @ a.T.astype(
        jnp.bfloat16))(x).jaxpr) == ["float32->bfloat16", "float32->bfloat16"]
    # a cast that is the output, or one that widens, changes nothing downstream
    assert narrowing_casts(jax.make_jaxpr(lambda a: (a @ a.T).astype(jnp.bfloat16))(x).jaxpr) == []
    assert narrowing_casts(jax.make_jaxpr(
        lambda a: a.astype(jnp.float32) * 2)(x.astype(jnp.bfloat16)).jaxpr) == []
    # inside a jitted call too, and the op-by-op run rounds there
    inner = jax.jit(lambda a: (a * 1.001).astype(jnp.bfloat16).astype(jnp.float32))
    found = as_written(lambda a: inner(a) - a, [x])
    assert found is not None and found[1] == ["float32->bfloat16"]
    assert np.all(np.asarray(found[0](x)[0]) == 0.0)  # 1.001 rounds back to 1 in bfloat16
    assert as_written(lambda a: a * 2, [x]) is None


@pytest.fixture(scope="module")
def suites() -> dict[str, Any]:
    task = load_task(TASK)
    built = {"as written": testsuite.build_suite(task, seeds=(0,), unseen=False,
                                                  nonfinite=False)}
    real = testsuite.as_written
    testsuite.as_written = lambda *_: None  # the jitted reference alone, as before
    try:
        built["jitted only"] = testsuite.build_suite(task, seeds=(0,), unseen=False,
                                                     nonfinite=False)
    finally:
        testsuite.as_written = real
    return built


def _check(suite: Any, case_id: str, **bug: Any) -> Any:
    case = suite.case(case_id)
    return compare_case(case, [retention([a.numpy() for a in case.inputs], **bug)],
                        suite.tolerance)


@pytest.mark.slow
def test_a_kernel_that_rounds_as_written_passes(suites: dict[str, Any]) -> None:
    suite = suites["as written"]
    assert any("narrower float" in note for note in suite.notes), suite.notes
    for case in suite.cases:
        assert _check(suite, case.case_id).passed, case.case_id
    # the same kernel against the jitted reference alone: the large probe's ceiling fails
    lone = _check(suites["jitted only"], "shape0-seed0-large")
    assert not lone.passed and lone.outputs[0].tolerance_violations > 0


@pytest.mark.slow
@pytest.mark.parametrize("bug", [{"mantissa_bits": 5}, {"diagonal": 1}])
def test_wrong_kernels_still_fail(suites: dict[str, Any], bug: dict[str, Any]) -> None:
    suite = suites["as written"]
    assert not all(_check(suite, case.case_id, **bug).passed for case in suite.cases), bug
