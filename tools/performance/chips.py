"""TPU chip figures the compile check and the roofline model share.

Figures are per TensorCore, because one `pallas_call` runs on one TensorCore (a v7 chip
shows up as two JAX devices, one per core). Peak bf16 MXU throughput, HBM bandwidth, VMEM
capacity, lane/sublane counts and the MXU size come from JAX's own table, the private
`tpu_info.get_tpu_info_for_chip(chip, 1)` (see :mod:`tools.jaxprivate`; the figures Google
publishes on cloud.google.com/tpu/docs/{v5e,v6e,tpu7x}), copied below in `_PUBLISHED`
so the model does not depend on a private module); `tests/test_chips.py` checks that the
copy still matches JAX.

What JAX does not publish is an assumption, stated here once:
- scoped VMEM limit (what a kernel may use unless `vmem_limit_bytes` raises it): 16 MiB on
  v5e and 32 MiB on v6e and v7, the defaults of XLA's `--xla_tpu_scoped_vmem_limit_kib`
  described in the Pallas TPU docs.
- f32 matmuls on the MXU run as three bf16 passes (a third of the bf16 peak).
- the VPU retires 8 sublanes x 128 lanes x 4 ALUs of 32-bit element ops per cycle at the
  clock below (v5e 1.5 GHz, published; v6e 1.75 GHz and v7 1.9 GHz, assumed); the EUP
  (exp, log, tanh, ...) retires a quarter of that.
- a grid step costs 0.33 us of fixed pipeline overhead (DMA issue, semaphore waits,
  scalar bookkeeping) on the core, overlapping the step's DMAs: fitted to the Pallas TPU
  matmul guide's 128^3-block rows on v5e (0.35 us per step measured, less the MXU time;
  `tools/performance/calibration.py`), and used for every generation (unmeasured there).
- SMEM: 1 MiB per core (JAX's table), holding scalar-prefetch operands in 4-byte words.
- the scalar core issues one VLIW bundle per cycle at the clock below, with two scalar ALU
  slots per bundle (the TensorCore bundle of Norrie et al., "The Design Process for
  Google's Training Chips: TPUv2 and TPUv3", IEEE Micro 41(2), 2021: two scalar slots
  beside the vector, matrix and load/store slots), used for every generation. What is not
  published, assumed: an SMEM load costs 4 cycles (its load-use latency: scalar code is a
  dependent chain, as in a loop over SMEM values), a store 1; a vector -> scalar extract
  (one element of a vreg into a scalar register) 64 cycles (no bundle slot moves a vreg
  lane to the scalar unit: the value goes through a slow cross-unit path, about a vector
  pipeline's depth); each `scf.for`/`scf.while` trip 8 cycles (induction variable update,
  compare, and the taken branch's bubble in the bundle pipeline).
- the cross-lane unit (XLU): a transpose that moves a vector's last (lane) axis, one that
  keeps the lanes but moves the sublane axis ("shuffle": sublanes between vregs), and a
  rotation along lanes (`pltpu.roll` on the last axis) cost cycles per vreg of the larger
  of operand and result (tile-padded, so a narrow axis pays its padding), as the TPU
  compiler schedules them (`XLU_CYCLES_PER_VREG`: a step of a 1024 x 1024 block that only
  does this, divided by the block's vregs, from the bundle schedule of the real compiler
  ahead of time, libtpu with jax 0.10.2, rounded up; `benchmarks/xlu.py` measures them
  again). Packed 16-bit vregs take longer per vreg. Transposes of leading axes only and
  rotations along sublanes rename or copy vregs (the compiler's step is a copy's), which
  the model counts free like loads and stores. A transpose whose only readers are matmuls
  is folded into the MXU's operand by the compiler: it costs what `x @ w.T` takes over
  `x @ w` per vreg of the transposed operand ("into_matmul": nothing on v5e and about
  nothing on v6e, a third to a half of a cycle on v7).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from kernelgraph.errors import KernelgraphError

MIB = 1024 * 1024


class Chip(msgspec.Struct, frozen=True):
    """One TensorCore of a TPU generation, as the cost model sees it."""

    name: str
    generation: int
    peak_bf16_flops: float
    peak_f32_flops: float
    hbm_bytes_per_s: float
    vmem_bytes: int
    scoped_vmem_limit_bytes: int
    per_step_overhead_s: float
    smem_bytes: int
    mxu_dim: int
    num_lanes: int
    num_sublanes: int
    clock_hz: float
    vpu_ops_per_s: float
    transcendentals_per_s: float
    source: str

    def scalar_seconds(self, alu_ops: float, smem_loads: float = 0, smem_stores: float = 0,
                       lane_extracts: float = 0, loop_trips: float = 0) -> float:
        """Scalar-unit time of this work (the figures in the module doc)."""
        cycles = (alu_ops / SCALAR_ALU_SLOTS + smem_loads * SMEM_LOAD_CYCLES
                  + smem_stores * SMEM_STORE_CYCLES + lane_extracts * LANE_EXTRACT_CYCLES
                  + loop_trips * LOOP_TRIP_CYCLES)
        return cycles / self.clock_hz

    def xlu_cycles(self, op: str, bits: int) -> float:
        """Cycles per vreg the cross-lane unit spends on ``op`` ("transpose", "shuffle",
        "rotate" or "into_matmul") of ``bits``-wide elements (module doc); 16 and 32 bits were measured, and
        any other width is a KeyError (the body reader leaves such an op unpriced)."""
        return XLU_CYCLES_PER_VREG[self.name][op][bits]

    def xlu_seconds(self, op: str, bits: int, vregs: float) -> float:
        return vregs * self.xlu_cycles(op, bits) / self.clock_hz

    def matmul_peak(self, dtype: str) -> float:
        """Peak MXU flops/s for operands of `dtype` (f32 emulated in three bf16 passes)."""
        return self.peak_f32_flops if dtype in {"float32", "float64"} else self.peak_bf16_flops


@dataclass(frozen=True)
class _Published:
    jax_chip_version: str
    generation: int
    bf16_ops_per_s: float
    hbm_bytes_per_s: float
    vmem_bytes: int
    mxu_dim: int
    scoped_vmem_limit_bytes: int
    clock_hz: float
    smem_bytes: int = 1 * MIB


# Per TensorCore; mirrors jax tpu_info._get_tpu_info_impl (jax 0.10.2).
_PUBLISHED: dict[str, _Published] = {
    "v5e": _Published("v5e", 5, 1.97e14, 8.20e11, 128 * MIB, 128, 16 * MIB, 1.5e9),
    "v6e": _Published("v6e", 6, 9.20e14, 1.64e12, 128 * MIB, 256, 32 * MIB, 1.75e9),
    "v7": _Published("7x", 7, 2.31e15 / 2, 7.40e12 / 2, 64 * MIB, 256, 32 * MIB, 1.9e9),
}

CHIP_NAMES: tuple[str, ...] = tuple(_PUBLISHED)
PER_STEP_OVERHEAD_S = 0.33e-6
F32_MATMUL_PASSES = 3
VPU_ALUS = 4
EUP_FRACTION_OF_VPU = 0.25
# The scalar core (module doc): ALU slots per bundle, then cycles per op (assumed).
SCALAR_ALU_SLOTS = 2
SMEM_LOAD_CYCLES = 4
SMEM_STORE_CYCLES = 1
LANE_EXTRACT_CYCLES = 64
LOOP_TRIP_CYCLES = 8
# Cross-lane unit, per chip and op: cycles per vreg by element width (module doc; measured
# with benchmarks/xlu.py, rounded up to the next 0.05).
XLU_CYCLES_PER_VREG: dict[str, dict[str, dict[int, float]]] = {
    "v5e": {"transpose": {32: 1.80, 16: 2.70}, "shuffle": {32: 2.55, 16: 2.65},
            "rotate": {32: 2.65, 16: 2.95}, "into_matmul": {32: 0.0, 16: 0.0}},
    "v6e": {"transpose": {32: 1.15, 16: 1.90}, "shuffle": {32: 1.70, 16: 2.00},
            "rotate": {32: 2.15, 16: 2.55}, "into_matmul": {32: 0.05, 16: 0.0}},
    "v7": {"transpose": {32: 1.15, 16: 1.90}, "shuffle": {32: 1.70, 16: 2.00},
           "rotate": {32: 2.15, 16: 2.50}, "into_matmul": {32: 0.35, 16: 0.55}},
}


class UnknownChip(KernelgraphError, ValueError):
    """A chip name the model has no figures for."""


def get_chip(name: str) -> Chip:
    """Figures for "v5e", "v6e" or "v7" (also accepts "tpu-v6e", "sim-tpu-v6e", "7x")."""
    key = name.lower().removeprefix("sim-").removeprefix("tpu-").removeprefix("tpu")
    key = {"v7x": "v7", "7x": "v7", "7": "v7", "v5litepod": "v5e", "v5lite": "v5e"}.get(key, key)
    if key not in _PUBLISHED:
        raise UnknownChip(f"unknown chip {name!r}; known: {', '.join(CHIP_NAMES)}")
    pub = _PUBLISHED[key]
    vpu_ops = pub.clock_hz * 8 * 128 * VPU_ALUS
    return Chip(
        name=key,
        generation=pub.generation,
        peak_bf16_flops=pub.bf16_ops_per_s,
        peak_f32_flops=pub.bf16_ops_per_s / F32_MATMUL_PASSES,
        hbm_bytes_per_s=pub.hbm_bytes_per_s,
        vmem_bytes=pub.vmem_bytes,
        scoped_vmem_limit_bytes=pub.scoped_vmem_limit_bytes,
        per_step_overhead_s=PER_STEP_OVERHEAD_S,
        smem_bytes=pub.smem_bytes,
        mxu_dim=pub.mxu_dim,
        num_lanes=128,
        num_sublanes=8,
        clock_hz=pub.clock_hz,
        vpu_ops_per_s=vpu_ops,
        transcendentals_per_s=vpu_ops * EUP_FRACTION_OF_VPU,
        source=(
            f"jax tpu_info.get_tpu_info_for_chip({pub.jax_chip_version!r}, 1) per TensorCore; "
            "scoped VMEM, clock, VPU/EUP rates and step overhead assumed (see tools/performance/chips.py)"
        ),
    )


def jax_tpu_info(name: str) -> Any:  # JAX's private TpuInfo record
    """JAX's own record for the chip (used by the lowering and to check `_PUBLISHED`)."""
    from tools import jaxprivate

    tpu_info = jaxprivate.tpu_info()
    chip = get_chip(name)
    version = tpu_info.ChipVersion(_PUBLISHED[chip.name].jax_chip_version)
    return tpu_info.get_tpu_info_for_chip(version, 1)


__all__ = ["CHIP_NAMES", "Chip", "UnknownChip", "get_chip", "jax_tpu_info"]
