from __future__ import annotations

import jax.numpy as jnp
import msgspec
import pytest

from tests.perf_kernels import good, lower
from tools.lowered.compile_check import check_lowered
from tools.lowered.mosaic import parse_lowered
from tools.performance.executors import Measurement, get_executor
from tools.performance.profile import render, summarize


def _sim_profile(fn, ref, *args):
    text = lower(fn, *args)
    ex = get_executor("sim-tpu-v6e")
    m = ex.estimate(parse_lowered(text), ex.reference_cost(ref, args))
    return summarize(m, check_lowered(text, chip="v6e"))


def test_matmul_profile_points_at_refetch_and_mxu_padding() -> None:
    a = jnp.ones((256, 512), jnp.bfloat16)
    b = jnp.ones((512, 384), jnp.bfloat16)
    p = _sim_profile(good.matmul, lambda x, y: jnp.dot(x, y), a, b)
    assert p.measured_on == "simulated" and p.source == "cost model"
    assert p.grid_steps == 24
    (k,) = p.kernels
    assert [w["transfers"] for w in k.windows] == [24, 24, 6]
    assert [w["distinct_blocks"] for w in k.windows] == [8, 12, 6]
    assert k.mxu_utilisation == pytest.approx(0.25)
    assert 0 < p.achieved_bandwidth_fraction < 1 and 0 < p.achieved_compute_fraction < 1
    assert p.vmem_bytes == 3 * 2 * 128 * 128 * 2 + 128 * 128 * 4
    text = "\n".join(p.suggestions)
    assert "re-fetched" in text and "25% of the MXU" in text
    assert "SIMULATED" in render(p)
    msgspec.json.encode(p)  # serialisable for events and --json


def test_overhead_bound_kernel_is_told_to_use_bigger_blocks() -> None:
    x = jnp.ones((1024, 128), jnp.float32)
    p = _sim_profile(lambda v: good.scale(v, block_rows=8), lambda v: v * 2.0, x)
    assert p.bound == "overhead" and p.grid_steps == 128
    assert any("larger blocks" in s for s in p.suggestions)


def test_hardware_profile_from_a_measurement() -> None:
    m = Measurement(
        target="tpu", measured_on="real", latency_s=1e-5, baseline_s=2e-5, speedup=2.0,
        breakdown={"timing_source": "xprof device time", "min_bytes": 8_200_000,
                   "flops": 1_000_000, "hbm_bytes_per_s": 1.64e12, "peak_flops": 9.2e14},
    )
    p = summarize(m)
    assert p.measured_on == "real" and p.source == "xprof"
    assert p.achieved_bandwidth_fraction == pytest.approx(8.2e6 / 1e-5 / 1.64e12)
    assert p.bound == "memory"
    assert "measured (xprof)" in render(p)



def test_xla_ops_around_the_kernels_are_named_first_when_they_are_a_large_share() -> None:
    """The measurement's ops around the kernels (XLA:TPU's relayout copies, priced from its
    program) reach the profile; from a fifth of the time on, they are the first suggestion."""
    x = jnp.ones((1024, 128), jnp.float32)
    text = lower(good.scale, x)
    ex = get_executor("sim-tpu-v6e")
    m = ex.estimate(parse_lowered(text), ex.reference_cost(lambda v: v * 2.0, (x,)))
    for share, named in ((0.3, True), (0.1, False)):
        outside = share * m.latency_s
        moved = msgspec.structs.replace(m, breakdown={**m.breakdown, "outside_ops_s": outside,
                                                      "outside_ops": ["copy", "copy.1"]})
        p = summarize(moved, check_lowered(text, chip="v6e"))
        assert p.outside_ops_s == pytest.approx(outside) and p.outside_ops == ["copy", "copy.1"]
        first = p.suggestions[0] if p.suggestions else ""
        assert ("XLA ops around the kernels (copy, copy.1)" in first) is named, p.suggestions
        msgspec.json.encode(p)
