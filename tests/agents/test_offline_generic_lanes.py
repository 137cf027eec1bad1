"""The generic class's narrow arrays: an array narrower than the lanes over a wide axis can go
as (..., width, rows) blocks, transposed in VMEM (`narrow_lanes`, a knob the tuner reaches and
the `lane_dense_layout` lever's default). XLA:TPU keeps such arrays with the wide axis minor,
so the kernel then reads them as bitcasts instead of behind relayout copies."""

from __future__ import annotations

from pathlib import Path

import pytest
from offline_kernels import assert_matches_reference, first_kernel

from agents.llm.offline import generic, variety
from agents.llm.offline.classify import classify_task
from agents.llm.offline.levers import LeverContext, NotApplicable, variants
from tools.lowered import tpu_compiler

# per (batch, head), each value over the whole (seq, depth) plane: depth 32 pads the lanes
PLANES = '''import jax
import jax.numpy as jnp

SHAPES = [(2, 4, 256, 32), (1, 2, 128, 32)]


def reference(x, y):
    scale = jnp.sum(jnp.abs(x), axis=(2, 3), keepdims=True) + 1.0
    return jnp.tanh(x / scale) * y


def make_inputs(key, shape_index=0):
    kx, ky = jax.random.split(key)
    shape = SHAPES[shape_index]
    return jax.random.normal(kx, shape, jnp.float32), jax.random.normal(ky, shape, jnp.float32)
'''


def _task(tmp_path: Path) -> Path:
    path = tmp_path / "planes.py"
    path.write_text(PLANES)
    return path


def test_narrow_arrays_are_a_knob_and_both_layouts_compute_the_reference(tmp_path: Path) -> None:
    task = _task(tmp_path)
    facts = classify_task(task)
    assert facts.kernel_class == "generic", facts.reasons
    assert generic.narrow_swaps(facts) == ([True, True], [True]) and generic.lanes_knob(facts)
    source = first_kernel(task)
    assert "'narrow_lanes': [0, 1]" in source and "_SWAP_IN = (True, True)" in source
    for lanes in (0, 1):
        assert_matches_reference(task, source, seed=3, narrow_lanes=lanes)


def test_the_lever_makes_the_swapped_layout_the_default_once(tmp_path: Path) -> None:
    facts = classify_task(_task(tmp_path))
    base = variety.default_spec(facts, {}, {})
    (swapped,) = variants("generic", base, "lane_dense_layout", LeverContext(facts, {}))
    assert swapped.narrow_lanes and not base.narrow_lanes
    source = variety.WRITERS["generic"].render(facts, swapped, "t")
    assert "'narrow_lanes': [1, 0]" in source and "narrow_lanes: int = 1" in source
    again = variants("generic", swapped, "lane_dense_layout", LeverContext(facts, {}))
    assert isinstance(again, NotApplicable) and "already" in again.reason
    # per array, two (32, 256) f32 buffers (32 KiB each) and its value in the body's
    # orientation, lane-padded (128 KiB), against two lane-padded buffers
    kib = 1024
    assert generic.spec_vmem(facts, base) - generic.spec_vmem(facts, swapped) == 3 * (
        2 * 128 * kib - (2 * 32 * kib + 128 * kib))


@pytest.mark.slow
@pytest.mark.skipif(not tpu_compiler.available(),
                    reason="libtpu is not installed (pip install -e '.[tpu-compiler]')")
@pytest.mark.parametrize("source", ["planes", "summed"])
def test_swapped_blocks_spare_the_relayout_copies_xla_puts_around_the_kernel(
        tmp_path: Path, source: str) -> None:
    """Priced with XLA:TPU's program around the kernel: row-major blocks of the narrow
    arrays pay copies outside it; swapped ones are bitcasts there and transposes inside."""
    from tools.api import estimate

    task = tmp_path / f"{source}.py"
    task.write_text(PLANES if source == "planes" else SUMMED)
    candidate = tmp_path / "planes_candidate.py"
    candidate.write_text(first_kernel(task))
    laid_out = estimate(task, candidate, config={"narrow_lanes": 0})
    swapped = estimate(task, candidate, config={"narrow_lanes": 1})
    assert laid_out.sound and swapped.sound
    assert laid_out.outside_ops_s > 0 and swapped.outside_ops_s < laid_out.outside_ops_s
    assert swapped.latency_s < laid_out.latency_s


# a dot summed over its free axis: the generic class's summing kernel, one (rows, 1) output
SUMMED = '''import jax
import jax.numpy as jnp

SHAPES = [(384, 1024), (200, 256)]


def reference(x, w):
    return jnp.sum(jnp.dot(x, w.T) / 2.0, axis=1, keepdims=True) * 1.5


def make_inputs(key, shape_index=0):
    kx, kw = jax.random.split(key)
    rows, width = SHAPES[shape_index]
    return jax.random.uniform(kx, (rows, width)), jax.random.normal(kw, (width, width)) * 0.1
'''


def test_a_summed_kernel_writes_its_narrow_output_lane_dense(tmp_path: Path) -> None:
    """The (rows, 1) output of a summing kernel goes as (1, rows) blocks where the rows'
    block is whole or 128s, and as laid out where it is not (a 64-row block)."""
    task = tmp_path / "summed.py"
    task.write_text(SUMMED)
    facts = classify_task(task)
    assert facts.kernel_class == "generic" and generic.reduced(facts), facts.reasons
    assert generic.narrow_swaps(facts) == ([False, False], [True]) and generic.lanes_knob(facts)
    base = variety.default_spec(facts, {}, {})
    assert not isinstance(variants("generic", base, "lane_dense_layout", LeverContext(facts, {})),
                          NotApplicable)
    source = first_kernel(task)
    assert "'narrow_lanes': [0, 1]" in source and "_lane_block(shape, axes, blocks)" in source
    for lanes, rows in ((1, 512), (0, 512), (1, 64)):
        assert_matches_reference(task, source, seed=2, rtol=1e-3, atol=1e-3,
                                 narrow_lanes=lanes, block_0=rows)
