"""A Mosaic kernel's static cycles from the TPU compiler's final bundle schedule.

The reader is held to small schedules written here in the dump's own format (grid loop,
stage guard, a kernel's pl.when region, an inner loop, delay slots, a bundle spanning
lines), and to a real dump: the compile child reads one for every program it compiles,
where libtpu is installed (skipped, saying so, where it is not).
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from tools.lowered import tpu_compiler, tpu_compiling
from tools.performance import llo_cycles
from tools.performance.llo_cycles import LloError, kernel_cycles, step_cycles, total_cycles

needs_libtpu = pytest.mark.skipif(
    not tpu_compiler.available(),
    reason="libtpu is not installed (pip install -e '.[tpu-compiler]'): no real TPU compiler")

HEADER = """= control target key start
LH: loop header
LB: loop body
LE: loop exit
PB: predicated region body
PF: predicated region fallthrough
CT: control target
= control target key end

"""


def _schedule(rows: list[tuple[str, str, str]]) -> str:
    """Bundles (marker, instructions, trailing comment), numbered from 0 as the dump does."""
    lines = [HEADER.rstrip("\n")]
    for i, (marker, body, comment) in enumerate(rows):
        address = "0" if i == 0 else f"{i:#x}"
        tail = f" /* {comment} */" if comment else ""
        lines.append(f"{address:>6} {marker + ':' if marker else '  :'} > {{ {body} }}{tail}")
    return "\n".join(lines) + "\n"


def _nop(n: int) -> list[tuple[str, str, str]]:
    return [("", "", "")] * n


def _branch(predicate: str, region: int) -> tuple[str, str, str]:
    return ("", f"%b = sbr.rel ({predicate}) target = $region{region}", "")


def _grid(trips: str = "6", nested: list[tuple[str, str, str]] | None = None) -> str:
    """A grid loop of ``trips`` trips: 2 bundles before, 30 a trip (a 14-bundle stage guard
    holding a 4-bundle pl.when region), 2 after."""
    nested = nested if nested is not None else [
        _branch("%p7", 30), *_nop(4), *_nop(4), ("PF", "", "Start/End empty region 30")]
    rows = [
        ("", "%s1 = smov 0", ""), ("", "%s2 = smov 0", ""),
        ("LB", "%s3 = sphi %s2, %s8", "Start region 10"), *_nop(2),
        _branch("%p5", 20), *_nop(4),  # the stage guard's branch and its delay slots
        ("", "%v1 = vld [vmem:[#allocation2]]", ""),
        *nested,
        *_nop(3),
        ("PF", "%s8 = sadd.s32 1, %s3", "Start/End empty region 20"),
        ("", f"%p9 = scmp.ge.s32.totalorder %s8, {trips} /* loop exit test */", ""),
        ("", "", ""),
        _branch("!%p9", 10), *_nop(4),
        ("", "%e = vsyncpa [#allocation5], 1", ""), ("", "", "exit bundle"),
    ]
    return _schedule(rows)


def test_a_grid_step_counts_its_guard_and_bounds_its_pl_when_region() -> None:
    k = kernel_cycles(_grid(), "k")
    assert (k.bundles, k.trips, k.step_cycles, k.outside_cycles) == (34, 6, 30, 4)
    assert k.regions == [4] and k.step_floor == 26  # the pl.when region's 4 bundles
    assert k.idle_trip_cycles == 16  # a fill or drain trip skips the 14-bundle guard
    assert total_cycles(k, 4) == 4 + 4 * 30 + 2 * 16  # the upper bound: run on every step
    runs = llo_cycles.fractions([[1, 3, 1]], 4, len(k.regions))
    assert runs == [0.25] and step_cycles(k, runs) == 27.0
    assert total_cycles(k, 4, runs) == 4 + 4 * 27 + 2 * 16


def test_regions_are_weighted_only_when_the_conditions_match_them() -> None:
    assert llo_cycles.fractions([[1, 3, 1]], 4, 2) is None  # the compiler kept another
    assert llo_cycles.fractions([[1, 3, 0]], 4, 1) is None  # a condition not evaluated
    assert llo_cycles.fractions([], 4, 0) is None
    k = kernel_cycles(_grid(), "k")
    assert step_cycles(k, None) == k.step_cycles == 30


def test_an_inner_loop_counts_its_trips() -> None:
    inner = [("LB", "%s12 = sadd.s32 1, %s13", "Start region 40"),
             ("", "%p11 = scmp.ge.s32.totalorder %s12, 3 /* loop exit test */", ""),
             _branch("!%p11", 40), *_nop(4), *_nop(2)]  # a 7-bundle trip, then 2 more
    k = kernel_cycles(_grid(nested=inner), "k")
    guard = 1 + 3 * 7 + 2 + 3  # its first bundle, the inner loop's trips, 5 more
    assert k.idle_trip_cycles == 16 and k.regions == []
    assert k.step_cycles == 16 + guard


def test_v7_branches_have_six_delay_slots() -> None:
    """The same text read for v7: six bundles after each branch run whether it is taken or
    not, so a trip takes the two bundles after the back branch's four nops, and each
    skippable region is two bundles shorter (guard 12, pl.when region 2)."""
    k = kernel_cycles(_grid(), "k", "v7")
    assert (k.step_cycles, k.regions, k.idle_trip_cycles) == (32, [2], 20)
    with pytest.raises(LloError, match="no branch delay known"):
        kernel_cycles(_grid(), "k", "v4")


def test_a_trip_count_against_a_register_gives_no_total() -> None:
    k = kernel_cycles(_grid(trips="%s4"), "k")
    assert k.trips is None and k.unknown_trips == 1
    assert total_cycles(k, 4) is None


def test_a_kernel_without_a_loop_is_one_step() -> None:
    rows = [("", "%s1 = smov 0", ""), _branch("%p1", 7), *_nop(4), *_nop(3),
            ("PF", "", "Start/End empty region 7"), ("", "", "")]
    k = kernel_cycles(_schedule(rows), "k")
    assert (k.trips, k.step_cycles, k.step_floor, k.regions) == (None, 11, 8, [3])
    assert total_cycles(k, 1) == 11


def test_a_bundle_spanning_lines_is_one_bundle() -> None:
    text = _grid().replace("%v1 = vld [vmem:[#allocation2]]",
                           "%d = dma.hbm_to_vmem /* window:\nbase_bounds: (4, 4)\nhlo: k\n */")
    assert kernel_cycles(text, "k").bundles == 34


def test_a_schedule_it_cannot_follow_is_refused_with_where() -> None:
    with pytest.raises(LloError, match="no bundles"):
        kernel_cycles("nothing here\n", "k")
    with pytest.raises(LloError, match="region 99"):
        kernel_cycles(_grid().replace("$region20", "$region99"), "k")
    gap = _grid().replace("   0x5 ", "   0x6 ", 1)
    with pytest.raises(LloError, match="gaps"):
        kernel_cycles(gap, "k")


def test_the_dump_is_read_in_run_order_without_xlas_own_programs_and_emptied(
        tmp_path: Path) -> None:
    (tmp_path / "200-name.2-01-final_bundles.txt").write_text(_grid("6"))
    (tmp_path / "100-name.1-01-final_bundles.txt").write_text(_grid("10"))
    (tmp_path / "150-copy.3-01-final_bundles.txt").write_text(_grid("3"))
    (tmp_path / "100-TLP-01-final_bundles.txt").write_text(_grid("2"))
    (tmp_path / "100-name.1-00-schedule-analysis_final_bundles.txt").write_text("x")
    hlo = ("ENTRY %main {\n  %name.2 = f32[8] custom-call(%a), "
           'custom_call_target="tpu_custom_call"\n  %name.1 = f32[8] custom-call(%name.2), '
           'custom_call_target="tpu_custom_call"\n}\n')
    kernels, note = tpu_compiling.read_cycles(tmp_path, hlo)
    assert note == "" and [(k.name, k.trips) for k in kernels] == [("name.2", 6), ("name.1", 10)]
    assert list(tmp_path.iterdir()) == []  # the dump is gone


def test_a_dump_missing_a_kernel_gives_no_cycles_and_says_why(tmp_path: Path) -> None:
    (tmp_path / "100-name.1-01-final_bundles.txt").write_text(_grid())
    hlo = ('%name.1 = f32[8] custom-call(%a), custom_call_target="tpu_custom_call"\n'
           '%name.2 = f32[8] custom-call(%a), custom_call_target="tpu_custom_call"\n')
    kernels, note = tpu_compiling.read_cycles(tmp_path, hlo)
    assert kernels == [] and "name.2" in note


@needs_libtpu
@pytest.mark.slow
def test_the_compile_child_reads_a_real_schedule(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """kernels/matmul.py at 1024^2 f32, 256^3 blocks, on v6e: 64 grid steps, the pipeline's
    66 trips, its two pl.when regions (zero the accumulator, write it back) weighted by the
    steps they run, and no fewer cycles than the MXU needs for the work at its f32 peak."""
    import kernels.matmul as matmul
    from tests.perf_kernels import lower
    from tools.lowered.mosaic import parse_lowered
    from tools.performance.chips import get_chip
    from tools.performance.compiled_compute import ON_THEIR_STEPS, program_sides
    from tools.performance.roofline import estimate_program

    monkeypatch.setenv(tpu_compiler.CACHE_ENV, str(tmp_path / "cache"))
    tpu_compiler.CACHE._memory.clear()
    a = jax.ShapeDtypeStruct((1024, 1024), jnp.float32)
    text = lower(matmul.build(block_m=256, block_n=256, block_k=256), a, a)
    (bare,) = tpu_compiler.compile_all([text], "v6e")  # the compile check's: no schedule
    assert bare.ok and bare.kernel_cycles == [] and bare.cycles_note == tpu_compiler.NOT_ASKED
    (compiled,) = tpu_compiler.compile_all([text], "v6e", cycles=True)
    assert compiled.ok and not compiled.cached and compiled.cycles_note == ""
    (k,) = compiled.kernel_cycles
    assert k.trips == 66 and len(k.regions) == 2 and k.unknown_trips == 0
    chip = get_chip("v6e")
    program = parse_lowered(text)
    sides = program_sides(program, estimate_program(program, chip), chip, compiled)
    (kernel,) = sides.kernels
    assert kernel.grid_steps == 64 and kernel.regions_counted == ON_THEIR_STEPS
    mxu_cycles = 2 * 1024**3 / chip.matmul_peak("float32") * chip.clock_hz
    assert kernel.compiler_cycles is not None and kernel.compiler_cycles >= mxu_cycles
    assert kernel.combined_latency_s is not None and sides.price == "model"
    (again,) = tpu_compiler.compile_all([text], "v6e", cycles=True)
    assert again.cached and again.kernel_cycles == compiled.kernel_cycles
