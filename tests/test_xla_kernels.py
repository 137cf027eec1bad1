"""XLA:TPU's own Mosaic kernels in its program (its fused attention, `online-softmax`) are
priced by the kernel model exactly as a Pallas kernel with the same body is; one the model
cannot read is named unpriced, never free."""

from __future__ import annotations

import base64
import json
import re

import jax
import jax.numpy as jnp
import pytest

from tools.lowered import tpu_compiler
from tools.lowered.parse import parse_lowered
from tools.performance.chips import get_chip
from tools.performance.roofline import estimate_program
from tools.performance.simbaseline import simulated_baseline
from tools.performance.xla_kernels import mlir_type
from tools.performance.xla_tpu import price_program

needs_libtpu = pytest.mark.skipif(
    not tpu_compiler.available(),
    reason="libtpu is not installed (pip install -e '.[tpu-compiler]'): no XLA:TPU program")


def _exp_kernel(x: jax.Array) -> jax.Array:
    from jax.experimental import pallas as pl

    def body(x_ref, o_ref):
        o_ref[...] = jnp.exp(x_ref[...]) * 2.0

    spec = pl.BlockSpec((256, 512), lambda i: (i, 0))
    return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
                          in_specs=[spec], out_specs=spec)(x)


def _as_hlo(config: str) -> str:
    return ("HloModule m\n\nENTRY %main (p: f32[1024,512]) -> f32[1024,512] {\n"
            "  %p = f32[1024,512]{1,0:T(8,128)} parameter(0)\n"
            "  ROOT %kernel = f32[1024,512]{1,0:T(8,128)} custom-call(%p), "
            f'custom_call_target="tpu_custom_call", backend_config={config}\n}}\n')


def test_a_mosaic_kernel_in_xlas_program_is_priced_as_the_same_pallas_kernel() -> None:
    chip = get_chip("v6e")
    x = jax.ShapeDtypeStruct((1024, 512), jnp.float32)
    text = jax.jit(_exp_kernel).trace(x).lower(lowering_platforms=("tpu",)).as_text()
    (kernel,) = estimate_program(parse_lowered(text), chip).kernels
    raw = re.search(r'backend_config = "((?:[^"\\]|\\.)*)"', text).group(1)  # type: ignore[union-attr]
    config = json.loads(raw.replace("\\22", '"'))
    price = price_program(_as_hlo(json.dumps(config)), chip)
    (op,) = price.ops
    assert not price.unpriced and "Mosaic kernel" in op.opcode
    assert op.latency_s == pytest.approx(kernel.latency_s) and op.hbm_bytes == kernel.hbm_bytes
    assert price.latency_s == pytest.approx(kernel.latency_s)


def test_a_mosaic_kernel_the_model_cannot_read_is_named_not_free() -> None:
    config = {"custom_call_config": {"body": base64.b64encode(b"module { bogus }").decode()}}
    price = price_program(_as_hlo(json.dumps(config)), get_chip("v6e"))
    assert price.unpriced and "XLA:TPU's Mosaic kernel kernel" in price.unpriced[0]
    assert "does not parse" in price.unpriced[0] and price.latency_s == 0.0


def test_hlo_array_types_read_as_the_parser_reads_mlir_types() -> None:
    assert mlir_type("bf16[4,8,512,16]{3,2,1,0:T(8,128)(2,1)S(1)}") == (
        "tensor", (4, 8, 512, 16), "bfloat16", "")
    assert mlir_type("s32[7]{0}")[1:3] == ((7,), "int32")


@needs_libtpu
def test_xlas_fused_attention_is_priced_so_the_baseline_is_xla_tpus_program() -> None:
    """A bf16 causal attention: XLA:TPU computes the scores in a fusion and runs the softmax
    and the second matmul as its own Mosaic kernel (`online-softmax`)."""
    def attention(q, k, v):
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) * q.shape[-1] ** -0.5
        s = jnp.where(jnp.tril(jnp.ones((s.shape[-1],) * 2)), s, -1e9)
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)

    spec = jax.ShapeDtypeStruct((4, 8, 512, 16), jnp.bfloat16)
    found = simulated_baseline(attention, [spec] * 3, get_chip("v6e"))
    assert found.priced_from == "xla-tpu", found.fallback
    kernels = [f for f in found.xla_tpu["fusions"] if "Mosaic kernel" in f["opcode"]]
    assert kernels and all(f["latency_s"] > 1e-6 for f in kernels)
