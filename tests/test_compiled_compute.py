"""Compute from the compiler, memory from the model: the combination and what it shows.

These run without libtpu (the compiler's cycles are given as the compile child would give
them); tests/test_llo_cycles.py reads a real schedule where libtpu is installed.
"""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from tests.perf_kernels import good, lower
from tools.lowered import tpu_compiler
from tools.lowered.mosaic import parse_lowered
from tools.performance.chips import get_chip
from tools.performance.compiled_compute import UPPER, program_sides
from tools.performance.llo_cycles import KernelCycles
from tools.performance.roofline import estimate_kernel, estimate_program, step_sides


def _scale_program() -> tuple[str, object]:
    text = lower(good.scale, jnp.ones((4096, 128), jnp.float32))
    return text, parse_lowered(text)


def test_the_models_own_busy_time_given_back_prices_the_same() -> None:
    """The combination is the model's rule with the compute side swapped: handed the model's
    own compute and overhead, it prices exactly as the model does."""
    _, program = _scale_program()
    (kernel,) = program.kernels
    chip = get_chip("v6e")
    compute, transfers = step_sides(kernel, chip)
    assert compute.shape == transfers.shape == (16,) and (compute == compute[0]).all()
    model = estimate_kernel(kernel, chip)
    same = estimate_kernel(kernel, chip, busy_s=float(compute[0]) + chip.per_step_overhead_s)
    assert same.latency_s == pytest.approx(model.latency_s, rel=1e-12)
    slower = estimate_kernel(kernel, chip, busy_s=10e-6)
    assert slower.latency_s > model.latency_s + 15 * 9e-6


def test_without_the_compiler_the_models_sides_are_shown_alone() -> None:
    _, program = _scale_program()
    chip = get_chip("v6e")
    sides = program_sides(program, estimate_program(program, chip), chip, None)
    (k,) = sides.kernels
    assert sides.combined_latency_s is None and sides.price == "model"
    assert "no TPU compiler" in sides.note and k.compiler_compute_s is None
    assert sum(k.model_step_bounds.values()) == k.grid_steps == 16


def _compiled(text: str, cycles: list[KernelCycles]) -> tpu_compiler.RealCompile:
    return tpu_compiler.RealCompile("v6e", True, tpu_compiler.program_sha256(text), "libtpu t",
                                    kernel_cycles=cycles)


def test_the_compilers_step_replaces_the_models_compute_and_memory_stays_the_models() -> None:
    text, program = _scale_program()
    chip = get_chip("v6e")
    estimate = estimate_program(program, chip)
    # 16 steps in 18 trips; a slow step (20 us) against the step's 0.3 us of transfers
    slow = KernelCycles("name.1", 100, 18, 35_000, 35_000, 50, 10)
    sides = program_sides(program, estimate, chip, _compiled(text, [slow]))
    (k,) = sides.kernels
    assert k.compiler_step_cycles == 35_000 and k.regions_counted == "none in the step"
    assert k.compiler_cycles == 10 + 16 * 35_000 + 2 * 50
    assert k.compiler_compute_s == pytest.approx(k.compiler_cycles / chip.clock_hz)
    assert k.combined_step_bounds == {"compute": 16, "memory": 0}
    assert k.combined_latency_s is not None and k.combined_latency_s > 16 * 35_000 / chip.clock_hz
    # a fast step (20 cycles): every step waits on its transfers, the memory side
    fast = KernelCycles("name.1", 100, 18, 20, 20, 5, 10)
    (k,) = program_sides(program, estimate, chip, _compiled(text, [fast])).kernels
    assert k.combined_step_bounds["memory"] >= 14
    assert k.combined_latency_s is not None and k.combined_latency_s >= k.memory_s


def test_a_schedule_that_is_not_this_kernels_is_not_paired() -> None:
    text, program = _scale_program()
    chip = get_chip("v6e")
    estimate = estimate_program(program, chip)
    short = KernelCycles("name.1", 100, 4, 200, 200, 5, 10)  # 4 trips for 16 steps
    (k,) = program_sides(program, estimate, chip, _compiled(text, [short])).kernels
    assert k.combined_latency_s is None and "4 trips for 16 grid steps" in k.note
    two = [short, short]
    sides = program_sides(program, estimate, chip, _compiled(text, two))
    assert sides.combined_latency_s is None and "not paired" in sides.note


def test_pl_when_regions_the_model_cannot_match_are_an_upper_bound() -> None:
    """good.scale has no pl.when: a schedule with a predicated region in the step cannot be
    weighted by the model's conditions, so it is counted on every step, and said so."""
    text, program = _scale_program()
    chip = get_chip("v6e")
    regions = KernelCycles("name.1", 100, 18, 300, 200, 5, 10, regions=[100])
    (k,) = program_sides(program, estimate_program(program, chip), chip,
                         _compiled(text, [regions])).kernels
    assert k.regions_counted == UPPER and k.compiler_step_cycles == 300


@pytest.mark.slow
def test_estimate_shows_the_compilers_compute_beside_the_models_price() -> None:
    """`estimate` carries both sides per kernel; the latency is the model's either way. With
    libtpu the compiler's cycles are there (its grid loop: 4 steps and the pipeline's 2),
    without it the model's sides alone, saying why."""
    from pathlib import Path

    from tools import api

    root = Path(__file__).resolve().parents[1]
    result = api.estimate(root / "tests/evaltasks/matmul_bf16.py", root / "kernels/matmul.py",
                          config={"block_k": 128})
    sides = result.compute_sides
    assert sides is not None and sides.price == "model"
    assert sides.model_latency_s == result.latency_s
    (k,) = sides.kernels
    assert k.grid_steps == 4 and sum(k.model_step_bounds.values()) == 4
    if not tpu_compiler.available():
        assert k.compiler_cycles is None and "no TPU compiler" in sides.note
        return
    assert k.compiler_cycles is not None and k.compiler_step_cycles is not None
    assert k.compiler_compute_s == pytest.approx(k.compiler_cycles / 1.75e9)
    assert sum(k.combined_step_bounds.values()) == 4 and k.combined_latency_s is not None


def test_a_kernel_of_one_step_takes_its_whole_schedule_as_the_step() -> None:
    """No grid, a loop of its own (7 trips of 100 bundles): the step is all of it."""
    text = lower(good.scale, jnp.ones((256, 128), jnp.float32))
    program = parse_lowered(text)
    chip = get_chip("v6e")
    own_loop = KernelCycles("name.1", 120, 7, 100, 100, 100, 20)
    (k,) = program_sides(program, estimate_program(program, chip), chip,
                         _compiled(text, [own_loop])).kernels
    assert k.grid_steps == 1 and k.compiler_step_cycles == k.compiler_cycles == 20 + 7 * 100
