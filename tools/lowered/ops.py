"""Reading single MLIR ops of a lowered program: names, attributes, constants, scalar instrs."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from tools import jaxprivate
from tools.lowered.scalar import UNKNOWN, Instr
from tools.lowered.types import PREFIX, MosaicError


def ir_module() -> Any:
    """The MLIR bindings bundled with jaxlib."""
    return jaxprivate.mlir_ir()


def op_name(op: Any) -> str:
    name = op.operation.name
    return name[len(PREFIX):] if name.startswith(PREFIX) else name


def attr_str(op: Any, name: str) -> str | None:
    attrs = op.operation.attributes
    return str(attrs[name]) if name in attrs else None


def int_attr(text: str | None) -> int:
    if text is None:
        return 0
    m = re.match(r"\s*(-?\d+)", text)
    if m:
        return int(m.group(1))
    if text.strip() in {"true", "false"}:
        return int(text.strip() == "true")
    raise MosaicError(f"expected an integer attribute, got {text!r}")


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def int_bits(type_text: str) -> int:
    """Width of a scalar integer type (`index` is 64 bits on TPU's scalar core as modelled)."""
    t = type_text.strip()
    if t == "index":
        return 64
    m = re.fullmatch(r"[us]?i(\d+)", t)
    return int(m.group(1)) if m else 64


def constant_value(op: Any) -> Any:
    text = attr_str(op, "value") or ""
    m = re.fullmatch(r"\s*(-?\d+)\s*(:\s*\w+)?\s*", text)
    if m:
        return np.int64(int(m.group(1)))
    if text.strip() in {"true", "false"}:
        return np.bool_(text.strip() == "true")
    return UNKNOWN  # float or vector constant: not part of index arithmetic


class Slots:
    def __init__(self) -> None:
        self.ids: dict[Any, int] = {}

    def __call__(self, value: Any) -> int:
        if value not in self.ids:
            self.ids[value] = len(self.ids)
        return self.ids[value]


def instr(op: Any, name: str, slot: Callable[[Any], int]) -> Instr:
    results = tuple(slot(r) for r in op.operation.results)
    operands = tuple(slot(v) for v in op.operation.operands)
    bits = int_bits(str(op.operation.results[0].type)) if op.operation.results else 64
    in_bits = int_bits(str(op.operation.operands[0].type)) if op.operation.operands else bits
    attr: Any = None
    if name == "arith.constant":
        attr = constant_value(op)
    elif name == "arith.cmpi":
        attr = int_attr(attr_str(op, "predicate"))
    overflow = attr_str(op, "overflowFlags") or ""
    flags = {f for f in ("nsw", "nuw") if f in overflow}
    if op.operation.results and str(op.operation.results[0].type).strip() == "index":
        flags.add("index_result")
    if op.operation.operands and str(op.operation.operands[0].type).strip() == "index":
        flags.add("index_operand")
    return Instr(name, results, operands, attr, bits, in_bits, frozenset(flags))
