from __future__ import annotations

import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from tests.perf_kernels import bad, good, lower
from tools.lowered.compile_check import check_lowered, diagnose, lower_for_tpu

BAD = str(Path(bad.__file__).resolve())


def _line_of(marker: str) -> int:
    for n, text in enumerate(Path(BAD).read_text().splitlines(), start=1):
        if f"# LINE: {marker}" in text:
            return n
    raise AssertionError(marker)


def _diagnose(fn, *args):
    with pytest.raises(Exception) as info:
        lower_for_tpu(jax.jit(fn).trace(*args))
    return diagnose(info.value, BAD)


X = jnp.ones((16, 128), jnp.float32)


def test_good_kernel_fits() -> None:
    report = check_lowered(lower(good.scale, jnp.ones((1024, 128), jnp.float32)), chip="v6e")
    assert report.ok and report.diagnostics == []
    assert report.vmem_bytes == 2 * 2 * 256 * 128 * 4  # in + out, double-buffered
    assert report.vmem_limit_bytes == 32 * 2**20


def test_matmul_budget_counts_scratch_and_padding() -> None:
    a = jnp.ones((256, 256), jnp.bfloat16)
    report = check_lowered(lower(good.matmul, a, a), chip="v5e")
    # three bf16 (128,128) blocks x2 buffers + one f32 (128,128) scratch
    assert report.vmem_bytes == 3 * 2 * 128 * 128 * 2 + 128 * 128 * 4
    assert report.vmem_limit_bytes == 16 * 2**20


def test_misaligned_block_is_rejected_with_line_and_hint() -> None:
    (d,) = _diagnose(bad.misaligned_block, X)
    assert "divisible by 8 and 128" in d.message
    assert d.line in {_line_of("misaligned"), _line_of("misaligned-call")}
    assert d.kernel == "_copy_kernel"
    assert "(8, 128)" in d.hint
    assert d.file == BAD


def test_index_map_arity() -> None:
    (d,) = _diagnose(bad.wrong_arity, X)
    assert "missing 1 required positional argument" in d.message
    assert d.line == _line_of("arity")
    assert "one argument per grid dimension" in d.hint


def test_index_map_rank_mismatch_points_at_the_lambda() -> None:
    (d,) = _diagnose(bad.wrong_rank, X)
    assert "must return 2 values" in d.message
    assert d.line == _line_of("rank")
    assert "one block index per block dimension" in d.hint


def test_unsupported_op_in_mosaic() -> None:
    (d,) = _diagnose(bad.unsupported_op, X)
    assert "sort" in d.message
    assert d.line == _line_of("sort")  # the only line of the file that names the primitive
    assert d.kind == "lowering"
    assert "no Mosaic TPU lowering" in d.hint


@pytest.mark.slow
def test_kernel_over_vmem_is_rejected() -> None:
    x = jax.ShapeDtypeStruct((8192, 1024), jnp.float32)
    text = lower_for_tpu(jax.jit(bad.too_much_vmem).trace(x))
    report = check_lowered(text, chip="v6e")
    assert not report.ok
    (d,) = report.diagnostics
    assert d.kind == "vmem" and d.kernel == "_copy_kernel"
    assert report.vmem_bytes == 2 * 2 * 4096 * 1024 * 4
    assert "over the scoped limit of 33554432" in d.message


def test_raised_vmem_limit_is_honoured_but_capped() -> None:
    a = jnp.ones((128, 128), jnp.float32)
    ok = check_lowered(lower(functools.partial(good.matmul, vmem_limit_bytes=100 * 2**20), a, a), chip="v6e")
    assert ok.ok and ok.vmem_limit_bytes == 100 * 2**20
    over = check_lowered(lower(functools.partial(good.matmul, vmem_limit_bytes=100 * 2**20), a, a), chip="v7")
    assert not over.ok and "exceeds the v7 VMEM" in over.diagnostics[0].message


def test_unreadable_text_is_a_parse_diagnostic() -> None:
    report = check_lowered("garbage", chip="v6e")
    assert not report.ok and report.diagnostics[0].kind == "parse"


def test_smem_over_capacity_is_a_diagnostic() -> None:
    """A scalar-prefetch table larger than SMEM (1 MiB) cannot be prefetched."""
    import jax
    import jax.numpy as jnp

    from tests.perf_kernels import good, lower
    from tools.lowered.compile_check import check_lowered

    small = lower(good.gather_rows, jnp.zeros((4,), jnp.int32), jnp.ones((32, 128), jnp.float32))
    assert check_lowered(small, chip="v6e").ok
    big = lower(good.gather_rows, jax.ShapeDtypeStruct((300_000,), jnp.int32),
                jax.ShapeDtypeStruct((8, 128), jnp.float32))
    report = check_lowered(big, chip="v6e")
    assert not report.ok
    assert any(d.kind == "smem" and "SMEM" in d.message for d in report.diagnostics)
