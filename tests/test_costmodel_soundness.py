"""Kernels written to game the cost model are priced honestly or declared unsound."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp

from tests.perf_kernels import good, lower
from tools.lowered.mosaic import parse_lowered
from tools.performance.chips import get_chip
from tools.performance.roofline import estimate_kernel

CANDIDATES = Path(__file__).parent / "candidates"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, CANDIDATES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_unsigned_compare_hides_nothing() -> None:
    """`k <u 0xFFFFFFFF` always holds: every matmul and block fetch of the honest twin is
    counted (a signed reading would see `k < -1`, never true, and price it for free)."""
    gaming = _load("unsigned_compare_gaming")
    a = jax.ShapeDtypeStruct((1024, 1024), jnp.bfloat16)
    (k,) = parse_lowered(lower(gaming.build(), a, a)).kernels
    (twin,) = parse_lowered(lower(good.matmul, a, a)).kernels
    chip = get_chip("v6e")
    est, honest = estimate_kernel(k, chip), estimate_kernel(twin, chip)
    assert est.unsound == []
    assert est.matmul_flops == honest.matmul_flops == 2 * 1024**3
    assert est.fetches == honest.fetches
    assert est.latency_s >= honest.latency_s * 0.999
