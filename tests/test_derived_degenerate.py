"""A derived unaligned shape that shrinks the other sizes must not make the suite vacuous.

The loader derives shapes off the (8, 128) tile by moving one size and shrinking the others
(:mod:`tools.inputs.shapes`). A reference that fixes a count in Python (JAXBench 45k's
group norm over 256 groups) can then normalise one feature per group: every output zero, and
the whole task was refused as vacuous. Where a scaled task is written, the loader finds
that once and records it (``DERIVED_WHOLE``): the other sizes stay whole there. A derived
shape the suite still finds degenerate is dropped, not the task refused, while another case
leaves the tile.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from tools.api import scaled_task
from tools.correctness.testsuite import VacuousSuite, build_suite
from tools.inputs import shapes
from tools.inputs.tasks import load_task

# 256 groups fixed in Python: at 256 features, one feature per group normalises to zero
GROUP_NORM = """
import jax
import jax.numpy as jnp

CONFIG = {'name': 'tiny_group_norm', 'batch': 64, 'features': 1024, 'num_groups': 256}

def create_inputs(dtype=jnp.float32):
    key = jax.random.PRNGKey(3)
    x = jax.random.normal(key, (CONFIG['batch'], CONFIG['features']), dtype=dtype)
    return (x,)

def workload(x):
    groups = 256
    grouped = x.reshape(x.shape[0], groups, x.shape[1] // groups)
    mean = jnp.mean(grouped, axis=-1, keepdims=True)
    var = jnp.var(grouped, axis=-1, keepdims=True)
    return ((grouped - mean) / jnp.sqrt(var + 1e-5)).reshape(x.shape)
"""


def _task(tmp_path: Path) -> Path:
    path = tmp_path / "baseline.py"
    path.write_text(textwrap.dedent(GROUP_NORM))
    return path


def test_a_derived_shape_keeps_the_sizes_whose_shrinking_zeroes_the_output(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found once, where the scaled file is written; every later load reads it from there."""
    path = scaled_task(_task(tmp_path), [1.0, 0.5])
    assert "DERIVED_WHOLE = ['batch']" in path.read_text()

    def run(task: object, index: int) -> bool:
        raise AssertionError("a load of the scaled file ran the reference")

    monkeypatch.setattr(shapes, "_degenerate", run)
    task = load_task(path)
    (derived,) = task.derived_shapes
    (x,) = task.make_inputs(0, derived)
    smallest = min(task.make_inputs(0, i)[0].shape[1] for i in range(derived))
    assert x.shape[0] % 8 and x.shape[1] == smallest > 256, x.shape  # not cut to 256
    assert np.any(np.asarray(task.reference_at(derived)(x)))
    suite = build_suite(task, seeds=(0,), probes=False)
    assert derived in {c.shape_index for c in suite.cases}


def test_with_the_sizes_cut_the_only_shape_off_the_tile_is_vacuous(tmp_path: Path) -> None:
    """What the check prevents: loaded without it, the derived shape is cut to 256."""
    task = load_task(_task(tmp_path), scales=[1.0, 0.5])
    (derived,) = task.derived_shapes
    assert task.make_inputs(0, derived)[0].shape[1] == 256 and not task.derived_whole
    with pytest.raises(VacuousSuite, match=r"all zero.*no other shape of the suite leaves"):
        build_suite(task, seeds=(0,), probes=False)


# x is group-normalised over 256 groups, z only doubled; SHAPES are (rows of x, features,
# rows of z). The declared (27, 1024, 32) leaves the tile in x's rows; the loader derives
# z's rows off the tile with the features shrunk to 256: one feature per group, all zero.
KERNELGRAPH_GROUP_NORM = """
import jax, jax.numpy as jnp

NAME = "group_norm_fixed_groups"
SHAPES = [(64, 1024, 64), (48, 512, 32), (27, 1024, 32)]

def reference(x, z):
    grouped = x.reshape(x.shape[0], 256, x.shape[1] // 256)
    mean = jnp.mean(grouped, axis=-1, keepdims=True)
    var = jnp.var(grouped, axis=-1, keepdims=True)
    return ((grouped - mean) / jnp.sqrt(var + 1e-5)).reshape(x.shape), z * 2.0

def make_inputs(key, shape_index=0):
    rows, features, others = SHAPES[shape_index]
    kx, kz = jax.random.split(key)
    return jax.random.normal(kx, (rows, features)), jax.random.normal(kz, (others, 128))
"""


def test_a_degenerate_derived_shape_is_dropped_with_a_note_while_another_leaves_the_tile(
        tmp_path: Path) -> None:
    path = tmp_path / "group_norm.py"
    path.write_text(textwrap.dedent(KERNELGRAPH_GROUP_NORM))
    task = load_task(path)
    zeroed = [i for i in task.derived_shapes
              if not np.any(np.asarray(task.reference_at(i)(*task.make_inputs(0, i))[0]))]
    assert zeroed, [task.describe_shape(i) for i in task.derived_shapes]
    suite = build_suite(task, seeds=(0,), probes=False)
    kept = {c.shape_index for c in suite.cases}
    assert not kept & set(zeroed) and 2 in kept  # the declared unaligned shape stays
    dropped = [n for n in suite.notes if "dropped" in n and "derived by the loader" in n]
    assert len(dropped) == len(zeroed) and "all zero" in dropped[0], suite.notes
    assert not any(f"shape{i}-" in n for i in zeroed for n in suite.notes
                   if n not in dropped)  # nothing else said of a dropped case


def test_a_declared_shape_that_is_degenerate_still_refuses_the_task(tmp_path: Path) -> None:
    path = tmp_path / "group_norm.py"
    path.write_text(textwrap.dedent(KERNELGRAPH_GROUP_NORM).replace(
        "(48, 512, 32)", "(48, 256, 32)"))
    with pytest.raises(VacuousSuite, match="all zero"):
        build_suite(load_task(path), seeds=(0,), probes=False)
