"""The real TPU compiler (libtpu, ahead of time) as the compile check.

Every test here needs the ``tpu-compiler`` extra and is skipped, saying so, where libtpu is
not installed; the last one checks what a report says without it.
"""

from __future__ import annotations

import functools
import json
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
def test_a_kernel_that_fits_compiles_and_is_cached() -> None:
    text = lower(good.scale, jnp.ones((1024, 128), jnp.float32))
    (first,) = tpu_compiler.compile_all([text], "v6e")
    assert first.ok and not first.cached and first.compiler.startswith("libtpu ")
    assert first.program_sha256 == tpu_compiler.program_sha256(text)
    (again,) = tpu_compiler.compile_all([text], "v6e")
    assert again.ok and again.cached


@needs_libtpu
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


# Every disagreement on v6e, by program, with the compiler's verdict (True: it compiles).
# All three are the emulated check's body-value rule (the largest value the body computes
# held whole, its excess over the vregs counted against VMEM) refusing a kernel the compiler
# compiles: an elementwise body beside blocks that fill the scoped limit exactly, a matmul
# whose (1024, 2048) f32 product is produced tile by tile into the accumulator, and the
# adversarial single-block matmul whose bf16 operands are upcast to f32 in its body under a
# 768 KiB limit (written as one no chip compiles; the compiler compiles it).
KNOWN_DISAGREEMENTS = {
    "kernels/gelu block_rows=512 @ (8192, 4096) float32": True,
    "kernels/matmul blocks=1024x2048x1024 @ 4096^3 bfloat16": True,
    "tests/candidates/f32_copies_over_vmem.py @ matmul_bf16 shape 0": True,
}


@needs_libtpu
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_every_disagreement_with_the_emulated_check_is_listed(
        request: pytest.FixtureRequest) -> None:
    """Shipped kernels, the offline author's kernels, tuning points at the VMEM edge and the
    adversarial corpus, on v6e: both checks judge each and every disagreement is written out
    and must be a known one (the compiler's verdict is the one the verifier uses). A new
    disagreement, or a known one that went away, fails here until the list says so."""
    programs = [*tpu_corpus.shipped(), *tpu_corpus.edge(), *tpu_corpus.offline(),
                *tpu_corpus.adversarial()]
    tuning = [p for p in programs if p.source in ("shipped", "edge", "offline")]
    assert len([p for p in tuning if p.text]) >= 40
    tpu_corpus.judge(programs, "v6e")
    found = tpu_corpus.disagreements(programs)
    out = Path(request.config.rootpath) / ".pytest_cache" / "tpu_compiler_disagreements.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(found, indent=1))
    judged = [p for p in programs if p.real is not None]
    assert judged and all(p.real.kind not in ("crash", "timeout") for p in judged), [
        (p.name, p.real.message) for p in judged if p.real.kind in ("crash", "timeout")]
    assert {d["program"]: d["compiler_ok"] for d in found} == KNOWN_DISAGREEMENTS, \
        json.dumps(found, indent=1)
    # The edge is real: the compiler refuses some of its configurations and accepts others.
    edge = [p for p in judged if p.source == "edge"]
    assert any(p.real.ok for p in edge) and any(not p.real.ok for p in edge)


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
def test_the_xla_baseline_is_priced_from_xla_tpus_program() -> None:
    """RMSNorm's reference as XLA:TPU compiles it: its own fusions, each with the compiler's
    estimated cycles; operands XLA keeps in VMEM (S(1)) cost no HBM bytes; the input is read
    and the output written through HBM once each."""
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
    assert all(f.compute_s == pytest.approx(f.cycles / chip.clock_hz) for f in fusions)
    assert any(f.hbm_bytes == 0 for f in fusions)  # a fusion between two VMEM buffers
    # x read once from HBM (by a fusion or an async copy) and the output written once
    assert sum(f.hbm_bytes for f in found.fusions) <= 3 * 2048 * 512 * 4 + 2 * 512 * 4
    # async copies overlap the fusions scheduled around them
    assert found.latency_s == pytest.approx(sum(f.latency_s for f in fusions))
    assert found.optimal_seconds and found.optimal_seconds > 0
