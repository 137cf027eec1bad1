"""Python scalars from an input maker are static arguments of their shape, not inputs: the
suite holds the arrays and records the statics under its hash, the reference and the
candidate get them back at their positions, and a static that changes with the seed is
refused."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import jax
import msgspec
import numpy as np
import pytest

from tests.test_scaling import _write  # a JAXBench-layout <folder>/baseline.py
from tools.api import evaluate, scaled_task
from tools.correctness.suitedata import FrozenSuite, SuiteError, suite_hash
from tools.correctness.testsuite import build_suite
from tools.inputs.statics import bind, insert, split
from tools.inputs.tasks import TaskError, load_task
from tools.sandbox import wire

STATIC_HEAD = """
\"\"\"The first row group of x plus twice the second: static slices sized by a Python int.\"\"\"
import jax
import jax.numpy as jnp

CONFIG = {'name': 'static_head', 'rows': 256, 'cols': 96, 'groups': 4}


def create_inputs(dtype=jnp.float32):
    x = jax.random.normal(jax.random.PRNGKey(7), (CONFIG['rows'], CONFIG['cols']), dtype=dtype)
    return x, CONFIG['rows'] // CONFIG['groups']


def workload(x, group):
    return x[:group] + 2.0 * x[group:2 * group]
"""

# The honest kernel: the static sizes its blocks, as it sizes the reference's slices.
HONEST = """
import jax
from jax.experimental import pallas as pl


def _kernel(a_ref, b_ref, o_ref):
    o_ref[...] = a_ref[...] + 2.0 * b_ref[...]


def build():
    def kernel(x, group):
        block = (group, x.shape[1])
        return pl.pallas_call(
            _kernel, grid=(1,), out_shape=jax.ShapeDtypeStruct(block, x.dtype),
            in_specs=[pl.BlockSpec(block, lambda i: (0, 0)),
                      pl.BlockSpec(block, lambda i: (1, 0))],
            out_specs=pl.BlockSpec(block, lambda i: (0, 0)),
        )(x, x)
    return kernel
"""

SEEDED = """
import jax
import jax.numpy as jnp

CONFIG = {'name': 'seeded_static', 'rows': 64, 'cols': 128}


def create_inputs(dtype=jnp.float32):
    key = jax.random.PRNGKey(7)
    x = jax.random.normal(key, (CONFIG['rows'], CONFIG['cols']), dtype=dtype)
    return x, int(jax.random.randint(key, (), 1, 1000)) % 8 + 8


def workload(x, group):
    return x[:group] * 2.0
"""

# Tokens per expert (M // G) is a ratio of two sizes: it stays 32 when both shrink.
GROUPED = """
import jax
import jax.numpy as jnp

CONFIG = {'name': 'toy_gmm', 'num_experts': 16, 'seq_len': 512, 'emb_dim': 128}


def create_inputs(dtype=jnp.float32):
    G, M, K = CONFIG['num_experts'], CONFIG['seq_len'], CONFIG['emb_dim']
    k1, k2 = jax.random.split(jax.random.key(0))
    lhs = jax.random.normal(k1, (M, K), dtype)
    rhs = jax.random.normal(k2, (G, K, K), dtype)
    per_expert = M // G
    return lhs, rhs, jnp.full((G,), per_expert, jnp.int32), per_expert


def workload(lhs, rhs, group_sizes, per_expert):
    G = rhs.shape[0]
    blocks = lhs.reshape(G, per_expert, lhs.shape[1])
    return jnp.einsum('gmk,gkn->gmn', blocks, rhs).reshape(lhs.shape[0], -1)
