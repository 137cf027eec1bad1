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
from tools.performance.dmapair import NEVER_WAITED, UNPAIRED, price_dma_waits
from tools.performance.roofline import EXPOSED, estimate_kernel, estimate_program

CANDIDATES = Path(__file__).parent / "candidates"


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
        assert EXPOSED in red.kernels[0].caveats and UNPAIRED not in red.kernels[0].caveats


def _exposed_by_waits(kernel, chip, seconds=lambda op: 0.0):
    """Per grid step: the seconds the kernel's waits expose, and the bytes they paired."""
    steps = kernel.steps()
    pricing = price_dma_waits(kernel, steps, kernel.scalar_env(steps), {}, chip, seconds)
    return pricing.serial_s.tolist(), pricing.refund_bytes.tolist(), pricing.caveats


def _vector_us(op) -> float:
    """1 us for each vector op, nothing for scalar ones."""
    return 1e-6 if op.vpu_ops or op.transcendentals else 0.0


X = jax.ShapeDtypeStruct((4096, 1024), jnp.float32)
CHUNK_BYTES = dma.CHUNK * 1024 * 4


def test_double_buffered_loop_hides_each_chunk_behind_the_previous_compute() -> None:
    """start(c + 1) under `pl.when(c + 1 < n)`, wait(c): each wait is the previous trip's
    start (the first, the one before the loop), hidden behind the previous chunk's compute;
    the serial loop (start(c); wait(c)) exposes every chunk in full."""
    chip = get_chip("v6e")
    bw = chip.hbm_bytes_per_s
    pk = _kernel(lambda v: dma.scale_tanh(v, pipelined=True), X)
    sk = _kernel(lambda v: dma.scale_tanh(v, pipelined=False), X)
    # With no compute to hide behind, both expose every chunk: the pairing alone hides nothing.
    assert _exposed_by_waits(pk, chip) == ([pytest.approx(8 * CHUNK_BYTES / bw)],
                                           [8 * CHUNK_BYTES], set())
    assert _exposed_by_waits(sk, chip)[:2] == ([pytest.approx(8 * CHUNK_BYTES / bw)],
                                               [8 * CHUNK_BYTES])
    # Each vector op taking 1 us: the pipelined chunks 1..7 hide behind a trip's compute,
    # chunk 0 behind nothing; the serial ones behind nothing.
    piped = _exposed_by_waits(pk, chip, _vector_us)[0][0]
    serial = _exposed_by_waits(sk, chip, _vector_us)[0][0]
    assert serial == pytest.approx(8 * CHUNK_BYTES / bw)
    assert piped == pytest.approx(CHUNK_BYTES / bw)  # chunk 0 alone
    assert estimate_kernel(pk, chip).latency_s < estimate_kernel(sk, chip).latency_s


def test_a_start_at_the_end_of_the_trip_hides_nothing() -> None:
    """Started after the compute and waited for first thing in the next trip: paired with
    the previous trip's start, but nothing runs between, so every chunk after the first is
    exposed (a model that let any DMA waited in a later trip overlap the compute priced it
    like the double-buffered loop)."""
    chip = get_chip("v6e")
    late = _kernel(dma.late_start, X)
    serial, refund, caveats = _exposed_by_waits(late, chip, _vector_us)
    assert UNPAIRED not in caveats and refund == [8 * CHUNK_BYTES]
    assert serial[0] >= 7 * CHUNK_BYTES / chip.hbm_bytes_per_s
    piped = estimate_kernel(_kernel(lambda v: dma.scale_tanh(v, pipelined=True), X), chip)
    assert estimate_kernel(late, chip).latency_s > piped.latency_s


def test_cross_step_prefetch_hides_behind_the_step() -> None:
    """Step i starts chunk i + 1 and waits for chunk i: step 0's wait takes its own
    `pl.when(i == 0)` start (exposed: nothing runs between), every later one the previous
    step's (hidden behind that step's compute and the step boundary)."""
    chip = get_chip("v6e")
    bw = chip.hbm_bytes_per_s
    k = _kernel(dma.cross_step, X)
    serial, refund, caveats = _exposed_by_waits(k, chip)
    # Counted where each was started: step 0 starts chunks 0 and 1, step 7 none.
    assert not caveats and refund == [2 * CHUNK_BYTES] + [CHUNK_BYTES] * 6 + [0]
    later = max(0.0, CHUNK_BYTES / bw - chip.per_step_overhead_s)
    assert serial == [pytest.approx(CHUNK_BYTES / bw)] + [pytest.approx(later)] * 7
    est = estimate_kernel(k, chip)
    assert UNPAIRED not in est.caveats and est.dma_starts == 8


@pytest.mark.parametrize("overlap", [False, True])
def test_run_scoped_buffers_and_a_wait_in_a_nested_region_pair(overlap: bool) -> None:
    """Buffer and semaphore allocated by `pl.run_scoped`, the wait in a region of its own:
    paired; the compute issued between the start and the wait hides the transfer."""
    chip = get_chip("v6e")
    k = _kernel(lambda v: dma.scoped(v, overlap=overlap), X)
    serial, refund, caveats = _exposed_by_waits(k, chip, _vector_us)
    assert not caveats and refund == [CHUNK_BYTES]
    if overlap:
        assert serial == [pytest.approx(max(0.0, CHUNK_BYTES / chip.hbm_bytes_per_s - 2e-6))]
    else:
        assert serial == [pytest.approx(CHUNK_BYTES / chip.hbm_bytes_per_s)]


def test_a_wait_that_matches_two_starts_is_exposed() -> None:
    """Two starts name the same semaphore and buffers: neither wait can be paired, so each
    is charged its full transfer, serially."""
    x = jax.ShapeDtypeStruct((1024, 1024), jnp.float32)
    chip = get_chip("v6e")
    est = estimate_kernel(_kernel(dma.started_twice, x), chip)
    assert UNPAIRED in est.caveats
    chunk = dma.CHUNK * 1024 * 4
    assert est.exposed_dma_s >= 2 * chunk / chip.hbm_bytes_per_s


def test_a_dma_never_waited_for_is_exposed() -> None:
    """No wait names its semaphore: the kernel reads the buffer without waiting (right in
    interpret mode, a race on the chip); it costs at least what start(); wait() does."""
    chip = get_chip("v6e")
    never = estimate_kernel(_kernel(lambda v: dma.unwaited(v, wait=False), X), chip)
    waited = estimate_kernel(_kernel(lambda v: dma.unwaited(v, wait=True), X), chip)
    assert NEVER_WAITED in never.caveats and NEVER_WAITED not in waited.caveats
    assert never.latency_s >= waited.latency_s * 0.999
