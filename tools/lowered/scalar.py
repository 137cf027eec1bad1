"""Scalar evaluation: index maps and body conditions as tiny programs run with numpy.

Integer semantics are exact per bit width (MLIR `arith`: signless integers, two's-complement
wrap-around, signed or unsigned by the op). A value is held as an int64 array of its
*signed* canonical form (i1 as bool), one element per grid step. Anything whose result MLIR
leaves undefined (division by zero, signed division overflow, shifts by the width or more,
`nsw`/`nuw` overflow) or that the evaluator has no proven-exact rule for comes out as
`UNKNOWN`; so does a value read from memory (scalar prefetch) unless the caller supplies
it. Unknown values make the cost model over-count (both branches, every block fetched) or
declare the estimate unsound (loop trip counts): never free.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
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
    bits: int  # width of the result
    in_bits: int = 64  # width of the first operand (casts and compares need it)
    # "nsw" / "nuw": overflow is poison; "index_result" / "index_operand": the type is
    # `index`, whose width the target chooses: evaluated at 32 and 64 bits, known only
    # where both agree.
    flags: frozenset[str] = frozenset()


# arith.cmpi predicates: eq ne slt sle sgt sge ult ule ugt uge
_CMP: dict[int, Callable[[Any, Any], Any]] = {
    0: np.equal, 1: np.not_equal, 2: np.less, 3: np.less_equal, 4: np.greater,
    5: np.greater_equal, 6: np.less, 7: np.less_equal, 8: np.greater, 9: np.greater_equal,
}
_UNSIGNED_CMP = frozenset({6, 7, 8, 9})
INDEX_MAP_OPS = frozenset({
    "arith.constant", "arith.addi", "arith.subi", "arith.muli", "arith.divsi", "arith.divui",
    "arith.remsi", "arith.remui", "arith.floordivsi", "arith.ceildivsi", "arith.ceildivui",
    "arith.index_cast", "arith.index_castui", "arith.extsi", "arith.extui", "arith.trunci",
    "arith.select", "arith.cmpi", "arith.minsi", "arith.maxsi", "arith.minui", "arith.maxui",
    "arith.andi", "arith.ori", "arith.xori", "arith.shli", "arith.shrsi", "arith.shrui",
    "memref.load", "func.return",
})


class _Undefined(Exception):
    """The op's result is undefined (poison / UB) for some step: the value is unknown."""


def wrap(x: Any, bits: int) -> np.ndarray:
    """The signed canonical form of `x` modulo 2**bits (i1: bool)."""
    x = np.asarray(x)
    if bits == 1:
        return (x.astype(np.int64) & 1).astype(bool)
    x = x.astype(np.int64)
    if bits >= 64:
        return x
    mask = np.int64((1 << bits) - 1)
    u = x & mask
    return np.where(u >= (1 << (bits - 1)), u - np.int64(1 << bits), u)


def unsigned(x: Any, bits: int) -> np.ndarray:
    """The unsigned reading of a `bits`-wide value: int64 below 64 bits, uint64 at 64."""
    x = _int(x)
    if bits >= 64:
        return x.astype(np.uint64)
    return x & np.int64((1 << bits) - 1)


def _check_nonzero(b: np.ndarray) -> None:
    if np.any(b == 0):
        raise _Undefined


def _signed_div_overflow(a: np.ndarray, b: np.ndarray, bits: int) -> None:
    lowest = -(1 << (bits - 1))
    if np.any((a == lowest) & (b == -1)):
        raise _Undefined


def _trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


def _shift_amount(b: np.ndarray, bits: int) -> np.ndarray:
    amount = unsigned(b, bits)
    if np.any(amount >= bits):
        raise _Undefined
    return amount.astype(np.int64)


def _check_overflow(ins: Instr, a: np.ndarray, b: np.ndarray, result: np.ndarray) -> None:
    """`nsw` / `nuw`: the op is poison where the exact result does not fit."""
    if not ins.flags:
        return
    fn = {"arith.addi": lambda x, y: x + y, "arith.subi": lambda x, y: x - y,
          "arith.muli": lambda x, y: x * y, "arith.shli": lambda x, y: x << y}[ins.op]
    bits = ins.bits
    for x, y, r in zip(*(v.ravel() for v in np.broadcast_arrays(a, b, result)), strict=True):
        xs, ys = int(x), int(y)
        if "nsw" in ins.flags:
            exact = fn(xs, ys)
            if exact != int(r):
                raise _Undefined
        if "nuw" in ins.flags:
            ux, uy = xs % (1 << bits), ys % (1 << bits)
            exact = fn(ux, uy)
            if exact != int(r) % (1 << bits) or not 0 <= exact < (1 << bits):
                raise _Undefined