"""


def test_python_scalars_from_create_inputs_are_static_arguments_of_each_shape(
    tmp_path: Path,
) -> None:
    task = load_task(_write(tmp_path, STATIC_HEAD, "static_head"), scales=(1.0, 0.5))
    assert [s["scale"] for s in task.shapes] == [1.0, 0.5]
    assert task.statics_at(0) == ((1, 64),) and task.statics_at(1) == ((1, 32),)
    (x,) = task.make_inputs(1, 1)  # the arrays only
    assert x.shape == (128, 48)
    assert [s.shape for s in task.input_specs(0)] == [(256, 96)]
    out = task.reference_at(1)(x)  # the static is put back at its position
    np.testing.assert_allclose(out, x[:32] + 2.0 * x[32:64])
    assert "static group=32 (argument 1)" in task.describe_shape(1)


def test_the_suite_records_each_shapes_statics_under_its_hash(tmp_path: Path) -> None:
    task = load_task(_write(tmp_path, STATIC_HEAD, "static_head"), scales=(1.0, 0.5))
    suite = build_suite(task, seeds=(0, 1))
    assert [(s.shape_index, [(a.position, a.value) for a in s.args]) for s in suite.statics] \
        == [(0, [(1, 64)]), (1, [(1, 32)])]
    assert suite.summary()["statics"] == {"0": [[1, 64]], "1": [[1, 32]]}
    assert any("static group=64 (argument 1)" in n for n in suite.notes)
    assert all(len(c.inputs) == 1 for c in suite.cases)
    assert FrozenSuite.from_bytes(suite.to_bytes()).sha256 == suite.sha256
    other = msgspec.structs.replace(suite, statics=(msgspec.structs.replace(
        suite.statics[0], args=(wire.StaticArg(1, 65),)), *suite.statics[1:]))
    assert suite_hash(other) != suite.sha256
    with pytest.raises(SuiteError, match="altered"):
        FrozenSuite.from_bytes(other.to_bytes())


def test_a_suite_without_statics_does_not_mention_them(tmp_path: Path) -> None:
    path = _write(tmp_path, STATIC_HEAD.replace(", CONFIG['rows'] // CONFIG['groups']", "")
                  .replace("def workload(x, group):", "def workload(x, group=64):"), "plain")
    suite = build_suite(load_task(path, scales=(1.0,)), seeds=(0,), probes=False)
    assert suite.statics == () and "statics" not in suite.summary()


def test_a_static_that_changes_with_the_seed_is_refused_naming_its_position(
    tmp_path: Path,
) -> None:
    task = load_task(_write(tmp_path, SEEDED, "seeded"), scales=(1.0,))
    with pytest.raises(TaskError, match=r"create_inputs returns \d+ at position 1 for seed 1 "
                                        r"but \d+ for seed 0 .*must be the same for every seed"):
        build_suite(task, seeds=(0, 1))


def test_a_kernelgraph_task_may_return_statics_too(tmp_path: Path) -> None:
    path = tmp_path / "take.py"
    path.write_text(textwrap.dedent("""
        import jax, jax.numpy as jnp
        NAME = "take"
        SHAPES = [(64, 128), (40, 256)]
        def reference(x, rows, scale):
            return x[:rows] * scale
        def make_inputs(key, shape_index=0):
            n, d = SHAPES[shape_index]
            return jax.random.normal(key, (n, d), jnp.float32), n // 2, 3.0
        def flops(x, rows, scale):
            return rows * x.shape[1]
    """))
    task = load_task(path)
    assert task.statics_at(1) == ((1, 20), (2, 3.0))
    (x,) = task.make_inputs(0, 1)
    assert task.reference_at(1)(x).shape == (20, 256)
    assert task.flops(1, (x,)) == 20 * 256


def test_statics_are_put_back_at_their_positions_and_must_fit() -> None:
    arrays, statics = split([np.zeros(2), 3, np.ones(1), True, 0.5])
    assert statics == ((1, 3), (3, True), (4, 0.5)) and len(arrays) == 2
    rebuilt = insert(arrays, statics)
    assert [type(v).__name__ for v in rebuilt] == ["ndarray", "int", "ndarray", "bool", "float"]
    assert bind(len, ()) is len
    assert bind(lambda *a: a, ((0, 7),))(1, 2) == (7, 1, 2)
    with pytest.raises(ValueError, match="does not fit"):
        insert([], ((2, 1),))
    with pytest.raises(ValueError, match="must increase"):
        insert([1, 2], ((1, 1), (0, 1)))
    with pytest.raises(ValueError, match="expected bool, int or float"):
        insert([1], ((0, np.int64(1)),))


def test_statics_cross_the_sandbox_as_plain_scalars_only() -> None:
    group = wire.ShapeGroup(0, 1, (), (wire.StaticArg(3, 256), wire.StaticArg(4, True)))
    assert wire.decode(wire.encode(group), wire.ShapeGroup) == group
    forged = wire.encode({"shape_index": 0, "interpret_seed": 1, "cases": [],
                          "statics": [{"position": 3, "value": [1, 2]}]})
    with pytest.raises(msgspec.ValidationError, match=re.escape("Expected `bool | int | float`")):
        wire.decode(forged, wire.ShapeGroup)


def test_a_ratio_of_sizes_is_not_taken_for_an_index_that_does_not_follow(
    tmp_path: Path,
) -> None:
    task = load_task(_write(tmp_path, GROUPED, "toy_gmm"), scales=(0.5,))
    assert task.shapes[0]["num_experts"] == 8 and task.shapes[0]["seq_len"] == 256
    assert task.statics_at(0) == ((3, 32),)
    lhs, rhs, group_sizes = task.make_inputs(0, 0)
    assert lhs.shape == (256, 64) and np.all(np.asarray(group_sizes) == 32)
    assert jax.eval_shape(task.reference_at(0), lhs, rhs, group_sizes).shape == (256, 64)


@pytest.mark.slow
def test_an_honest_kernel_gets_each_shapes_statics_and_passes(tmp_path: Path) -> None:
    path = scaled_task(_write(tmp_path, STATIC_HEAD, "static_head"), (1.0, 0.5))
    honest = tmp_path / "honest.py"
    honest.write_text(textwrap.dedent(HONEST))
    verdict = evaluate(path, honest)
    assert verdict.verdict == "pass", verdict.reasons
    assert len(verdict.cases) >= 4 and all(c.passed for c in verdict.cases)
    assert any("static group=32" in n for n in verdict.receipt["suite"]["notes"])
    # A kernel that sizes its blocks for the tuning point's static fails the unseen shape.
    fixed = tmp_path / "fixed.py"
    fixed.write_text(textwrap.dedent(HONEST).replace("block = (group,", "block = (64,"))
    verdict = evaluate(path, fixed)
    assert verdict.verdict == "fail"
    assert any("shape1" in r for r in verdict.reasons), verdict.reasons
