"""Figure: the TPU compiler's cycles per vreg for in-VMEM transposes and lane rotations.

The cost model once priced data movement inside VMEM as free; transposes of the last two
axes and rotations along lanes run on the cross-lane unit (XLU), and the compiler schedules
them. This script compiles, for each chip, a kernel whose step only copies a block, one
that transposes it, one that moves its sublanes between vregs (a transpose of leading and
sublane axes, the lanes in place) and one that rotates it along its lanes (1024 x 1024 blocks, f32 and
bf16, 16 grid steps), with the real TPU compiler ahead of time (libtpu, the
`tpu-compiler` extra), and reads each kernel's static cycles per grid step from its bundle
schedule (:mod:`tools.performance.llo_cycles`). It prints each step's cycles divided by the
vregs the block fills: the figures `tools/performance/chips.py` copies as
``XLU_CYCLES_PER_VREG`` (the copy is shown for comparison: loads and stores, which the
model still counts free, overlap the unit's work). It also compiles `x @ w` and `x @ w.T`
with a resident weight (`transpose_into_matmul`): the compiler folds a transpose that only
feeds a matmul into the MXU's operand, so the model prices that one free.
Prints one JSON object with --json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BLOCK = 1024
STEPS = 16


def _kernel(op: str, rows: int) -> Any:
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def body(x_ref, o_ref):
        x = x_ref[...]
        if op == "transpose":
            x = jnp.transpose(x)
        elif op == "rotate":
            x = pltpu.roll(x, 3, 1)
        elif op == "shuffle":  # sublanes between vregs, lanes in place: (r/64, 64) -> (64, r/64)
            x = jnp.transpose(x.reshape(rows // 64, 64, BLOCK), (1, 0, 2)).reshape(rows, BLOCK)
        o_ref[...] = x

    def call(x: Any) -> Any:
        return pl.pallas_call(
            body, grid=(STEPS,),
            in_specs=[pl.BlockSpec((rows, BLOCK), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((rows, BLOCK), lambda i: (i, 0)),
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    return call


def _matmul(transposed: bool) -> Any:
    """(16, 1024) rows times a resident (1024, 1024) weight, or its transpose."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def body(x_ref, w_ref, o_ref):
        w = w_ref[...]
        o_ref[...] = jnp.dot(x_ref[...], w.T if transposed else w,
                             preferred_element_type=jnp.float32)

    def call(x: Any, w: Any) -> Any:
        return pl.pallas_call(
            body, grid=(STEPS,),
            in_specs=[pl.BlockSpec((16, BLOCK), lambda i: (i, 0)),
                      pl.BlockSpec((BLOCK, BLOCK), lambda i: (0, 0))],
            out_specs=pl.BlockSpec((16, BLOCK), lambda i: (i, 0)),
            out_shape=jax.ShapeDtypeStruct((16 * STEPS, BLOCK), jnp.float32))(x, w)

    return call


def folded(chip: str) -> dict[str, Any]:
    """A transpose that feeds a matmul: the compiler folds it into the MXU's operand."""
    import jax
    import jax.numpy as jnp

    from tools.lowered import tpu_compiler
    from tools.lowered.compile_check import lower_for_tpu

    out: dict[str, Any] = {}
    for dtype in (jnp.float32, jnp.bfloat16):
        bits = jnp.dtype(dtype).itemsize * 8
        x = jax.ShapeDtypeStruct((16 * STEPS, BLOCK), dtype)
        w = jax.ShapeDtypeStruct((BLOCK, BLOCK), dtype)
        steps = {}
        for name, transposed in (("x @ w", False), ("x @ w.T", True)):
            text = lower_for_tpu(jax.jit(_matmul(transposed)).trace(x, w), chip=chip)
            (compiled,) = tpu_compiler.compile_all([text], chip, cycles=True)
            steps[name] = compiled.kernel_cycles[0].step_cycles if compiled.kernel_cycles else None
        a, b = steps["x @ w"], steps["x @ w.T"]
        vregs = BLOCK * BLOCK * (bits // 8) / 4096
        out[f"{bits}bit"] = {
            "step_cycles": steps,
            "extra_cycles_per_weight_vreg": round((b - a) / vregs, 3) if a and b else None}
    return out


def measure(chip: str) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    from tools.lowered import tpu_compiler
    from tools.lowered.compile_check import lower_for_tpu

    figures: dict[str, Any] = {}
    for dtype in (jnp.float32, jnp.bfloat16):
        bits = jnp.dtype(dtype).itemsize * 8
        for op in ("copy", "transpose", "shuffle", "rotate"):
            rows = BLOCK  # halved where the block does not fit the chip's scoped VMEM
            while True:
                vregs = rows * BLOCK * (bits // 8) / 4096
                spec = jax.ShapeDtypeStruct((rows * STEPS, BLOCK), dtype)
                text = lower_for_tpu(jax.jit(_kernel(op, rows)).trace(spec), chip=chip)
                started = time.perf_counter()
                (compiled,) = tpu_compiler.compile_all([text], chip, cycles=True)
                if compiled.kind != "vmem" or rows <= 256:
                    break
                rows //= 2
            if not compiled.ok or not compiled.kernel_cycles:
                figures[f"{op}_{bits}bit"] = {"error": compiled.message or compiled.cycles_note}
                continue
            (cycles,) = compiled.kernel_cycles
            figures[f"{op}_{bits}bit"] = {
                "block": [rows, BLOCK], "step_cycles": cycles.step_cycles, "vregs": vregs,
                "cycles_per_vreg": round(cycles.step_cycles / vregs, 3),
                "compile_s": round(time.perf_counter() - started, 2)}
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--chips", default="v5e,v6e,v7")
    args = parser.parse_args(argv)
    from tools.lowered import tpu_compiler
    from tools.performance.chips import get_chip

    if not tpu_compiler.available():
        print("libtpu is not installed (pip install -e '.[tpu-compiler]')", file=sys.stderr)
        return 2
    result: dict[str, Any] = {"figure": "xlu_cycles_per_vreg", "block": [BLOCK, BLOCK],
                              "grid_steps": STEPS, "chips": {}}
    for chip in args.chips.split(","):
        measured = measure(chip)
        model = get_chip(chip)
        for key, row in measured.items():
            if "_" not in key or not key.endswith("bit"):
                continue
            op, bits = key.split("_")[0], int(key.split("_")[1].removesuffix("bit"))
            if op != "copy" and "cycles_per_vreg" in row:
                try:
                    row["model_cycles_per_vreg"] = model.xlu_cycles(op, bits)
                except KeyError:
                    row["model_cycles_per_vreg"] = None  # not in the model's table
        measured["transpose_into_matmul"] = folded(chip)
        result["chips"][chip] = measured
    if args.json:
        print(json.dumps(result))
    else:
        for chip, rows in result["chips"].items():
            for key, row in rows.items():
                print(f"{chip} {key}: {row}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
