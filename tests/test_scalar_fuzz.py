"""The scalar evaluator against XLA running the same integer ops on high-bit values.

Two layers: every `arith` rule on random operands of each width (XLA computes the same
lax op on arrays of that dtype; undefined cases, e.g. division by zero, must come out
unknown), and random index-map expressions lowered through Pallas for TPU, whose parsed
programs must give what XLA gives for the same expressions at every grid index.
"""

from __future__ import annotations

import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl

from tests.perf_kernels import lower
from tools.lowered.mosaic import parse_lowered
from tools.lowered.scalar import UNKNOWN, Instr, run_program

N = 512
_SIGNED = {8: jnp.int8, 16: jnp.int16, 32: jnp.int32}
_UNSIGNED = {8: jnp.uint8, 16: jnp.uint16, 32: jnp.uint32}


def _operands(rng: np.random.Generator, bits: int) -> np.ndarray:
    """Signed canonical values with the extremes and high bits well represented."""
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    edges = np.array([0, 1, -1, 2, lo, hi, lo + 1, hi - 1], np.int64)
    return np.concatenate([edges, rng.integers(lo, hi, N - len(edges), endpoint=True)])


def _xla(fn, *arrays, dtype):
    """Run `fn` with XLA on arrays of `dtype`; the result read back as signed int64."""
    out = np.asarray(jax.jit(fn)(*[jnp.asarray(a.astype(np.int64)).astype(dtype)
                                   if dtype != jnp.bool_ else jnp.asarray(a) for a in arrays]))
    if out.dtype == np.bool_:
        return out
    signed = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}[out.dtype.itemsize]
    return out.view(signed).astype(np.int64)


def _ours(op, a, b=None, *, bits=32, in_bits=None, attr=None):
    operands = (0,) if b is None else (0, 1)
    slots = {0: a} if b is None else {0: a, 1: b}
    ins = Instr(op, (2,), operands, attr, bits, in_bits if in_bits is not None else bits)
    return run_program([ins], slots)[2]


BINARY = {
    "arith.addi": (lax.add, False), "arith.subi": (lax.sub, False), "arith.muli": (lax.mul, False),
    "arith.andi": (lax.bitwise_and, False), "arith.ori": (lax.bitwise_or, False),
    "arith.xori": (lax.bitwise_xor, False), "arith.minsi": (lax.min, False),
    "arith.maxsi": (lax.max, False), "arith.minui": (lax.min, True),
    "arith.maxui": (lax.max, True),
}


@pytest.mark.parametrize("bits", [8, 16, 32])
def test_wrapping_and_bitwise_ops_match_xla(bits: int) -> None:
    rng = np.random.default_rng(bits)
    a, b = _operands(rng, bits), rng.permutation(_operands(rng, bits))
    for op, (fn, is_unsigned) in BINARY.items():
        dtype = (_UNSIGNED if is_unsigned else _SIGNED)[bits]
        want = _xla(fn, a, b, dtype=dtype)
        assert np.array_equal(_ours(op, a, b, bits=bits), want), op


@pytest.mark.parametrize("bits", [8, 16, 32])
def test_division_matches_xla_and_is_unknown_where_undefined(bits: int) -> None:
    rng = np.random.default_rng(100 + bits)
    a = _operands(rng, bits)
    b = rng.permutation(_operands(rng, bits))
    lowest = -(1 << (bits - 1))
    ok = (b != 0) & ~((a == lowest) & (b == -1))
    a_ok, b_ok = a[ok], b[ok]

    def ceil_div(x, y):
        q = lax.div(x, y)
        return q + ((lax.rem(x, y) != 0) & ((x < 0) == (y < 0))).astype(x.dtype)

    def uceil_div(x, y):
        return lax.div(x, y) + (lax.rem(x, y) != 0).astype(x.dtype)

    cases = {
        "arith.divsi": (lax.div, _SIGNED), "arith.remsi": (lax.rem, _SIGNED),
        "arith.floordivsi": (jnp.floor_divide, _SIGNED), "arith.ceildivsi": (ceil_div, _SIGNED),
        "arith.divui": (lax.div, _UNSIGNED), "arith.remui": (lax.rem, _UNSIGNED),
        "arith.ceildivui": (uceil_div, _UNSIGNED),
    }
    for op, (fn, table) in cases.items():
        want = _xla(fn, a_ok, b_ok, dtype=table[bits])
        assert np.array_equal(_ours(op, a_ok, b_ok, bits=bits), want), op
        # Division by zero (and signed overflow) is undefined in MLIR: never a number.
        assert _ours(op, a, b, bits=bits) is UNKNOWN, op
    assert _ours("arith.divsi", np.array([lowest]), np.array([-1]), bits=bits) is UNKNOWN


