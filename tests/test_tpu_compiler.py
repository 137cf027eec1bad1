"""The real TPU compiler (libtpu, ahead of time) as the compile check.

Every test here but two needs the ``tpu-compiler`` extra and is skipped, saying so, where
libtpu is not installed; those two check what a report says without it. The compiler is held
against the emulated check here on a few representative programs (under a minute with the
rest of the module); the whole corpus, every disagreement listed, is
``python benchmarks/tpu_compiler.py --part disagreements``.
"""

from __future__ import annotations

import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from tests import tpu_corpus
from tests.perf_kernels import good, lower
from tools.lowered import tpu_compiler
from tools.lowered.compile_check import check_lowered

needs_libtpu = pytest.mark.skipif(
    not tpu_compiler.available(),
    reason="libtpu is not installed (pip install -e '.[tpu-compiler]'): no real TPU compiler")


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test compiles for real: nothing is read from an earlier run's cache."""
    monkeypatch.setenv(tpu_compiler.CACHE_ENV, str(tmp_path / "tpu-compile"))
    tpu_compiler.CACHE._memory.clear()


def _rmsnorm(rows: int, hidden: int, block_rows: int, dtype=jnp.float32) -> str:
    import kernels.rmsnorm as rmsnorm

    x = jax.ShapeDtypeStruct((rows, hidden), dtype)
    w = jax.ShapeDtypeStruct((hidden,), dtype)
    return lower(rmsnorm.build(block_rows=block_rows), x, w)


@needs_libtpu
@pytest.mark.slow
def test_a_kernel_that_fits_compiles_and_is_cached() -> None:
    text = lower(good.scale, jnp.ones((1024, 128), jnp.float32))
    (first,) = tpu_compiler.compile_all([text], "v6e")
    assert first.ok and not first.cached and first.compiler.startswith("libtpu ")
    assert first.program_sha256 == tpu_compiler.program_sha256(text)
    (again,) = tpu_compiler.compile_all([text], "v6e")
    assert again.ok and again.cached


@needs_libtpu
@pytest.mark.slow
def test_the_compilers_vmem_error_is_the_verdict_with_its_numbers() -> None:
    """The RMSNorm the search once picked, at 16384x4096 f32 with 512-row blocks, is over
    v6e's 32 MiB scoped VMEM: the compiler says by how much, and the check fails with it."""
    text = _rmsnorm(16384, 4096, 512)
    report = tpu_compiler.check(text, chip="v6e")
    assert not report.ok
    assert report.checker.startswith("TPU compiler (libtpu ")
    d, *emulated = report.diagnostics  # the compiler's first, then the emulated account
    assert d.kind == "vmem" and d.message.startswith("TPU compiler (v6e): ")
    assert "limit 32.00M" in d.message or "of 127.94M vmem" in d.message, d.message
    assert "Shrink the blocks" in d.hint
    assert report.emulated_ok is False and emulated and emulated[0].kind == "vmem"


@needs_libtpu
@pytest.mark.slow
def test_the_compiler_wins_over_the_emulated_check() -> None:
    """A kernel the compiler accepts passes even where the emulated check would refuse it
    (its verdict is kept beside, as emulated_ok)."""
    a = jax.ShapeDtypeStruct((256, 256), jnp.bfloat16)
    text = lower(functools.partial(good.matmul, vmem_limit_bytes=96 * 2**20), a, a)
    emulated = check_lowered(text, chip="v5e")
    refused = tpu_compiler.decide(emulated, tpu_compiler.RealCompile(
        "v5e", True, tpu_compiler.program_sha256(text), "libtpu test"))
    assert refused.ok and refused.diagnostics == [] and refused.emulated_ok is emulated.ok
    report = tpu_compiler.check(text, chip="v5e")
    assert report.emulated_ok is emulated.ok
    assert report.ok == (report.diagnostics == [])


@needs_libtpu
def test_a_compile_over_its_limit_is_a_verdict_naming_the_limit() -> None:
    text = lower(good.matmul, jax.ShapeDtypeStruct((2048, 2048), jnp.bfloat16),
                 jax.ShapeDtypeStruct((2048, 2048), jnp.bfloat16))
    (result,) = tpu_compiler.compile_all([text], "v6e", limit=0.001)
    assert not result.ok and result.kind == "timeout"
    assert "within its limit of 0.001 s" in result.message
    assert tpu_compiler.LIMIT_ENV in result.message


