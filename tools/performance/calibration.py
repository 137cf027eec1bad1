"""The cost model against published TPU measurements: data, kernels and the comparison.

The data (`data/pallas_matmul_guide_v5e.json`) is the JAX Pallas TPU matmul guide's bf16
table on v5e, with its source and timing method; `data/pallas_sparse_guide_v5e.json` is the
sparse guide's 16384^3 figures (two XLA references and two scalar-prefetch kernels, rebuilt
in :mod:`tools.performance.sparse_guide` and priced on the benchmark's prefetch values). Its figures are host `timeit` wall times
per call, so each includes a fixed dispatch cost; the comparison adds one constant for it,
estimated from the guide's own smallest XLA row (published time minus the model's XLA
estimate at 1024^3, where dispatch dominates) and never fitted per row. The kernels are
rebuilt here from the guide's description (same grid, blocks, semantics and accumulator)
and lowered for the chip with abstract inputs, so an 8192^3 configuration costs a lowering
and the model only. Every model figure is simulated.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

DATA = Path(__file__).parent / "data" / "pallas_matmul_guide_v5e.json"
SPARSE_DATA = Path(__file__).parent / "data" / "pallas_sparse_guide_v5e.json"
SPARSE_KERNELS = {"dsd": "block-sparse (10%) @ dense, 512^3 blocks",
                  "masked_output": "dense @ dense, lower-triangular output mask, 512x512x1024"}


class CalibrationRow(msgspec.Struct, frozen=True):
    config: str  # "plain bm=512 bk=1024 bn=1024 @4096"
    variant: str
    size: int
    published_s: float
    model_s: float  # simulated kernel (or XLA) latency
    with_dispatch_s: float  # model + the timing method's fixed cost, what timeit would show

    @property
    def ratio(self) -> float:
        return self.with_dispatch_s / self.published_s


def published() -> dict[str, Any]:
    return json.loads(DATA.read_text(encoding="utf-8"))


def _kernel(x_ref, y_ref, z_ref, acc_ref, *, nsteps: int, transpose_rhs: bool,
            activation: Callable[[Any], Any] | None) -> None:
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    @pl.when(pl.program_id(2) == 0)
    def _zero():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    contract = ((1,), (1,)) if transpose_rhs else ((1,), (0,))
    acc_ref[...] += jax.lax.dot_general(x_ref[...], y_ref[...], (contract, ((), ())),
                                        preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == nsteps - 1)
    def _write():
        acc = acc_ref[...]
        z_ref[...] = (acc if activation is None else activation(acc)).astype(z_ref.dtype)


def guide_matmul(bm: int, bk: int, bn: int, variant: str) -> Callable[..., Any]:
    """The guide's blocked matmul for one variant ("plain", "relu", "transposed_rhs")."""
    import jax
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    transpose_rhs = variant == "transposed_rhs"
    activation = jax.nn.relu if variant == "relu" else None

    def matmul(x: Any, y: Any) -> Any:
        if transpose_rhs:  # y is (k, n) logically, stored (n, k): the kernel reads (n, k)
            y = y.swapaxes(0, 1)
            y_spec = pl.BlockSpec((bn, bk), lambda i, j, k: (j, k))
        else:
            y_spec = pl.BlockSpec((bk, bn), lambda i, j, k: (k, j))
        m, k = x.shape
        n = y.shape[0] if transpose_rhs else y.shape[1]
        return pl.pallas_call(
            functools.partial(_kernel, nsteps=k // bk, transpose_rhs=transpose_rhs,
                              activation=activation),
            out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
            grid=(m // bm, n // bn, k // bk),
            in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)), y_spec],
            out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
            scratch_shapes=[pltpu.VMEM((bm, bn), jax.numpy.float32)],
            compiler_params=pltpu.CompilerParams(
                dimension_semantics=("parallel", "parallel", "arbitrary")),
        )(x, y)

    if not transpose_rhs:
        return matmul

    def wrapper(x: Any, y_t: Any) -> Any:  # the guide's benchmark: y passed as (n, k)
        return matmul(x, y_t.swapaxes(0, 1))

    return wrapper