@pytest.mark.parametrize("bits", [8, 16, 32])
def test_shifts_match_xla_and_oversized_shifts_are_unknown(bits: int) -> None:
    rng = np.random.default_rng(200 + bits)
    a = _operands(rng, bits)
    amount = rng.integers(0, bits, N)
    for op, fn in (("arith.shli", lax.shift_left), ("arith.shrsi", lax.shift_right_arithmetic),
                   ("arith.shrui", lax.shift_right_logical)):
        dtype = _UNSIGNED[bits] if op == "arith.shrui" else _SIGNED[bits]
        want = _xla(fn, a, amount, dtype=dtype)
        assert np.array_equal(_ours(op, a, amount, bits=bits), want), op
        assert _ours(op, a, np.full(N, bits), bits=bits) is UNKNOWN, op
        assert _ours(op, a, np.full(N, -1), bits=bits) is UNKNOWN, op


@pytest.mark.parametrize("bits", [8, 16, 32])
def test_every_compare_predicate_matches_xla(bits: int) -> None:
    rng = np.random.default_rng(300 + bits)
    a = _operands(rng, bits)
    b = np.where(rng.random(N) < 0.3, a, rng.permutation(a))
    fns = [lax.eq, lax.ne, lax.lt, lax.le, lax.gt, lax.ge, lax.lt, lax.le, lax.gt, lax.ge]
    for pred, fn in enumerate(fns):
        dtype = (_UNSIGNED if pred >= 6 else _SIGNED)[bits]
        want = _xla(fn, a, b, dtype=dtype)
        got = _ours("arith.cmpi", a, b, bits=1, in_bits=bits, attr=pred)
        assert np.array_equal(got, want), f"predicate {pred}"


@pytest.mark.parametrize(("src", "dst"), [(8, 32), (16, 32), (1, 32), (1, 8), (8, 16)])
def test_extensions_and_truncations_match_xla(src: int, dst: int) -> None:
    rng = np.random.default_rng(400 + src)
    if src == 1:
        a = rng.random(N) < 0.5
        signed_src, unsigned_src = jnp.bool_, jnp.bool_
    else:
        a = _operands(rng, src)
        signed_src, unsigned_src = _SIGNED[src], _UNSIGNED[src]
    # extsi of i1 true is -1 (sign extension), extui is 1.
    want_s = _xla(lambda x: x.astype(_SIGNED[dst]) * (-1 if src == 1 else 1), a, dtype=signed_src)
    want_u = _xla(lambda x: x.astype(_UNSIGNED[dst]), a, dtype=unsigned_src)
    assert np.array_equal(_ours("arith.extsi", a, bits=dst, in_bits=src), want_s)
    assert np.array_equal(_ours("arith.extui", a, bits=dst, in_bits=src), want_u)
    assert np.array_equal(_ours("arith.index_castui", a, bits=dst, in_bits=src), want_u)
    if src > 1:
        wide = _operands(rng, dst)
        want_t = _xla(lambda x: x.astype(_SIGNED[src]), wide, dtype=_SIGNED[dst])
        assert np.array_equal(_ours("arith.trunci", wide, bits=src, in_bits=dst), want_t)


def test_overflow_flags_make_poison_unknown() -> None:
    a, b = np.array([1 << 30]), np.array([4])
    plain = Instr("arith.muli", (2,), (0, 1), None, 32, 32)
    nsw = Instr("arith.muli", (2,), (0, 1), None, 32, 32, frozenset({"nsw"}))
    assert run_program([plain], {0: a, 1: b})[2].tolist() == [0]
    assert run_program([nsw], {0: a, 1: b})[2] is UNKNOWN
    assert run_program([nsw], {0: np.array([3]), 1: b})[2].tolist() == [12]