# One of each kind, on v6e (the whole corpus, every disagreement listed, is
# `python benchmarks/tpu_compiler.py --part disagreements`, 6-13 minutes):
SHIPPED_PASSES = "kernels/rmsnorm block_rows=256 @ tasks/rmsnorm shape 0"
EDGE_REFUSED = "kernels/rmsnorm block_rows=512 @ (8192, 4096) float32"
EDGE_DISAGREES = "kernels/gelu block_rows=512 @ (8192, 4096) float32"
ADVERSARIAL_DISAGREES = ("f32_copies_over_vmem.py", "matmul_bf16")


@needs_libtpu
@pytest.mark.slow
def test_on_representative_programs_the_compilers_verdict_wins() -> None:
    """A shipped kernel both checks pass, a tuning point at the VMEM edge both refuse, one at
    the edge and one adversarial candidate the emulated check refuses and the compiler
    compiles: the disagreements are exactly the known ones, and the verdict is the compiler's."""
    programs = [*tpu_corpus.named(tpu_corpus.shipped(), [SHIPPED_PASSES]),
                *tpu_corpus.named(tpu_corpus.edge(), [EDGE_REFUSED, EDGE_DISAGREES]),
                *tpu_corpus.adversarial(only=[ADVERSARIAL_DISAGREES])]
    assert all(p.text for p in programs), [(p.name, p.lower_error) for p in programs]
    tpu_corpus.judge(programs, "v6e")
    by_name = {p.name: p for p in programs}
    assert by_name[SHIPPED_PASSES].real.ok and by_name[SHIPPED_PASSES].emulated.ok
    refused = by_name[EDGE_REFUSED].real
    assert not refused.ok and refused.kind == "vmem", refused.message
    found = tpu_corpus.disagreements(programs)
    assert tpu_corpus.unexplained(found, by_name) == {"new": {}, "gone": []}, found
    assert len(found) == 2  # the edge one and the adversarial one
    for p in programs:
        verdict = tpu_compiler.decide(p.emulated, p.real)
        assert verdict.ok == p.real.ok and verdict.emulated_ok == p.emulated.ok, p.name
        assert verdict.checker == tpu_compiler.compiler_name() != tpu_compiler.EMULATED


def test_switched_off_the_emulated_check_judges_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tpu_compiler.SWITCH_ENV, "0")
    text = lower(good.scale, jnp.ones((1024, 128), jnp.float32))
    report = tpu_compiler.check(text, chip="v6e")
    assert not tpu_compiler.available()
    assert report.checker.startswith(tpu_compiler.EMULATED) and report.emulated_ok is None


def test_without_the_compiler_a_report_says_emulated() -> None:
    text = lower(good.scale, jnp.ones((1024, 128), jnp.float32))
    report = tpu_compiler.decide(check_lowered(text, chip="v6e"), None)
    assert report.checker == tpu_compiler.EMULATED == "emulated compile check"
    assert report.emulated_ok is None and report.compile_seconds is None
    why = tpu_compiler.decide(check_lowered(text, chip="v6e"), None, unavailable="no libtpu")
    assert why.checker == "emulated compile check (no libtpu)"


