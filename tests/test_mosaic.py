from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
import pytest

from tests.perf_kernels import good, lower
from tools.lowered.mosaic import Loop, MosaicError, parse_lowered


def test_elementwise_kernel_structure() -> None:
    text = lower(good.scale, jnp.ones((1024, 128), jnp.float32))
    program = parse_lowered(text)
    assert program.outside_ops == []
    (k,) = program.kernels
    assert k.grid == (4,)
    assert k.dimension_semantics == ("parallel",)
    assert [w.role for w in k.windows] == ["input", "output"]
    assert all(w.block_shape == (256, 128) and w.dtype == "float32" for w in k.windows)
    assert all(w.array_shape == (1024, 128) and w.buffer_count == 2 for w in k.windows)
    assert [w.index_map(3) for w in k.windows] == [(3, 0), (3, 0)]
    (mul,) = [op for op in k.body_ops() if op.name == "arith.mulf"]
    assert mul.result_shape == (256, 128) and mul.flops == 256 * 128
    assert program.input_shapes == [((1024, 128), "float32")]


def test_matmul_kernel_scratch_branches_and_index_maps() -> None:
    a = jnp.ones((256, 512), jnp.bfloat16)
    b = jnp.ones((512, 384), jnp.bfloat16)
    (k,) = parse_lowered(lower(good.matmul, a, b)).kernels
    assert k.grid == (2, 3, 4)
    assert k.dimension_semantics == ("parallel", "parallel", "arbitrary")
    assert [(s.shape, s.dtype, s.memory_space) for s in k.scratch] == [((128, 128), "float32", "vmem")]
    a_map, b_map, o_map = (w.index_map for w in k.windows)
    assert a_map(1, 2, 3) == (1, 3)
    assert b_map(1, 2, 3) == (3, 2)
    assert o_map(1, 2, 3) == (1, 2)
    (mm,) = [op for op in k.body_ops() if op.name == "tpu.matmul"]
    assert mm.matmul == (1, 128, 128, 128) and mm.flops == 2 * 128**3
    assert mm.matmul_dtype == "bfloat16"
    conds = list(k.branch_conditions(k.steps()).values())
    assert len(conds) == 2
    first, last = conds
    kk = k.steps()[2]
    np.testing.assert_array_equal(first, kk == 0)
    np.testing.assert_array_equal(last, kk == 3)


def test_vmem_limit_from_compiler_params() -> None:
    a = jnp.ones((128, 128), jnp.float32)
    fn = functools.partial(good.matmul, vmem_limit_bytes=40 * 2**20)
    (k,) = parse_lowered(lower(fn, a, a)).kernels
    assert k.vmem_limit_bytes == 40 * 2**20


def test_index_map_arithmetic_matches_python() -> None:
    (k,) = parse_lowered(lower(good.index_arith, jnp.ones((48, 128), jnp.float32))).kernels
    got = [k.windows[0].index_map(i)[0] for i in range(12)]
    want = [min(i // 3 + (i % 4) - 1, 5) + max(0, i - 10) for i in range(12)]
    assert got == want
    vectorised = k.windows[0].index_map.over(k.steps())[0]
    assert vectorised is not None and vectorised.tolist() == want


def test_scalar_prefetch_index_is_unknown() -> None:
    idx = jnp.arange(4, dtype=jnp.int32)
    (k,) = parse_lowered(lower(good.gather_rows, idx, jnp.ones((32, 128), jnp.float32))).kernels
    assert [(s.shape, s.dtype, s.memory_space) for s in k.scalar_prefetch] == [((4,), "int32", "smem")]
    assert k.windows[0].index_map(2) == (None, 0)  # idx[2] // 2 depends on data
    assert k.windows[1].index_map(2) == (2, 0)


def test_unknown_index_map_op_fails_closed() -> None:
    text = lower(good.scale, jnp.ones((512, 128), jnp.float32))
    # Re-encode the kernel with an op the interpreter has no rule for.
    import base64
    import json
    import re

    from tools import jaxprivate

    ir = jaxprivate.mlir_ir()

    m = re.search(r'backend_config = "(.*?)", kernel_name', text)
    assert m is not None
    config = json.loads(m.group(1).replace("\\22", '"'))
    ctx = ir.Context()
    ctx.allow_unregistered_dialects = True
    jaxprivate.tpu_dialect().register_dialect(ctx)
    with ctx:
        module = ir.Module.parse(base64.b64decode(config["custom_call_config"]["body"]))
        asm = str(module).replace(
            '"stable_mosaic.func.return"(%arg0, %0)', '%9 = "stable_mosaic.arith.mystery"(%arg0) : (i32) -> i32\n    "stable_mosaic.func.return"(%9, %0)', 1
        )
        module2 = ir.Module.parse(asm)
        import io

        buf = io.BytesIO()
        module2.operation.write_bytecode(buf)
    config["custom_call_config"]["body"] = base64.b64encode(buf.getvalue()).decode()
    patched = text.replace(m.group(1), json.dumps(config).replace('"', "\\22"))
    with pytest.raises(MosaicError, match=r"arith\.mystery"):
        parse_lowered(patched)


def test_garbage_text_is_a_clear_error() -> None:
    with pytest.raises(MosaicError, match="not a readable StableHLO module"):
        parse_lowered("this is not mlir")


def test_loops_squeezed_blocks_gridless_kernels_and_outside_ops() -> None:
    program = parse_lowered(lower(good.looped_then_whole, jnp.ones((4, 8, 128), jnp.float32)))
    assert program.outside_ops == ["stablehlo.transpose"]
    assert program.outside_op_bytes == [("stablehlo.transpose", 2 * 4 * 8 * 128 * 4)]
    looped, whole = program.kernels
    assert looped.windows[0].block_shape == (1, 8, 128)  # the squeezed dim stays as 1
    (loop,) = [item for item in looped.body if isinstance(item, Loop)]  # scalar ops beside it
    trips = loop.trips(looped.scalar_env(looped.steps()), looped.grid_steps)
    assert trips is not None and trips.tolist() == [3, 3, 3, 3]
    assert whole.grid == () and whole.grid_steps == 1
    assert [(w.block_shape, w.buffer_count, w.index_map) for w in whole.windows] == [
        ((8, 4, 128), 1, None), ((8, 4, 128), 1, None)
    ]