def test_index_values_are_known_only_where_32_and_64_bits_agree() -> None:
    flags = frozenset({"index_result", "index_operand"})
    add = Instr("arith.addi", (2,), (0, 1), None, 64, 64, flags)
    assert run_program([add], {0: np.array([5]), 1: np.array([7])})[2].tolist() == [12]
    assert run_program([add], {0: np.array([2**31 - 1]), 1: np.array([1])})[2] is UNKNOWN


# ------------------------------------------------------------- lowered through Pallas

_U = jnp.uint32
_I = jnp.int32
_HIGH = [0x7FFFFFFF, -0x80000000, -1, 0x9E3779B1 - (1 << 32), 0x40000000, 65537, 7, 3]


def _random_expr(rng: random.Random, depth: int):
    """A random int32 expression of the grid index with high-bit constants."""
    if depth == 0:
        choice = rng.random()
        if choice < 0.5:
            return lambda i: i * _I(0x9E3779B1 - (1 << 32)) + _I(12345)
        c = rng.choice(_HIGH)
        return lambda i, c=c: jnp.full_like(i, c) ^ i
    x = _random_expr(rng, depth - 1)
    y = _random_expr(rng, depth - 1)
    nonzero_u = rng.choice([3, 7, 1000, 0x80000001, 0xFFFFFFFF])
    nonzero_s = rng.choice([3, -7, 1000, -0x7FFFFFFF])
    shift = rng.randrange(0, 32)
    ops = [
        lambda i: x(i) + y(i), lambda i: x(i) - y(i), lambda i: x(i) * y(i),
        lambda i: (x(i).astype(_U) < y(i).astype(_U)).astype(_I),
        lambda i: (x(i).astype(_U) >= y(i).astype(_U)).astype(_I),
        lambda i: (x(i) < y(i)).astype(_I),
        lambda i: (x(i).astype(_U) // _U(nonzero_u)).astype(_I),
        lambda i: (x(i).astype(_U) % _U(nonzero_u)).astype(_I),
        lambda i: lax.div(x(i), _I(nonzero_s)), lambda i: lax.rem(x(i), _I(nonzero_s)),
        lambda i: lax.shift_right_logical(x(i), _I(shift)),
        lambda i: lax.shift_right_arithmetic(x(i), _I(shift)),
        lambda i: lax.shift_left(x(i), _I(shift)),
        lambda i: jnp.maximum(x(i).astype(_U), y(i).astype(_U)).astype(_I),
        lambda i: jnp.minimum(x(i), y(i)),
        lambda i: jnp.where(x(i).astype(_U) > y(i).astype(_U), x(i), y(i)),
        lambda i: x(i).astype(jnp.int16).astype(_I),
        lambda i: x(i).astype(jnp.uint8).astype(_I),
        lambda i: x(i) & y(i), lambda i: x(i) | y(i),
    ]
    return rng.choice(ops)



def _as_index_map(expr):
    return lambda i: (expr(i), 0)


@pytest.mark.slow
def test_lowered_index_maps_match_xla_on_random_expressions() -> None:
    rng = random.Random(9)
    grid = 96
    exprs = [_random_expr(rng, rng.randrange(1, 3)) for _ in range(40)]

    def copy(*refs):
        refs[-1][...] = refs[0][...]

    checked = 0
    for start in range(0, len(exprs), 20):
        batch = exprs[start:start + 20]
        specs = [pl.BlockSpec((8, 128), _as_index_map(e)) for e in batch]

        def call(*xs, specs=specs):
            return pl.pallas_call(copy, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                                  grid=(grid,), in_specs=specs,
                                  out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)))(*xs)

        args = [jax.ShapeDtypeStruct((8 * grid, 128), jnp.float32)] * len(batch)
        (kernel,) = parse_lowered(lower(call, *args)).kernels
        steps = kernel.steps()
        for window, expr in zip(kernel.windows, batch, strict=False):
            got = window.index_map.over(steps)[0]
            want = np.asarray(jax.jit(jax.vmap(expr))(jnp.arange(grid, dtype=_I)))
            assert got is not None, [i.op for i in window.index_map.program]
            assert np.array_equal(got, want), [i.op for i in window.index_map.program]
            checked += 1
    assert checked == len(exprs)
