from __future__ import annotations

import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from tests.perf_kernels import bad, good, lower
from tools.lowered.compile_check import VREG_FILE_BYTES, check_lowered, diagnose, lower_for_tpu

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
    (k,) = report.kernels
    assert k.blocks_bytes == 2 * 2 * 4096 * 1024 * 4
    # x * 2.0 is a (4096, 1024) f32 value: what of it the vregs cannot hold counts too
    assert k.value_bytes == 4096 * 1024 * 4
    assert report.vmem_bytes == k.blocks_bytes + k.value_bytes - VREG_FILE_BYTES
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


# ------------------------------------------------------------- values the body computes


def _logits_kernel(x_ref, w_ref, o_ref):
    logits = jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)
    o_ref[...] = jnp.exp(logits - jnp.max(logits, axis=-1, keepdims=True))[:, :128]


def _logits(x: jax.Array, w: jax.Array) -> jax.Array:
    """One block each: x (1024, 512) and w (512, 16384) bf16 fit, their f32 product does not."""
    from jax.experimental import pallas as pl

    return pl.pallas_call(_logits_kernel,
                          out_shape=jax.ShapeDtypeStruct((x.shape[0], 128), jnp.float32))(x, w)


def _logits_when_kernel(x_ref, w_ref, o_ref):
    from jax.experimental import pallas as pl

    o_ref[...] = jnp.zeros_like(o_ref)

    @pl.when(pl.program_id(0) == 0)
    def _():
        _logits_kernel(x_ref, w_ref, o_ref)


def _logits_when(x: jax.Array, w: jax.Array) -> jax.Array:
    from jax.experimental import pallas as pl

    return pl.pallas_call(
        _logits_when_kernel, grid=(1,),
        in_specs=[pl.BlockSpec(x.shape, lambda i: (0, 0)), pl.BlockSpec(w.shape, lambda i: (0, 0))],
        out_specs=pl.BlockSpec((x.shape[0], 128), lambda i: (0, 0)),
        out_shape=jax.ShapeDtypeStruct((x.shape[0], 128), jnp.float32))(x, w)


def _logits_loop_kernel(x_ref, w_ref, o_ref):
    def step(i, acc):
        logits = jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)
        return acc + jnp.exp(logits - i.astype(jnp.float32))[:, :128]

    o_ref[...] = jax.lax.fori_loop(0, 2, step, jnp.zeros(o_ref.shape, jnp.float32))


def _logits_loop(x: jax.Array, w: jax.Array) -> jax.Array:
    from jax.experimental import pallas as pl

    return pl.pallas_call(_logits_loop_kernel,
                          out_shape=jax.ShapeDtypeStruct((x.shape[0], 128), jnp.float32))(x, w)


@pytest.mark.parametrize("fn", [_logits, _logits_when, _logits_loop],
                         ids=["body", "inside-pl.when", "inside-fori_loop"])
def test_a_body_value_over_the_budget_is_refused(fn) -> None:
    x = jax.ShapeDtypeStruct((1024, 512), jnp.bfloat16)
    w = jax.ShapeDtypeStruct((512, 16384), jnp.bfloat16)
    report = check_lowered(lower(fn, x, w), chip="v6e")
    (k,) = report.kernels
    assert k.blocks_bytes + k.scratch_bytes < k.vmem_limit_bytes  # the blocks alone fit
    assert k.value_bytes == 1024 * 16384 * 4  # the f32 logits, held whole
    assert not report.ok
    (d,) = report.diagnostics
    assert d.kind == "vmem" and d.kernel == k.kernel
    assert "1024x16384 float32" in d.message and "tpu.matmul" in d.message
    assert str(k.value_bytes) in d.message and "33554432" in d.message
    assert "grid axis" in d.hint and "scratch" in d.hint


def test_a_tiled_matmul_with_a_wide_f32_accumulator_fits() -> None:
    a = jax.ShapeDtypeStruct((1024, 1024), jnp.bfloat16)
    b = jax.ShapeDtypeStruct((1024, 2048), jnp.bfloat16)
    report = check_lowered(lower(functools.partial(good.matmul, bm=512, bn=1024, bk=512), a, b),
                           chip="v6e")
    assert report.ok, [d.message for d in report.diagnostics]
    (k,) = report.kernels
    assert k.value_bytes == 512 * 1024 * 4  # the (512, 1024) f32 product is counted
    assert k.vmem_bytes == k.blocks_bytes + k.scratch_bytes + k.value_bytes - VREG_FILE_BYTES


def _shipped_cases() -> list[tuple[str, str, dict]]:
    import importlib

    cases = []
    for kernel, task in [("gelu", "gelu"), ("rmsnorm", "rmsnorm"), ("softmax", "softmax"),
                         ("matmul", "matmul")]:
        tunables = importlib.import_module(f"kernels.{kernel}").TUNABLES
        for config in ({}, {key: max(values) for key, values in tunables.items()}):
            for suffix in ("small", "bf16"):
                cases.append((kernel, f"{task}_{suffix}", config))
    return cases


@pytest.mark.parametrize(("kernel", "task", "config"), _shipped_cases())
def test_shipped_kernels_pass_on_their_tasks(kernel: str, task: str, config: dict) -> None:
    """Every shape of the task, default and largest blocks: no value the body computes is
    counted against an honest kernel that fits."""
    import importlib

    from tools.inputs.tasks import load_task

    loaded = load_task(Path(__file__).parent / "evaltasks" / f"{task}.py", validate=False)
    build = importlib.import_module(f"kernels.{kernel}").build
    for index in range(len(loaded.shapes)):
        args = jax.eval_shape(functools.partial(loaded.make_inputs, 0, index))
        report = check_lowered(lower(build(**config), *args), chip="v6e")
        assert report.ok, (index, [d.message for d in report.diagnostics])
        assert all(k.value_bytes > 0 for k in report.kernels)  # the body's values were read
