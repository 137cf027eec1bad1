"""Manual DMA waits are paired with their starts by semaphore and buffers (not by order),
across `pl.when` and loops; a wait that cannot be paired is exposed (tools/performance/dmapair.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from tests.perf_kernels import dma, lower
from tools.lowered.mosaic import parse_lowered
from tools.performance.chips import get_chip
from tools.performance.dmapair import UNPAIRED, price_dma_waits
from tools.performance.roofline import estimate_kernel, estimate_program

CANDIDATES = Path(__file__).parent / "candidates"
IN_PLACE = "manual DMAs waited for in place: their transfer time is exposed"


def _candidate(name: str):
    spec = importlib.util.spec_from_file_location(name, CANDIDATES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _kernel(fn, *args):
    (k,) = parse_lowered(lower(fn, *args)).kernels
    return k


@pytest.mark.parametrize("name", ["dma_wait_in_always_true_when", "dma_decoy_first"])
@pytest.mark.parametrize("shape", [(256, 512), (200, 256)])
def test_red_team_dma_kernels_cost_no_less_than_their_serial_twins(name: str, shape) -> None:
    """A wait inside an always-true `pl.when`, and a decoy DMA started first, earn nothing
    over `start(); wait()` (paired first-in first-out in one region they earned 1.18x and
    1.11x at 256x512 on v6e)."""
    module = _candidate(name)
    x = jax.ShapeDtypeStruct(shape, jnp.float32)
    for chip in (get_chip("v5e"), get_chip("v6e")):
        red = estimate_program(parse_lowered(lower(module.build(), x)), chip)
        twin = estimate_program(parse_lowered(lower(module.serial_twin(), x)), chip)
        assert red.sound and twin.sound
        assert red.latency_s >= twin.latency_s * 0.999, (chip.name, red.latency_s, twin.latency_s)
        assert IN_PLACE in red.kernels[0].caveats


def _exposed_by_waits(kernel, chip):
    """Per grid step: the seconds the kernel's waits expose, and the bytes paired in place."""
    steps = kernel.steps()
    pricing = price_dma_waits(kernel, steps, kernel.scalar_env(steps), {}, chip, lambda op: 0.0)
    return pricing.serial_s.tolist(), pricing.refund_bytes.tolist()


def test_double_buffered_loop_stays_overlapped() -> None:
    """start(c + 1) under `pl.when(c + 1 < n)`, wait(c): each wait is the previous trip's
    start (the first, the one before the loop): paired ahead, nothing exposed. The serial
    loop (start(c); wait(c)) exposes every chunk."""
    x = jax.ShapeDtypeStruct((4096, 1024), jnp.float32)
    chip = get_chip("v6e")
    chunk = dma.CHUNK * 1024 * 4
    pk = _kernel(lambda v: dma.scale_tanh(v, pipelined=True), x)
    sk = _kernel(lambda v: dma.scale_tanh(v, pipelined=False), x)
    assert _exposed_by_waits(pk, chip) == ([0.0], [0.0])
    assert _exposed_by_waits(sk, chip) == (
        [pytest.approx(8 * chunk / chip.hbm_bytes_per_s)], [8 * chunk])
    piped, serial = estimate_kernel(pk, chip), estimate_kernel(sk, chip)
    assert UNPAIRED not in piped.caveats and IN_PLACE not in piped.caveats
    assert UNPAIRED not in serial.caveats and IN_PLACE in serial.caveats
    assert piped.latency_s < serial.latency_s


def test_cross_step_prefetch_stays_overlapped() -> None:
    """Step i starts chunk i + 1 and waits for chunk i: step 0's wait takes its own
    `pl.when(i == 0)` start (exposed: nothing runs between), every later one the previous
    step's (overlapped)."""
    x = jax.ShapeDtypeStruct((4096, 1024), jnp.float32)
    chip = get_chip("v6e")
    chunk = dma.CHUNK * 1024 * 4
    k = _kernel(dma.cross_step, x)
    serial, refund = _exposed_by_waits(k, chip)
    assert serial == [pytest.approx(chunk / chip.hbm_bytes_per_s)] + [0.0] * 7
    assert refund == [chunk] + [0.0] * 7
    est = estimate_kernel(k, chip)
    assert UNPAIRED not in est.caveats and est.dma_starts == 8


def test_a_wait_that_matches_two_starts_is_exposed() -> None:
    """Two starts name the same semaphore and buffers: neither wait can be paired, so each
    is charged its full transfer, serially."""
    x = jax.ShapeDtypeStruct((1024, 1024), jnp.float32)
    chip = get_chip("v6e")
    est = estimate_kernel(_kernel(dma.started_twice, x), chip)
    assert UNPAIRED in est.caveats
    chunk = dma.CHUNK * 1024 * 4
    assert est.exposed_dma_s >= 2 * chunk / chip.hbm_bytes_per_s