def model_seconds(row: dict[str, Any], chip_name: str = "v5e") -> float:
    """Simulated latency of one published configuration (kernel, or XLA for "xla")."""
    import jax
    import jax.numpy as jnp

    from tools.lowered.compile_check import lower_for_tpu
    from tools.lowered.mosaic import parse_lowered
    from tools.performance.baseline import estimate_baseline, reference_cost
    from tools.performance.chips import get_chip
    from tools.performance.roofline import estimate_program

    chip = get_chip(chip_name)
    n = int(row["size"])
    x = jax.ShapeDtypeStruct((n, n), jnp.bfloat16)
    if row["variant"] == "xla":
        return float(estimate_baseline(reference_cost(jnp.matmul, [x, x]), chip).latency_s)
    if row["variant"] == "xla_masked":
        mask = jax.ShapeDtypeStruct((n, n), jnp.int32)
        cost = reference_cost(lambda m, a, b: m * (a @ b), [mask, x, x])
        return float(estimate_baseline(cost, chip).latency_s)
    if row["variant"] in SPARSE_KERNELS:
        from tools.performance.sparse_guide import kernel_seconds

        return kernel_seconds(row["variant"], chip_name)
    block = row["block"]
    fn = guide_matmul(block["bm"], block["bk"], block["bn"], row["variant"])
    text = lower_for_tpu(jax.jit(fn).trace(x, x), chip=chip_name)
    return float(estimate_program(parse_lowered(text), chip).latency_s)


def config_name(row: dict[str, Any]) -> str:
    if row["variant"] == "xla":
        return f"xla jnp.matmul @{row['size']}"
    if row["variant"] == "xla_masked":
        return f"xla mask * (x @ y) @{row['size']}"
    if row["variant"] in SPARSE_KERNELS:
        return f"{SPARSE_KERNELS[row['variant']]} @{row['size']}"
    b = row["block"]
    return f"{row['variant']} bm={b['bm']} bk={b['bk']} bn={b['bn']} @{row['size']}"


def dispatch_seconds(rows: list[dict[str, Any]], model: dict[str, float]) -> float:
    """The timing method's fixed cost: the smallest XLA row's published time minus the
    model's estimate of it (dispatch dominates at 1024^3)."""
    xla = min((r for r in rows if r["variant"] == "xla"), key=lambda r: r["size"])
    return max(0.0, float(xla["seconds"]) - model[config_name(xla)])


def calibrate(sizes: tuple[int, ...] = (1024, 4096, 8192),
              chip_name: str = "v5e") -> tuple[list[CalibrationRow], float]:
    """Every published row at `sizes` with its simulated figure, and the dispatch constant."""
    data = published()
    rows = [r for r in data["rows"] if r["size"] in sizes or r["variant"] == "xla"]
    model = {config_name(r): model_seconds(r, chip_name) for r in rows}
    dispatch = dispatch_seconds(rows, model)
    out = [
        CalibrationRow(config_name(r), r["variant"], int(r["size"]), float(r["seconds"]),
                       model[config_name(r)], model[config_name(r)] + dispatch)
        for r in rows if r["size"] in sizes
    ]
    return out, dispatch


def calibrate_sparse_guide(dispatch: float, chip_name: str = "v5e") -> list[CalibrationRow]:
    """The sparse guide's rows with the same dispatch constant: its XLA references (dense
    matmul, and the same with an unfused mask multiply) against the baseline model, and its
    two scalar-prefetch kernels against the kernel model on the benchmark's values."""
    data = json.loads(SPARSE_DATA.read_text(encoding="utf-8"))
    out = []
    for r in data["rows"]:
        model = model_seconds(r, chip_name)
        out.append(CalibrationRow(config_name(r), r["variant"], int(r["size"]),
                                  float(r["seconds"]), model, model + dispatch))
    return out


def spearman(a: list[float], b: list[float]) -> float:
    """Rank correlation with average ranks for ties."""
    def ranks(v: list[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for t in range(i, j + 1):
                r[order[t]] = (i + j) / 2
            i = j + 1
        return r

    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    var = (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5
    return cov / var if var else 1.0


def table(rows: list[CalibrationRow]) -> str:
    """A markdown table: config, published, model (simulated, with dispatch), ratio."""
    lines = ["| config | published (s) | model + dispatch (s, simulated) | ratio |",
             "| --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r.config} | {r.published_s:.4g} | {r.with_dispatch_s:.4g} | "
                     f"{r.ratio:.3f} |")
    return "\n".join(lines)


__all__ = ["DATA", "SPARSE_DATA", "SPARSE_KERNELS", "CalibrationRow", "calibrate", "calibrate_sparse_guide",
           "config_name", "guide_matmul",
           "model_seconds", "published", "spearman", "table"]
