"""A dense layer whose product is only summed over its features becomes a matrix-vector
product: the weight is summed first (`linear_sums`), the kernel moves the same bytes with
almost no MXU work, and the reference's NaN and infinities still come out where they do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from offline_kernels import assert_matches_reference, first_kernel

from agents.llm.offline.classify import classify_task

GEMM_SUM = '''import jax
import jax.numpy as jnp

SHAPES = [(256, 512, 384), (128, 256, 384)]  # rows, in_features, out_features


def reference(x, weight, bias):
    y = jnp.matmul(x, weight.T, precision=jax.lax.Precision.HIGHEST) + bias
    y = jnp.sum(y / 2.0, axis=1, keepdims=True)
    return y * 0.01 + 1.0


def make_inputs(key, shape_index=0):
    m, k, n = SHAPES[shape_index]
    kx, kw, kb = jax.random.split(key, 3)
    return (jax.random.normal(kx, (m, k), jnp.float32),
            jax.random.normal(kw, (n, k), jnp.float32) * 0.05,
            jax.random.normal(kb, (n,), jnp.float32))
'''

# the product is also read by a max: summing the weight first would lose it
READ_TWICE = GEMM_SUM.replace(
    "    y = jnp.sum(y / 2.0, axis=1, keepdims=True)\n    return y * 0.01 + 1.0",
    "    s = jnp.sum(y / 2.0, axis=1, keepdims=True)\n"
    "    return s * 0.01 + jnp.max(y, axis=1, keepdims=True)")
# a sigmoid between the product and the sum: the sum does not pass through it
NONLINEAR = GEMM_SUM.replace("jnp.sum(y / 2.0, axis=1", "jnp.sum(jax.nn.sigmoid(y), axis=1")


def _mixed_column(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> None:
    """inf times weights of both signs: NaN (the weight summed first gives one infinity)"""
    x[3, 7] = np.inf


def _one_signed_column(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> None:
    """-inf times a column of positive weights: -inf"""
    weight[:, 20] = np.abs(weight[:, 20]) + 0.5
    x[8, 20] = -np.inf


def _zero_times_inf(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> None:
    """an infinite weight: the sign of x in most rows, NaN in a row of zeros"""
    weight[11, 9] = np.inf
    x[5, :] = 0.0


def _nan_and_bias(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> None:
    """a NaN input and an infinite bias"""
    x[12, 30] = np.nan
    bias[2] = -np.inf


POISONS = (_mixed_column, _one_signed_column, _zero_times_inf, _nan_and_bias)


def _taken(facts: Any) -> bool:
    return any("sum is taken before the dot" in r for r in facts.reasons)


def test_a_product_only_summed_over_its_features_sums_the_weight_first(tmp_path: Path) -> None:
    task = tmp_path / "gemm_sum.py"
    task.write_text(GEMM_SUM)
    facts = classify_task(task)
    assert _taken(facts) and not facts.unsupported, facts.reasons
    source = first_kernel(task)
    # the weight's features are summed in the body; no dot is as wide as the layer
    assert "jnp.sum(" in source and "jnp.max(" in source and "jnp.min(" in source
    assert_matches_reference(task, source, seed=0, rtol=2e-5, atol=2e-5)


def test_the_summed_first_kernel_keeps_the_references_nan_and_infinities(tmp_path: Path) -> None:
    import jax
    from jax.experimental.pallas import tpu as pltpu

    from tools.api import load_task

    task = tmp_path / "gemm_sum.py"
    task.write_text(GEMM_SUM)
    namespace: dict[str, Any] = {"__name__": "candidate"}
    exec(compile(first_kernel(task), str(task), "exec"), namespace)
    clean = tuple(np.array(a) for a in load_task(task).make_inputs(0, 0))
    for poison in POISONS:
        args = tuple(a.copy() for a in clean)
        poison(*args)
        want = np.asarray(load_task(task).reference(*args))
        with pltpu.force_tpu_interpret_mode():
            got = np.asarray(jax.block_until_ready(namespace["build"]()(*args)))
        assert not np.isfinite(want).all(), poison.__doc__
        for kind in (np.isnan, np.isposinf, np.isneginf):
            np.testing.assert_array_equal(kind(got), kind(want),
                                          err_msg=f"{kind.__name__}: {poison.__doc__}")
        finite = np.isfinite(want)
        np.testing.assert_allclose(got[finite], want[finite], rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("text", [READ_TWICE, NONLINEAR], ids=["read-twice", "nonlinear"])
def test_a_product_read_otherwise_keeps_its_dot(tmp_path: Path, text: str) -> None:
    assert text != GEMM_SUM
    task = tmp_path / "gemm_other.py"
    task.write_text(text)
    assert not _taken(classify_task(task))
