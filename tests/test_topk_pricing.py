"""XLA:TPU's top-k is priced from its own program: the TopK custom call (a small k) and the
sort it uses for a large k count their compare-exchanges on the VPU, never nothing, so the
top-k baseline no longer falls back to the host program, which priced the op at its bytes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from tools.lowered import tpu_compiler
from tools.performance.chips import get_chip
from tools.performance.hlo_compute import bitonic_sort_exchanges, sort_ops, top_k_ops
from tools.performance.simbaseline import simulated_baseline
from tools.performance.xla_tpu import price_program

needs_libtpu = pytest.mark.skipif(not tpu_compiler.available(),
                                  reason="libtpu is not installed: no XLA:TPU program")

# XLA:TPU's program for lax.top_k(x, 8) on f32[512,1024] (v6e, libtpu 0.0.42), trimmed: the
# operand copied into VMEM with the rows along lanes, then the TopK custom call.
_TOPK = """HloModule m

ENTRY %main (p: f32[512,1024]) -> (f32[512,8], s32[512,8]) {
  %p = f32[512,1024]{1,0:T(8,128)} parameter(0)
  %copy = f32[512,1024]{0,1:T(8,128)S(1)} copy(%p), backend_config={"window_config":{"estimated_cycles":"6640"}}
  ROOT %topk = (f32[512,8]{0,1:T(8,128)}, s32[512,8]{0,1:T(8,128)}) custom-call(%copy), custom_call_target="TopK", backend_config={"flag_configs":[]}
}
"""

# ... and for a k it sorts the whole axis for (64): a sort of the values and an iota.
_SORT = """HloModule m

ENTRY %main (p: f32[512,1024]) -> f32[512,64] {
  %p = f32[512,1024]{1,0:T(8,128)} parameter(0)
  %copy = f32[512,1024]{0,1:T(8,128)S(1)} copy(%p)
  %iota = s32[512,1024]{0,1:T(8,128)S(1)} iota(), iota_dimension=1
  %sort = (f32[512,1024]{0,1:T(8,128)S(1)}, s32[512,1024]{0,1:T(8,128)S(1)}) sort(%copy, %iota), dimensions={1}, to_apply=%compare
  %values = f32[512,1024]{0,1:T(8,128)S(1)} get-tuple-element(%sort), index=0
  ROOT %top = f32[512,64]{0,1:T(8,128)} slice(%values), slice={[0:512], [0:64]}
}
"""


def test_the_bitonic_counts_match_a_hand_count() -> None:
    """Sorting 8 takes 24 compare-exchanges (4 per stage, 6 stages); a top-4 of 16 sorts four
    runs of 4 (6 each) and merges three times (4 keep-larger steps and 4 compare-exchanges
    each): 24 x 5 + 3 x (4 x 3 + 4 x 5) = 216 ops per row with values and indices."""
    assert bitonic_sort_exchanges(8) == 24 and bitonic_sort_exchanges(5) == 24
    assert top_k_ops(1, 16, 4) == 216
    assert top_k_ops(3, 16, 4) == 3 * 216
    assert top_k_ops(1, 16, 3) == 216  # k rounded up to a power of two
    assert top_k_ops(1, 8, 8) == 24 * 5  # k >= n: the whole row sorted
    assert top_k_ops(1, 1024, 1) == 1023 * 3  # k = 1: a max with its index
    assert sort_ops(2, 8, 1) == 2 * 24 * 3
    with pytest.raises(ValueError, match="must be positive"):
        top_k_ops(1, 16, 0)


def test_a_top_k_custom_call_is_priced_by_its_compare_exchanges() -> None:
    """The TopK op is compute-bound on the VPU at the bitonic top-k's count, plus its launch;
    the program has nothing unpriced and costs more than the copy in front of it."""
    chip = get_chip("v6e")
    price = price_program(_TOPK, chip)
    assert price.unpriced == []
    copy, topk = price.ops
    ops = top_k_ops(512, 1024, 8)
    assert topk.vpu_ops == ops > 512 * 1024 * 8  # more than one op per element and k
    assert topk.bound == "compute" and topk.compute_s == pytest.approx(ops / chip.vpu_ops_per_s)
    assert topk.latency_s == pytest.approx(ops / chip.vpu_ops_per_s + 1e-6)
    assert price.latency_s == pytest.approx(copy.latency_s + topk.latency_s)


def test_a_sort_is_priced_as_a_bitonic_network_over_every_operand() -> None:
    chip = get_chip("v6e")
    price = price_program(_SORT, chip)
    assert price.unpriced == []
    (sort,) = [op for op in price.ops if op.opcode == "sort"]
    assert sort.vpu_ops == sort_ops(512, 1024, 2) == 512 * bitonic_sort_exchanges(1024) * 5
    # a whole sort costs more than the top-k of a few
    assert sort.vpu_ops > top_k_ops(512, 1024, 64) > top_k_ops(512, 1024, 8)


def test_a_custom_call_it_cannot_read_stays_unpriced() -> None:
    """A TopK whose operand's shape the pricer cannot read is named, never priced at zero."""
    hlo = _TOPK.replace("custom-call(%copy)", "custom-call(%missing)")
    assert price_program(hlo, get_chip("v6e")).unpriced == ["custom-call topk (TopK)"]


@needs_libtpu
@pytest.mark.slow
@pytest.mark.parametrize("k", [8, 64])
def test_the_top_k_baseline_is_priced_from_xla_tpus_program(k: int) -> None:
    """lax.top_k's baseline is XLA:TPU's program (TopK for k=8, a sort for k=64), dearer than
    the host program, which priced the op at its bytes alone."""
    chip = get_chip("v6e")
    x = jax.ShapeDtypeStruct((512, 1024), jnp.float32)
    found = simulated_baseline(lambda v: jax.lax.top_k(v, k), [x], chip)
    assert found.priced_from == "xla-tpu" and found.fallback == ""
    assert found.latency_s > found.host.latency_s
    priced = {op["opcode"]: op for op in found.xla_tpu["fusions"]}
    expected = top_k_ops(512, 1024, k) if k == 8 else sort_ops(512, 1024, 2)
    assert priced["custom-call" if k == 8 else "sort"]["vpu_ops"] == expected
