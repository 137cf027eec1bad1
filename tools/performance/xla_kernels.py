"""XLA:TPU's own Mosaic kernels in its program, priced by the kernel model as a Pallas
kernel is; simulated.

XLA:TPU writes some work as a Mosaic kernel of its own: a `custom-call` to `tpu_custom_call`
(its fused attention, `online-softmax`, takes the scores and the values and runs the
softmax and the second matmul block by block). Its `backend_config` carries the kernel's
Mosaic MLIR, the same form a `pallas_call` lowers to, with its grid, block windows and body;
so it is read by the same parser (:mod:`tools.lowered.parse`) and priced by the same rules
(:func:`tools.performance.roofline.estimate_kernel`): launch, exposed prologue, per step
the longer of compute plus the fixed step cost and the next blocks' transfers, exposed
epilogue. A baseline and a candidate that run the same kernel are priced alike.

Operands XLA placed in VMEM (`S(1)` in their layout) are still counted as HBM transfers by
the windows: that can only make the baseline dearer by those bytes, and the receipts say
the op was priced this way. A kernel the model cannot price soundly (work it cannot count,
a body it cannot read) is named unpriced, never free.
"""

from __future__ import annotations

import base64
import json
import re

from tools.lowered.types import MosaicError, split_shaped
from tools.performance.chips import Chip
from tools.performance.roofline import KernelEstimate, estimate_kernel

TARGET = "tpu_custom_call"

# HLO element types as MLIR writes them
_MLIR_TYPES = {"pred": "i1", "s8": "i8", "s16": "i16", "s32": "i32", "s64": "i64",
               "u8": "ui8", "u16": "ui16", "u32": "ui32", "u64": "ui64", "bf16": "bf16",
               "f16": "f16", "f32": "f32", "f64": "f64"}


class XlaKernelError(ValueError):
    """An XLA:TPU Mosaic kernel the model cannot price (named unpriced, never free)."""


def mlir_type(hlo_type: str) -> tuple[str, tuple[int, ...], str, str]:
    """`bf16[4,8,512,16]{3,2,1,0:T(8,128)(2,1)}` as the parser's (kind, shape, dtype, space)."""
    m = re.match(r"\s*(\w+)\[([\d,]*)\]", hlo_type)
    if not m or m.group(1) not in _MLIR_TYPES:
        raise XlaKernelError(f"operand type {hlo_type[:60]!r} is not an array the model reads")
    dims = [d for d in m.group(2).split(",") if d]
    shape = "x".join([*dims, _MLIR_TYPES[m.group(1)]])
    return split_shaped(f"tensor<{shape}>")


def backend_config(rest: str) -> dict:
    """The JSON object after `backend_config=` in an HLO instruction's text."""
    start = rest.find("backend_config={")
    if start < 0:
        raise XlaKernelError("the custom call has no backend_config")
    i = start + len("backend_config=")
    depth, in_string, escaped = 0, False, False
    for j in range(i, len(rest)):
        c = rest[j]
        if in_string:
            escaped = c == "\\" and not escaped
            if c == '"' and not escaped:
                in_string = False
            continue
        if c == '"':
            in_string = True
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                try:
                    return json.loads(rest[i:j + 1])
                except ValueError as exc:
                    raise XlaKernelError(f"backend_config is not JSON: {exc}") from None
    raise XlaKernelError("backend_config is cut off")


def as_bytecode(body: bytes) -> bytes:
    """Mosaic MLIR as bytecode: XLA:TPU's kernels carry text, which names ops of dialects
    the reader leaves unregistered, so it is read once with JAX's dialects and written back."""
    import io

    from tools import jaxprivate

    if body[:4] == b"ML\xefR":  # already bytecode, as a pallas_call lowers to
        return body
    ctx = jaxprivate.jax_mlir().make_ir_context()
    jaxprivate.tpu_dialect().register_dialect(ctx)
    ir = jaxprivate.mlir_ir()
    try:
        with ctx:
            module = ir.Module.parse(body.decode())
            out = io.BytesIO()
            module.operation.write_bytecode(out, desired_version=0)  # as Pallas writes it
    except Exception as exc:
        raise XlaKernelError(f"its Mosaic text does not parse: {str(exc).splitlines()[0][:160]}") from None
    return out.getvalue()


def price(name: str, type_text: str, operand_types: list[str], rest: str,
          chip: Chip) -> KernelEstimate:
    """One `tpu_custom_call` of XLA:TPU's program priced as a Pallas kernel on `chip`."""
    from tools.lowered.parse import parse_mosaic

    config = backend_config(rest)
    try:
        body = base64.b64decode(config["custom_call_config"]["body"])
    except (KeyError, TypeError, ValueError) as exc:
        raise XlaKernelError(f"no Mosaic body in its backend_config ({exc})") from None
    vmem = next((int(s["size"]) for s in config.get("scoped_memory_configs") or []
                 if str(s.get("memory_space")) == "1"), None)
    results = [mlir_type(t) for t in re.findall(r"\w+\[[\d,]*\]", type_text)]
    try:
        kernel = parse_mosaic(as_bytecode(body), name, [mlir_type(t) for t in operand_types], results, vmem)
        estimate = estimate_kernel(kernel, chip)
    except MosaicError as exc:
        raise XlaKernelError(str(exc)) from None
    if estimate.unsound:
        raise XlaKernelError("work the model cannot count: " + "; ".join(estimate.unsound))
    return estimate


__all__ = ["TARGET", "XlaKernelError", "backend_config", "mlir_type", "price"]