def _int(x: Any) -> np.ndarray:
    """An operand as int64; an i1 `true` is -1 in its signed reading (sign extension)."""
    arr = np.asarray(x)
    if arr.dtype == bool:
        return -arr.astype(np.int64)
    return arr.astype(np.int64)


def _apply(ins: Instr, args: list[Any]) -> Any:
    """Evaluate one op over arrays of grid steps; any unknown operand makes the result unknown."""
    op = ins.op
    if op == "arith.constant":
        return UNKNOWN if ins.attr is UNKNOWN else wrap(ins.attr, ins.bits)
    if op == "memref.load" or any(a is UNKNOWN for a in args):
        return UNKNOWN
    try:
        if "index_result" in ins.flags or "index_operand" in ins.flags:
            return _both_index_widths(ins, args)
        return _exact(ins, args)
    except _Undefined:
        return UNKNOWN


def _both_index_widths(ins: Instr, args: list[Any]) -> Any:
    wide = _exact(ins, args)
    narrow_ins = replace(
        ins,
        bits=32 if "index_result" in ins.flags else ins.bits,
        in_bits=32 if "index_operand" in ins.flags else ins.in_bits,
        flags=ins.flags - {"index_result", "index_operand"},
    )
    narrow_args = []
    for arg in args:
        arr = np.asarray(arg)
        if arr.dtype != bool and np.any(wrap(arr, 32) != arr) and "index_operand" in ins.flags:
            raise _Undefined  # an index operand that does not fit 32 bits
        narrow_args.append(arr)
    narrow = _exact(narrow_ins, narrow_args)
    if np.any(np.asarray(narrow) != np.asarray(wide)):
        raise _Undefined
    return wide


def _exact(ins: Instr, args: list[Any]) -> Any:
    op, bits, in_bits = ins.op, ins.bits, ins.in_bits
    if op == "arith.select":
        return np.where(np.asarray(args[0], dtype=bool), args[1], args[2])
    a = _int(args[0])
    b = _int(args[1]) if len(args) > 1 else None
    match op:
        case "arith.addi" | "arith.subi" | "arith.muli":
            with np.errstate(over="ignore"):
                r = {"arith.addi": np.add, "arith.subi": np.subtract,
                     "arith.muli": np.multiply}[op](a, b)
            out = wrap(r, bits)
            _check_overflow(ins, a, b, out)
            return out
        case "arith.divsi" | "arith.remsi" | "arith.floordivsi" | "arith.ceildivsi":
            _check_nonzero(b)
            _signed_div_overflow(a, b, bits)
            if op == "arith.divsi":
                return wrap(_trunc_div(a, b), bits)
            if op == "arith.remsi":
                return wrap(a - _trunc_div(a, b) * b, bits)
            if op == "arith.floordivsi":
                return wrap(np.floor_divide(a, b), bits)
            return wrap(-np.floor_divide(-a, b), bits)
        case "arith.divui" | "arith.remui" | "arith.ceildivui":
            ua, ub = unsigned(a, bits), unsigned(b, bits)
            _check_nonzero(ub)
            if op == "arith.divui":
                r = ua // ub
            elif op == "arith.remui":
                r = ua % ub
            else:
                r = ua // ub + (ua % ub != 0).astype(ua.dtype)
            return wrap(r.astype(np.int64) if r.dtype == np.uint64 else r, bits)
        case "arith.extsi":
            return wrap(a, bits)  # the canonical signed value is already sign-extended
        case "arith.extui" | "arith.index_castui":
            return wrap(unsigned(a, in_bits).astype(np.int64), bits) if in_bits < 64 else wrap(a, bits)
        case "arith.index_cast" | "arith.trunci":
            return wrap(a, bits)
        case "arith.cmpi":
            pred = int(ins.attr)
            if pred not in _CMP:
                raise MosaicError(f"arith.cmpi with unknown predicate {pred}")
            if pred in _UNSIGNED_CMP:
                a, b = unsigned(a, in_bits), unsigned(b, in_bits)
            return np.asarray(_CMP[pred](a, b), dtype=bool)
        case "arith.minsi":
            return wrap(np.minimum(a, b), bits)
        case "arith.maxsi":
            return wrap(np.maximum(a, b), bits)
        case "arith.minui":
            return wrap(np.where(unsigned(a, bits) <= unsigned(b, bits), a, b), bits)
        case "arith.maxui":
            return wrap(np.where(unsigned(a, bits) >= unsigned(b, bits), a, b), bits)
        case "arith.andi":
            return wrap(np.bitwise_and(a, b), bits)
        case "arith.ori":
            return wrap(np.bitwise_or(a, b), bits)
        case "arith.xori":
            return wrap(np.bitwise_xor(a, b), bits)
        case "arith.shli":
            amount = _shift_amount(b, bits)
            out = wrap(np.left_shift(unsigned(a, bits).astype(np.uint64),
                                     amount.astype(np.uint64)).astype(np.int64), bits)
            _check_overflow(ins, a, amount, out)
            return out
        case "arith.shrsi":
            return wrap(np.right_shift(a, _shift_amount(b, bits)), bits)
        case "arith.shrui":
            amount = _shift_amount(b, bits)
            r = np.right_shift(unsigned(a, bits), amount.astype(unsigned(a, bits).dtype))
            return wrap(r.astype(np.int64), bits)
    raise MosaicError(f"no interpreter rule for {op}")