@needs_libtpu
@pytest.mark.slow
def test_the_xla_baseline_is_priced_from_xla_tpus_program() -> None:
    """RMSNorm's reference as XLA:TPU compiles it: its own fusions, each priced by the kernel
    model's compute rules (the compiler's estimated cycles kept beside, never taken);
    operands XLA keeps in VMEM (S(1)) cost no HBM bytes; the input is read and the output
    written through HBM once each."""
    from tools.performance.chips import get_chip
    from tools.performance.xla_tpu import tpu_baseline

    x = jax.ShapeDtypeStruct((2048, 512), jnp.float32)
    w = jax.ShapeDtypeStruct((512,), jnp.float32)

    def rmsnorm(x, w):
        return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * w

    chip = get_chip("v6e")
    found = tpu_baseline(rmsnorm, [x, w], chip)
    fusions = [f for f in found.fusions if f.opcode == "fusion"]
    assert fusions and all(f.cycles and f.cycles > 0 for f in fusions)
    assert all(f.compiler_compute_s == pytest.approx(f.cycles / chip.clock_hz)
               for f in fusions)
    # compute from the model's rules: x*x, the mean's sum (one op per input element each),
    # two multiplies by the scale; rsqrt on the EUP
    assert all(f.compute_s == pytest.approx(max(f.vpu_ops / chip.vpu_ops_per_s,
                                                f.transcendentals / chip.transcendentals_per_s))
               for f in fusions)
    assert sum(f.vpu_ops for f in fusions) >= 4 * 2048 * 512
    assert sum(f.transcendentals for f in fusions) == 2048
    assert found.compiler_latency_s and found.compiler_latency_s != found.latency_s
    assert any(f.hbm_bytes == 0 for f in fusions)  # a fusion between two VMEM buffers
    # x read once from HBM (by a fusion or an async copy) and the output written once
    assert sum(f.hbm_bytes for f in found.fusions) <= 3 * 2048 * 512 * 4 + 2 * 512 * 4
    # async copies overlap the fusions scheduled around them, sharing one HBM
    assert found.latency_s == pytest.approx(max(
        sum(f.latency_s for f in fusions),
        sum(f.memory_s for f in found.fusions) + 1e-6 * len(fusions)))
    assert found.optimal_seconds and found.optimal_seconds > 0


@needs_libtpu
def test_xla_tpus_ragged_dot_kernel_is_unpriced_for_its_data_dependent_grid() -> None:
    """XLA:TPU runs a grouped matmul as two Mosaic kernels of its own; the second's grid has a
    bound that is an operand, known at run time only. The baseline names that as the reason
    the op is unpriced (and says nothing to a kernel author about rewriting it)."""
    from tools.performance.chips import get_chip
    from tools.performance.xla_tpu import tpu_baseline

    def grouped(lhs, rhs, sizes):
        return jax.lax.ragged_dot(lhs, rhs, sizes, preferred_element_type=jnp.float32)

    args = [jax.ShapeDtypeStruct((256, 256), jnp.float32),
            jax.ShapeDtypeStruct((4, 256, 256), jnp.float32),
            jax.ShapeDtypeStruct((4,), jnp.int32)]
    found = tpu_baseline(grouped, args, get_chip("v6e"))
    reasons = {f.name: f.opcode for f in found.fusions if f.bound == "unpriced"}
    grid = [r for r in reasons.values() if "bound read from an operand at run time" in r]
    assert len(grid) == 1 and "grid axis 1" in grid[0], reasons
    assert not any("bound the loop" in r or r.endswith("...") for r in reasons.values()), reasons
    assert len(found.unpriced) == len(reasons) == 2


def test_an_answer_for_a_program_not_asked_about_is_dropped_not_cached(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The compile child reads programs derived from candidate code: what it says lands only
    under the keys the parent asked about, never in the cache under another program's."""
    import msgspec

    from tools.sandbox import launcher

    asked, other = "module @asked {}", "module @other {}"
    forged = [tpu_compiler.RealCompile("v6e", True, tpu_compiler.program_sha256(other), "libtpu x"),
              tpu_compiler.RealCompile("v5e", True, tpu_compiler.program_sha256(asked), "libtpu x")]

    def lying_child(module: str, request: bytes, **_: object) -> launcher.SandboxResult:
        return launcher.SandboxResult(
            returncode=0, timed_out=False, stdout_tail="", stderr_tail="", wall_s=0.1,
            limits=launcher.Limits(),
            result=msgspec.msgpack.encode(tpu_compiler.CompileResponse(forged, "")))

    monkeypatch.setattr(tpu_compiler, "available", lambda: True)
    monkeypatch.setattr(tpu_compiler, "libtpu_version", lambda: "0.0.0")
    monkeypatch.setattr(launcher, "run_sandboxed", lying_child)
    (result,) = tpu_compiler.compile_all([asked], "v6e")
    assert not result.ok and result.kind == "crash"
    assert result.program_sha256 == tpu_compiler.program_sha256(asked)
    assert "answering for other programs" in result.message
    assert tpu_compiler.CACHE.get(tpu_compiler.program_sha256(other), "v6e") is None
    assert tpu_compiler.CACHE.get(tpu_compiler.program_sha256(asked), "v5e") is None
