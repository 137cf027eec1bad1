"""Scalar evaluation: index maps and body conditions as tiny programs run with numpy.

A value read from memory (scalar prefetch) is data-dependent and comes out as `UNKNOWN`;
evaluating every grid step at once is what lets the cost model see which block changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tools.lowered.types import MosaicError

UNKNOWN = None  # a value that depends on data (scalar prefetch) or on a loop variable


@dataclass(frozen=True)
class Instr:
    """One arith op of a compiled scalar program: results[i] = op(operands) over slots."""

    op: str
    results: tuple[int, ...]
    operands: tuple[int, ...]
    attr: Any
    bits: int


_CMP = {
    0: np.equal, 1: np.not_equal, 2: np.less, 3: np.less_equal, 4: np.greater,
    5: np.greater_equal, 6: np.less, 7: np.less_equal, 8: np.greater, 9: np.greater_equal,
}
_UNSIGNED_CMP = {6, 7, 8, 9}
INDEX_MAP_OPS = frozenset({
    "arith.constant", "arith.addi", "arith.subi", "arith.muli", "arith.divsi", "arith.divui",
    "arith.remsi", "arith.remui", "arith.floordivsi", "arith.ceildivsi", "arith.ceildivui",
    "arith.index_cast", "arith.index_castui", "arith.extsi", "arith.extui", "arith.trunci",
    "arith.select", "arith.cmpi", "arith.minsi", "arith.maxsi", "arith.minui", "arith.maxui",
    "arith.andi", "arith.ori", "arith.xori", "arith.shli", "arith.shrsi", "arith.shrui",
    "memref.load", "func.return",
})


def _wrap(x: np.ndarray, bits: int) -> np.ndarray:
    if bits == 1:
        return x.astype(bool)
    if bits >= 64:
        return x
    half = 1 << (bits - 1)
    return ((x + half) % (1 << bits)) - half


def _unsigned(x: np.ndarray, bits: int) -> np.ndarray:
    return x % (1 << bits) if bits < 64 else x


def _trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    safe = np.where(b == 0, 1, b)
    q = np.abs(a) // np.abs(safe)
    return np.where((a < 0) != (safe < 0), -q, q)


def _apply(ins: Instr, args: list[Any]) -> Any:
    """Evaluate one op over arrays of grid steps; any unknown operand makes the result unknown."""
    op = ins.op
    if op == "arith.constant":
        return ins.attr
    if op == "memref.load" or any(a is UNKNOWN for a in args):
        return UNKNOWN
    a = args[0]
    b = args[1] if len(args) > 1 else None
    bits = ins.bits
    match op:
        case "arith.addi":
            r = a + b
        case "arith.subi":
            r = a - b
        case "arith.muli":
            r = a * b
        case "arith.divsi":
            r = _trunc_div(a, b)
        case "arith.divui":
            r = _unsigned(a, bits) // np.where(b == 0, 1, _unsigned(b, bits))
        case "arith.remsi":
            r = a - _trunc_div(a, b) * b
        case "arith.remui":
            r = _unsigned(a, bits) % np.where(b == 0, 1, _unsigned(b, bits))
        case "arith.floordivsi":
            r = a // np.where(b == 0, 1, b)
        case "arith.ceildivsi":
            r = -((-a) // np.where(b == 0, 1, b))
        case "arith.ceildivui":
            r = -((-_unsigned(a, bits)) // np.where(b == 0, 1, _unsigned(b, bits)))
        case "arith.index_cast" | "arith.extsi" | "arith.trunci":
            r = np.asarray(a, dtype=np.int64)
        case "arith.index_castui" | "arith.extui":
            r = np.asarray(a, dtype=np.int64)
            if r.dtype == bool:
                r = r.astype(np.int64)
        case "arith.select":
            r = np.where(np.asarray(a, dtype=bool), b, args[2])
        case "arith.cmpi":
            pred = int(ins.attr)
            if pred in _UNSIGNED_CMP:
                a, b = _unsigned(a, 64), _unsigned(b, 64)
            return _CMP[pred](a, b)
        case "arith.minsi":
            r = np.minimum(a, b)
        case "arith.maxsi":
            r = np.maximum(a, b)
        case "arith.minui":
            r = np.where(_unsigned(a, bits) <= _unsigned(b, bits), a, b)
        case "arith.maxui":
            r = np.where(_unsigned(a, bits) >= _unsigned(b, bits), a, b)
        case "arith.andi":
            r = np.bitwise_and(a, b)
        case "arith.ori":
            r = np.bitwise_or(a, b)
        case "arith.xori":
            r = np.bitwise_xor(a, b)
        case "arith.shli":
            r = np.left_shift(a, b)
        case "arith.shrsi":
            r = np.right_shift(a, b)
        case "arith.shrui":
            r = np.right_shift(_unsigned(a, bits), b)
        case _:
            raise MosaicError(f"no interpreter rule for {op}")
    return _wrap(np.asarray(r, dtype=bool if bits == 1 else np.int64), bits)


def run_program(program: Sequence[Instr], slots: dict[int, Any]) -> dict[int, Any]:
    env = dict(slots)
    for ins in program:
        if ins.op == "func.return":
            continue
        out = _apply(ins, [env.get(o, UNKNOWN) for o in ins.operands])
        for r in ins.results:
            env[r] = out
    return env


@dataclass(frozen=True)
class IndexMap:
    """A window's `transform_indices` func, compiled: grid indices -> block indices.

    Call it with one int per grid dimension for one step, or use `over(steps)` with an
    (n_dims, n_steps) int array for all steps at once. A returned `None` means the index
    depends on data (a scalar-prefetch load) and cannot be known before running.
    """

    symbol: str
    n_grid: int
    n_args: int
    program: tuple[Instr, ...]
    outputs: tuple[int, ...]

    def over(self, steps: np.ndarray) -> list[np.ndarray | None]:
        slots: dict[int, Any] = {i: steps[i].astype(np.int64) for i in range(self.n_grid)}
        env = run_program(self.program, slots)
        n = steps.shape[1] if steps.ndim == 2 else 1
        outs: list[np.ndarray | None] = []
        for o in self.outputs:
            v = env.get(o, UNKNOWN)
            outs.append(None if v is UNKNOWN else np.broadcast_to(np.asarray(v, np.int64), (n,)))
        return outs

    def __call__(self, *grid_indices: int) -> tuple[int | None, ...]:
        if len(grid_indices) != self.n_grid:
            raise ValueError(f"{self.symbol} takes {self.n_grid} grid indices, got {grid_indices=}")
        steps = np.asarray(grid_indices, dtype=np.int64).reshape(self.n_grid, 1)
        return tuple(None if v is None else int(v[0]) for v in self.over(steps))