def run_program(program: Sequence[Instr], slots: dict[int, Any]) -> dict[int, Any]:
    """Evaluate `program` with memory unknown (every `memref.load` is UNKNOWN)."""
    return run_with_memory(program, slots, {})


@dataclass(frozen=True)
class IndexMap:
    """A window's `transform_indices` func, compiled: grid indices -> block indices.

    Call it with one int per grid dimension for one step, or use `over(steps)` with an
    (n_dims, n_steps) int array for all steps at once. A returned `None` means the index
    depends on data (a scalar-prefetch load) the caller did not supply.
    """

    symbol: str
    n_grid: int
    n_args: int
    program: tuple[Instr, ...]
    outputs: tuple[int, ...]

    def over(self, steps: np.ndarray,
             prefetch: Sequence[np.ndarray] | None = None) -> list[np.ndarray | None]:
        slots: dict[int, Any] = {i: steps[i].astype(np.int64) for i in range(self.n_grid)}
        memory = {self.n_grid + i: np.asarray(v) for i, v in enumerate(prefetch or ())}
        env = run_with_memory(self.program, slots, memory)
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


def run_with_memory(program: Sequence[Instr], slots: dict[int, Any],
                    memory: dict[int, np.ndarray]) -> dict[int, Any]:
    """`run_program`, with `memref.load` from the refs in `memory` (slot -> array) known.

    A load is known when its ref is supplied and every index is known and in bounds.
    """
    env = dict(slots)
    for ins in program:
        if ins.op == "func.return":
            continue
        if ins.op == "memref.load":
            out = _load(ins, env, memory)
        else:
            out = _apply(ins, [env.get(o, UNKNOWN) for o in ins.operands])
        for r in ins.results:
            env[r] = out
    return env


def _load(ins: Instr, env: dict[int, Any], memory: dict[int, np.ndarray]) -> Any:
    ref = memory.get(ins.operands[0]) if ins.operands else None
    if ref is None:
        return UNKNOWN
    indices = [env.get(o, UNKNOWN) for o in ins.operands[1:]]
    if any(i is UNKNOWN for i in indices) or len(indices) != ref.ndim:
        return UNKNOWN
    arrays = np.broadcast_arrays(*[np.asarray(i, np.int64) for i in indices]) if indices else []
    for i, dim in zip(arrays, ref.shape, strict=True):
        if np.any((i < 0) | (i >= dim)):
            return UNKNOWN
    value = ref[tuple(arrays)] if arrays else ref[()]
    if ref.dtype == bool:
        return np.asarray(value, bool)
    return wrap(np.asarray(value).astype(np.int64), ins.bits)
