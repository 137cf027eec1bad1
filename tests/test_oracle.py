"""The oracle's precision: float64 with integer indices widened, and a recorded float32
fallback where the reference cannot run in float64 at all."""

from __future__ import annotations

import textwrap
from pathlib import Path

import msgspec
import numpy as np

from tools.correctness.compare import compare_case
from tools.correctness.testsuite import build_suite, suite_hash
from tools.inputs.tasks import load_task

INDEXED = """
import jax, jax.numpy as jnp
from jax import lax
SHAPES = [(64, 128)]
def reference(x, idx):
    # lax.concatenate wants one dtype: under x64 arange is int64, so int32 indices must be
    # widened with everything else for the float64 oracle to run
    rows = lax.concatenate([idx, jnp.arange(4)], 0)
    return x[rows] * 2.0 + 1.0
def make_inputs(key, shape_index=0):
    kx, ki = jax.random.split(key)
    return (jax.random.normal(kx, SHAPES[shape_index], jnp.float32),
            jax.random.randint(ki, (8,), 0, 64, jnp.int32))
"""

MIXED = """
import jax, jax.numpy as jnp
from jax import lax
SHAPES = [(64, 128)]
def reference(x, w):
    # a float32 constant concatenated to a float input: float64 inputs break it
    padded = lax.concatenate([x, jnp.ones((8, 128), jnp.float32)], 0)
    return padded @ w
def make_inputs(key, shape_index=0):
    kx, kw = jax.random.split(key)
    return (jax.random.normal(kx, SHAPES[shape_index], jnp.float32),
            jax.random.normal(kw, (128, 128), jnp.float32))
"""


def _task(tmp_path: Path, name: str, text: str):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(text))
    return load_task(path)


def test_integer_index_inputs_are_widened_with_the_floats(tmp_path: Path) -> None:
    suite = build_suite(_task(tmp_path, "indexed", INDEXED), seeds=(0, 1), probes=False)
    assert {c.oracle_precision for c in suite.cases} == {"float64"}
    assert not any("oracle runs in" in n for n in suite.notes)
    case = suite.cases[0]
    x, idx = (a.numpy() for a in case.inputs)
    assert idx.dtype == np.int32  # the suite keeps the task's own dtypes
    rows = np.concatenate([idx, np.arange(4)])
    np.testing.assert_allclose(case.oracle[0].numpy(), x[rows].astype(np.float64) * 2 + 1)


def test_a_reference_that_cannot_run_in_float64_gets_a_recorded_float32_oracle(
    tmp_path: Path,
) -> None:
    suite = build_suite(_task(tmp_path, "mixed", MIXED), seeds=(0, 1), probes=False)
    assert {c.oracle_precision for c in suite.cases} == {"float32-highest"}
    note = next(n for n in suite.notes if "oracle runs in float32-highest" in n)
    assert "float64:" in note and "float64-narrow-int:" in note  # why each was not used
    case = suite.cases[0]
    x, w = (a.numpy().astype(np.float64) for a in case.inputs)
    exact = np.concatenate([x, np.ones((8, 128))]) @ w
    oracle = case.oracle[0].numpy()
    assert oracle.dtype == np.float64
    np.testing.assert_allclose(oracle, exact, rtol=1e-5, atol=1e-4)  # float32, full precision
    assert compare_case(case, [oracle.astype(np.float32)], suite.tolerance).passed
    assert not compare_case(case, [(oracle * 1.01).astype(np.float32)], suite.tolerance).passed
    # the precision is part of what the hash covers
    relabelled = msgspec.structs.replace(
        suite, cases=tuple(msgspec.structs.replace(c, oracle_precision="float64")
                           for c in suite.cases))
    assert suite_hash(relabelled) != suite.sha256 == suite_hash(suite)
