"""Read a lowered program's Mosaic kernels from its StableHLO text, without the candidate's code.

The child process lowers the candidate for TPU and returns the StableHLO text; everything
the verdict and the cost model need is read here, in the parent, from that text alone:
each `stablehlo.custom_call @tpu_custom_call` carries JSON in `backend_config` whose
`custom_call_config.body` is base64 Mosaic MLIR bytecode. Parsed with unregistered dialects
(plus the TPU dialect, for its memory-space attributes), the kernel func shows the grid
(`iteration_bounds`), `dimension_semantics`, one `window_params` entry per blocked operand
(block shape and the symbol of its index-map func), `scalar_prefetch`, `scratch_operands`
and the body ops with their vector types.

Index maps are small funcs of plain `arith` ops. They are compiled to a tiny program and
evaluated with numpy over all grid steps at once (the cost model needs, per step, whether a
block's index changed). A value read from memory (scalar prefetch) is data-dependent and
comes out as "unknown"; an op outside the supported set fails closed with `MosaicError`.
The body's scalar `arith` ops are evaluated the same way, so `pl.when` branches are known
per step where their condition depends on program ids only.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

PREFIX = "stable_mosaic."
MAX_GRID_STEPS = 1 << 22


class MosaicError(ValueError):
    """The lowered text is not a program this module can read; the message says what."""


# ----------------------------------------------------------------------------- types

_DTYPES = {
    "f64": "float64", "f32": "float32", "bf16": "bfloat16", "f16": "float16",
    "f8E4M3FN": "float8_e4m3fn", "f8E5M2": "float8_e5m2", "f8E4M3B11FNUZ": "float8_e4m3b11fnuz",
    "i64": "int64", "i32": "int32", "i16": "int16", "i8": "int8", "i4": "int4", "i1": "bool",
    "ui32": "uint32", "ui16": "uint16", "ui8": "uint8", "ui4": "uint4", "index": "int64",
}
_BITS = {
    "float64": 64, "float32": 32, "bfloat16": 16, "float16": 16, "float8_e4m3fn": 8,
    "float8_e5m2": 8, "float8_e4m3b11fnuz": 8, "int64": 64, "int32": 32, "int16": 16,
    "int8": 8, "int4": 4, "bool": 8, "uint32": 32, "uint16": 16, "uint8": 8, "uint4": 4,
}


def dtype_name(mlir_type: str) -> str:
    """`f32` -> `float32`; unknown element types keep their MLIR spelling."""
    return _DTYPES.get(mlir_type, mlir_type)


def dtype_bits(dtype: str) -> int:
    if dtype not in _BITS:
        raise MosaicError(f"unknown element type {dtype!r}")
    return _BITS[dtype]


def nbytes(shape: Sequence[int], dtype: str) -> int:
    return math.ceil(math.prod(shape) * dtype_bits(dtype) / 8)


_SHAPED = re.compile(r"^(memref|vector|tensor)<(.*)>$", re.S)


def _split_shaped(type_text: str) -> tuple[str, tuple[int, ...], str, str]:
    """`memref<8x128xf32, #tpu.memory_space<vmem>>` -> ("memref", (8, 128), "float32", "vmem")."""
    m = _SHAPED.match(type_text.strip())
    if not m:
        return ("scalar", (), dtype_name(type_text.strip()), "")
    kind, inner = m.groups()
    space = ""
    sm = re.search(r"#tpu\.memory_space<(\w+)>", inner)
    if sm:
        space = sm.group(1)
    head = inner.split(",")[0].strip()
    if head.startswith("!"):
        return (kind, (), head, space)
    parts = head.split("x")
    dims: list[int] = []
    for p in parts[:-1]:
        if not p.isdigit():
            raise MosaicError(f"dynamic or unreadable dimension in {type_text!r}")
        dims.append(int(p))
    return (kind, tuple(dims), dtype_name(parts[-1]), space)


# ------------------------------------------------------------------ scalar interpreter

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


def _run(program: Sequence[Instr], slots: dict[int, Any]) -> dict[int, Any]:
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
        env = _run(self.program, slots)
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


# --------------------------------------------------------------------- kernel record


@dataclass(frozen=True)
class Window:
    """One blocked operand: what a grid step moves between HBM and VMEM/SMEM."""

    position: int  # index in window_params (inputs first, then outputs)
    role: str  # "input" | "output"
    block_shape: tuple[int, ...] | None  # None: whole operand left in place (memory_space ANY)
    dtype: str
    memory_space: str  # "vmem" | "smem" | "any" | ...
    array_shape: tuple[int, ...]
    buffer_count: int  # 2 (double-buffered, the default) or 1 (pl.Buffered(1))
    index_map: IndexMap | None  # None with a block_shape: one whole-array block (no grid)

    @property
    def block_bytes(self) -> int:
        return 0 if self.block_shape is None else nbytes(self.block_shape, self.dtype)

    @property
    def array_bytes(self) -> int:
        return nbytes(self.array_shape, self.dtype)


@dataclass(frozen=True)
class Scratch:
    shape: tuple[int, ...]
    dtype: str
    memory_space: str

    @property
    def nbytes(self) -> int:
        if self.memory_space in {"semaphore_mem", "semaphore"} or self.dtype.startswith("!"):
            return 0
        return nbytes(self.shape, self.dtype)


@dataclass(frozen=True)
class BodyOp:
    """One op of the kernel body, with the work it does each time it runs."""

    name: str
    result_shape: tuple[int, ...]
    element_type: str
    flops: int = 0  # float arithmetic, matmul counted 2*M*N*K
    transcendentals: int = 0
    vpu_ops: int = 0  # element ops on the VPU (float and int, compares, selects, converts)
    matmul: tuple[int, int, int, int] | None = None  # (batch, M, N, K)
    matmul_dtype: str = ""
    dma_bytes: int = 0  # bytes a manual `tpu.enqueue_dma` moves


@dataclass(frozen=True)
class Branch:
    """`scf.if`: the condition slot in the body's scalar program (None if not evaluable)."""

    cond: int | None
    then: tuple[Any, ...]
    otherwise: tuple[Any, ...]


@dataclass(frozen=True)
class Loop:
    """`scf.for` / `scf.while`: a constant trip count, or the slots of (lower, upper, step)
    in the body's scalar program when the bounds are computed, or neither (data-dependent)."""

    trip_count: int | None
    body: tuple[Any, ...]
    bounds: tuple[int, int, int] | None = None

    def trips(self, env: dict[int, Any], n: int) -> np.ndarray | None:
        """Trip count at each of `n` steps, or None when it depends on data."""
        if self.trip_count is not None:
            return np.full(n, self.trip_count, dtype=np.int64)
        if self.bounds is None:
            return None
        lb, ub, step = (env.get(slot, UNKNOWN) for slot in self.bounds)
        if lb is UNKNOWN or ub is UNKNOWN or step is UNKNOWN:
            return None
        step = np.where(np.asarray(step) == 0, 1, step)
        trips = np.maximum(0, -((np.asarray(lb) - np.asarray(ub)) // step))
        return np.broadcast_to(trips.astype(np.int64), (n,))


@dataclass(frozen=True)
class MosaicKernel:
    name: str
    grid: tuple[int, ...]
    dimension_semantics: tuple[str, ...]
    windows: tuple[Window, ...]
    scalar_prefetch: tuple[Scratch, ...]
    scratch: tuple[Scratch, ...]
    body: tuple[Any, ...]  # BodyOp | Branch | Loop, in program order
    scalar_program: tuple[Instr, ...]
    n_grid_slots: int
    vmem_limit_bytes: int | None  # from CompilerParams(vmem_limit_bytes=...), if set
    unmodelled_ops: tuple[str, ...]
    output_operand_aliases: tuple[tuple[int, int], ...] = ()

    @property
    def grid_steps(self) -> int:
        return math.prod(self.grid)

    def steps(self) -> np.ndarray:
        """All grid indices in execution order (last grid dimension fastest): (n_dims, n_steps)."""
        if self.grid_steps > MAX_GRID_STEPS:
            raise MosaicError(
                f"kernel {self.name}: grid {self.grid} has {self.grid_steps} steps, more than "
                f"the simulator's limit of {MAX_GRID_STEPS}"
            )
        if not self.grid:
            return np.zeros((0, 1), dtype=np.int64)
        return np.indices(self.grid, dtype=np.int64).reshape(len(self.grid), -1)

    def body_ops(self) -> Iterator[BodyOp]:
        yield from _flatten(self.body)

    def scalar_env(self, steps: np.ndarray) -> dict[int, Any]:
        """The body's scalar values (program-id arithmetic) at every step; UNKNOWN = data."""
        slots = {i: steps[i] for i in range(min(self.n_grid_slots, steps.shape[0]))}
        return _run(self.scalar_program, slots)

    def branch_conditions(self, steps: np.ndarray) -> dict[int, np.ndarray | None]:
        """Each `pl.when` condition's value at every step (None where it depends on data)."""
        env = self.scalar_env(steps)
        n = steps.shape[1]
        out: dict[int, np.ndarray | None] = {}
        for item in _walk(self.body):
            if isinstance(item, Branch) and item.cond is not None:
                v = env.get(item.cond, UNKNOWN)
                out[item.cond] = None if v is UNKNOWN else np.broadcast_to(np.asarray(v, bool), (n,))
        return out

    def summary(self) -> dict[str, Any]:
        """A JSON-ready description (no evaluators) for receipts and profiles."""
        return {
            "name": self.name,
            "grid": list(self.grid),
            "dimension_semantics": list(self.dimension_semantics),
            "windows": [
                {
                    "role": w.role, "block_shape": None if w.block_shape is None else list(w.block_shape),
                    "dtype": w.dtype, "memory_space": w.memory_space,
                    "array_shape": list(w.array_shape), "buffer_count": w.buffer_count,
                }
                for w in self.windows
            ],
            "scalar_prefetch": [[list(s.shape), s.dtype] for s in self.scalar_prefetch],
            "scratch": [[list(s.shape), s.dtype, s.memory_space] for s in self.scratch],
            "body_ops": sorted({op.name for op in self.body_ops()}),
            "vmem_limit_bytes": self.vmem_limit_bytes,
            "unmodelled_ops": list(self.unmodelled_ops),
        }


def _walk(items: Sequence[Any]) -> Iterator[Any]:
    for item in items:
        yield item
        if isinstance(item, Branch):
            yield from _walk(item.then)
            yield from _walk(item.otherwise)
        elif isinstance(item, Loop):
            yield from _walk(item.body)


def _flatten(items: Sequence[Any]) -> Iterator[BodyOp]:
    for item in _walk(items):
        if isinstance(item, BodyOp):
            yield item


@dataclass(frozen=True)
class LoweredProgram:
    """What the parent knows of a candidate: its Mosaic kernels and the XLA ops around them."""

    kernels: list[MosaicKernel]
    outside_ops: list[str]
    outside_custom_calls: list[str] = field(default_factory=list)
    outside_op_bytes: list[tuple[str, int]] = field(default_factory=list)  # operands + results
    input_shapes: list[tuple[tuple[int, ...], str]] = field(default_factory=list)
    output_shapes: list[tuple[tuple[int, ...], str]] = field(default_factory=list)


# --------------------------------------------------------------------------- parsing

_STRUCTURAL = frozenset({
    "builtin.module", "func.func", "func.return", "func.call", "func.call_indirect",
    "stablehlo.return", "mhlo.return",
})


def _ir():
    from jax._src.lib.mlir import ir

    return ir


def _op_name(op: Any) -> str:
    name = op.operation.name
    return name[len(PREFIX):] if name.startswith(PREFIX) else name


def _attr_str(op: Any, name: str) -> str | None:
    attrs = op.operation.attributes
    return str(attrs[name]) if name in attrs else None


def _int_attr(text: str | None) -> int:
    if text is None:
        return 0
    m = re.match(r"\s*(-?\d+)", text)
    if m:
        return int(m.group(1))
    if text.strip() in {"true", "false"}:
        return int(text.strip() == "true")
    raise MosaicError(f"expected an integer attribute, got {text!r}")


def parse_lowered(stablehlo_text: str) -> LoweredProgram:
    """Parse the StableHLO text of a lowered program into its Mosaic kernels.

    Raises `MosaicError` with a message naming the problem when the text is not StableHLO,
    a kernel body cannot be decoded, or an index map uses an op this module cannot evaluate.
    """
    from jax._src.interpreters import mlir as jax_mlir

    ir = _ir()
    ctx = jax_mlir.make_ir_context()
    ctx.allow_unregistered_dialects = True
    try:
        with ctx:
            module = ir.Module.parse(stablehlo_text)
    except Exception as exc:
        raise MosaicError(f"not a readable StableHLO module: {_first_line(exc)}") from None

    kernels: list[MosaicKernel] = []
    outside: list[str] = []
    custom_targets: list[str] = []
    outside_bytes: list[tuple[str, int]] = []
    inputs: list[tuple[tuple[int, ...], str]] = []
    outputs: list[tuple[tuple[int, ...], str]] = []
    with ctx:
        for top in module.body.operations:
            if _op_name(top) == "func.func" and _attr_str(top, "sym_name") == '"main"':
                ftype = ir.FunctionType(ir.TypeAttr(top.operation.attributes["function_type"]).value)
                inputs = [_tensor(t) for t in ftype.inputs]
                outputs = [_tensor(t) for t in ftype.results]
        for op in _all_ops(module.body.operations):
            name = _op_name(op)
            if name == "stablehlo.custom_call":
                target = _attr_str(op, "call_target_name") or ""
                target = target.strip('"')
                if target == "tpu_custom_call":
                    kernels.append(_parse_custom_call(op))
                    continue
                custom_targets.append(target)
            if name not in _STRUCTURAL:
                outside.append(name)
                outside_bytes.append((name, _tensor_bytes(op)))
    return LoweredProgram(kernels, outside, custom_targets, outside_bytes, inputs, outputs)


def _tensor_bytes(op: Any) -> int:
    total = 0
    for v in [*op.operation.operands, *op.operation.results]:
        kind, shape, dtype, _ = _split_shaped(str(v.type))
        if kind == "tensor" and dtype in _BITS:
            total += nbytes(shape, dtype)
    return total


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _tensor(t: Any) -> tuple[tuple[int, ...], str]:
    _, shape, dtype, _ = _split_shaped(str(t))
    return shape, dtype


def _all_ops(ops: Any) -> Iterator[Any]:
    for op in ops:
        yield op
        for region in op.operation.regions:
            for block in region.blocks:
                yield from _all_ops(block.operations)


def _parse_custom_call(op: Any) -> MosaicKernel:
    ir = _ir()
    attrs = op.operation.attributes
    raw = ir.StringAttr(attrs["backend_config"]).value if "backend_config" in attrs else ""
    try:
        config = json.loads(raw)
        body_b64 = config["custom_call_config"]["body"]
        bytecode = base64.b64decode(body_b64)
    except (ValueError, KeyError, TypeError) as exc:
        raise MosaicError(f"tpu_custom_call backend_config is unreadable: {exc}") from None
    vmem_limit = None
    for scoped in config.get("scoped_memory_configs", []) or []:
        if scoped.get("memory_space") == 1:
            vmem_limit = int(scoped["size"])
    operand_types = [_split_shaped(str(v.type)) for v in op.operation.operands]
    result_types = [_split_shaped(str(r.type)) for r in op.operation.results]
    aliases = tuple(
        (int(a), int(b))
        for a, b in re.findall(
            r"output_tuple_indices = \[(\d*)\].*?operand_index = (\d+)",
            _attr_str(op, "output_operand_aliases") or "",
        )
        if a != ""
    )
    kernel_name = (_attr_str(op, "kernel_name") or '"kernel"').strip('"')
    return _parse_mosaic(bytecode, kernel_name, operand_types, result_types, vmem_limit, aliases)


def _parse_mosaic(
    bytecode: bytes,
    kernel_name: str,
    operand_types: list[tuple[str, tuple[int, ...], str, str]],
    result_types: list[tuple[str, tuple[int, ...], str, str]],
    vmem_limit: int | None,
    aliases: tuple[tuple[int, int], ...],
) -> MosaicKernel:
    from jax._src.lib import tpu as tpu_lib

    ir = _ir()
    ctx = ir.Context()
    ctx.allow_unregistered_dialects = True
    tpu_lib.register_dialect(ctx)
    try:
        with ctx:
            module = ir.Module.parse(bytecode)
    except Exception as exc:
        raise MosaicError(f"kernel {kernel_name}: Mosaic body does not parse: {_first_line(exc)}") from None
    with ctx:
        funcs = {}
        main = None
        for fop in module.body.operations:
            if _op_name(fop) != "func.func":
                continue
            sym = (_attr_str(fop, "sym_name") or "").strip('"')
            funcs[sym] = fop
            attrs = fop.operation.attributes
            if "window_params" in attrs or "iteration_bounds" in attrs or "dimension_semantics" in attrs:
                main = fop
        if main is None and len(funcs) == 1:
            main = next(iter(funcs.values()))
        if main is None:
            raise MosaicError(f"kernel {kernel_name}: no kernel func in the Mosaic module")
        return _read_kernel(main, funcs, kernel_name, operand_types, result_types, vmem_limit, aliases)


def _read_kernel(main, funcs, kernel_name, operand_types, result_types, vmem_limit, aliases):
    ir = _ir()
    attrs = main.operation.attributes
    grid = tuple(ir.DenseI64ArrayAttr(attrs["iteration_bounds"])) if "iteration_bounds" in attrs else ()
    sems = tuple(
        re.sub(r".*<(\w+)>.*", r"\1", str(a)) for a in ir.ArrayAttr(attrs["dimension_semantics"])
    ) if "dimension_semantics" in attrs else ()
    n_prefetch = _int_attr(_attr_str(main, "scalar_prefetch"))
    n_scratch = _int_attr(_attr_str(main, "scratch_operands"))
    block = main.operation.regions[0].blocks[0]
    arg_types = [_split_shaped(str(a.type)) for a in block.arguments]
    n_grid = len(grid)
    if "window_params" in attrs:
        wparams = list(ir.ArrayAttr(attrs["window_params"]))
    else:  # no grid, no BlockSpecs: every operand is one whole block
        n_operands = len(arg_types) - n_grid - n_prefetch - n_scratch
        wparams = [None] * n_operands
    n_windows = len(wparams)
    expected = n_grid + n_prefetch + n_windows + n_scratch
    if len(arg_types) != expected:
        raise MosaicError(
            f"kernel {kernel_name}: {len(arg_types)} kernel arguments, expected {expected} "
            f"({n_grid} grid + {n_prefetch} prefetch + {n_windows} windows + {n_scratch} scratch)"
        )
    n_inputs = len(operand_types) - n_prefetch
    arrays = [(t[1], t[2]) for t in operand_types[n_prefetch:]] + [(t[1], t[2]) for t in result_types]
    if len(arrays) != n_windows:
        raise MosaicError(
            f"kernel {kernel_name}: {n_windows} window params for {len(arrays)} operands and results"
        )
    windows: list[Window] = []
    for pos, wattr in enumerate(wparams):
        _, mem_shape, mem_dtype, space = arg_types[n_grid + n_prefetch + pos]
        if wattr is None:
            d: Any = {}
            bounds = mem_shape if space in {"", "vmem", "smem"} else None
        else:
            d = ir.DictAttr(wattr)
            bounds = tuple(ir.DenseI64ArrayAttr(d["window_bounds"])) if "window_bounds" in d else None
        index_map = None
        if "transform_indices" in d:
            sym = ir.FlatSymbolRefAttr(d["transform_indices"]).value
            if sym not in funcs:
                raise MosaicError(f"kernel {kernel_name}: index map @{sym} is missing")
            index_map = _compile_index_map(funcs[sym], sym, n_grid, kernel_name)
        buffers = 2 if wattr is not None else 1  # no grid: nothing to pipeline
        if "pipeline_mode" in d:
            mode = str(d["pipeline_mode"])
            if "synchronous" in mode:
                buffers = 1
            elif "double_buffered" not in mode:
                m = re.search(r"(\d+)", mode)
                buffers = int(m.group(1)) if m else 2
        array_shape, array_dtype = arrays[pos]
        windows.append(Window(
            position=pos,
            role="input" if pos < n_inputs else "output",
            block_shape=bounds,
            dtype=array_dtype if bounds is None else mem_dtype,
            memory_space=space or "vmem",
            array_shape=array_shape,
            buffer_count=buffers,
            index_map=index_map,
        ))
    prefetch = tuple(
        Scratch(t[1], t[2], t[3] or "smem") for t in arg_types[n_grid:n_grid + n_prefetch]
    )
    scratch = tuple(
        Scratch(t[1], t[2], t[3] or "vmem") for t in arg_types[n_grid + n_prefetch + n_windows:]
    )
    reader = _BodyReader(kernel_name, [block.arguments[i] for i in range(n_grid)])
    body = reader.region(block)
    return MosaicKernel(
        name=(_attr_str(main, "sym_name") or kernel_name).strip('"'),
        grid=grid,
        dimension_semantics=sems,
        windows=tuple(windows),
        scalar_prefetch=prefetch,
        scratch=scratch,
        body=body,
        scalar_program=tuple(reader.program),
        n_grid_slots=n_grid,
        vmem_limit_bytes=vmem_limit,
        unmodelled_ops=tuple(sorted(reader.unmodelled)),
        output_operand_aliases=aliases,
    )


def _int_bits(type_text: str) -> int:
    t = type_text.strip()
    if t == "index":
        return 64
    m = re.fullmatch(r"u?i(\d+)", t)
    return int(m.group(1)) if m else 64


def _constant(op: Any) -> Any:
    text = _attr_str(op, "value") or ""
    m = re.fullmatch(r"\s*(-?\d+)\s*(:\s*\w+)?\s*", text)
    if m:
        return np.int64(int(m.group(1)))
    if text.strip() in {"true", "false"}:
        return np.bool_(text.strip() == "true")
    return UNKNOWN  # float or vector constant: not part of index arithmetic


class _Slots:
    def __init__(self) -> None:
        self.ids: dict[Any, int] = {}

    def __call__(self, value: Any) -> int:
        if value not in self.ids:
            self.ids[value] = len(self.ids)
        return self.ids[value]


def _instr(op: Any, name: str, slot: Callable[[Any], int]) -> Instr:
    results = tuple(slot(r) for r in op.operation.results)
    operands = tuple(slot(v) for v in op.operation.operands)
    bits = _int_bits(str(op.operation.results[0].type)) if op.operation.results else 64
    attr: Any = None
    if name == "arith.constant":
        attr = _constant(op)
    elif name == "arith.cmpi":
        attr = _int_attr(_attr_str(op, "predicate"))
    return Instr(name, results, operands, attr, bits)


def _compile_index_map(fop: Any, sym: str, n_grid: int, kernel_name: str) -> IndexMap:
    slot = _Slots()
    block = fop.operation.regions[0].blocks[0]
    n_args = len(block.arguments)
    for arg in block.arguments:
        slot(arg)
    program: list[Instr] = []
    outputs: tuple[int, ...] = ()
    for op in block.operations:
        name = _op_name(op)
        if name not in INDEX_MAP_OPS:
            raise MosaicError(
                f"kernel {kernel_name}: index map @{sym} uses {name}, which the cost model "
                f"cannot evaluate (supported: {', '.join(sorted(INDEX_MAP_OPS))})"
            )
        if op.operation.regions and len(op.operation.regions) > 0 and name != "func.return":
            raise MosaicError(f"kernel {kernel_name}: index map @{sym} has control flow ({name})")
        if name == "func.return":
            outputs = tuple(slot(v) for v in op.operation.operands)
            continue
        program.append(_instr(op, name, slot))
    return IndexMap(sym, n_grid, n_args, tuple(program), outputs)


# ------------------------------------------------------------------------ body reader

_FLOAT_ARITH = frozenset({
    "arith.addf", "arith.subf", "arith.mulf", "arith.divf", "arith.remf", "arith.maximumf",
    "arith.minimumf", "arith.maxnumf", "arith.minnumf", "arith.negf", "math.absf",
    "math.copysign", "math.floor", "math.ceil", "math.round", "math.roundeven", "math.trunc",
    "math.fma", "arith.cmpf",
})
_TRANSCENDENTAL = frozenset({
    "math.exp", "math.exp2", "math.expm1", "math.log", "math.log1p", "math.log2", "math.log10",
    "math.tanh", "math.sin", "math.cos", "math.tan", "math.atan", "math.atan2", "math.sqrt",
    "math.rsqrt", "math.powf", "math.erf", "math.erfc", "math.cbrt", "math.sinh", "math.cosh",
    "math.asin", "math.acos", "math.asinh", "math.acosh", "math.atanh", "tpu.reciprocal",
})
_VPU_OTHER = frozenset({
    "arith.addi", "arith.subi", "arith.muli", "arith.divsi", "arith.divui", "arith.remsi",
    "arith.remui", "arith.andi", "arith.ori", "arith.xori", "arith.shli", "arith.shrsi",
    "arith.shrui", "arith.maxsi", "arith.minsi", "arith.maxui", "arith.minui", "arith.cmpi",
    "arith.select", "arith.extf", "arith.truncf", "arith.sitofp", "arith.fptosi", "arith.uitofp",
    "arith.fptoui", "arith.extsi", "arith.extui", "arith.trunci", "arith.bitcast", "math.absi",
    "arith.floordivsi", "arith.ceildivsi", "tpu.bitcast", "math.ctlz", "math.popcount",
})
_REDUCTIONS = frozenset({"vector.multi_reduction", "vector.reduction", "tpu.all_reduce"})
# Ops that only move or reinterpret data already in vregs/VMEM: no arithmetic modelled.
_FREE = frozenset({
    "arith.constant", "vector.load", "vector.store", "tpu.vector_store", "tpu.load", "tpu.store",
    "vector.broadcast", "vector.shape_cast", "vector.extract", "vector.extract_strided_slice",
    "vector.insert", "vector.insert_strided_slice", "vector.transpose", "tpu.transpose",
    "tpu.memref_slice", "tpu.memref_squeeze", "tpu.memref_reshape", "tpu.memref_bitcast",
    "memref.load", "memref.store", "tpu.iota", "tpu.concatenate", "tpu.repeat", "tpu.roll",
    "tpu.dynamic_rotate", "tpu.rotate", "tpu.wait_dma", "tpu.wait_dma2", "tpu.sem_signal",
    "tpu.sem_wait", "tpu.sem_read", "tpu.sem_barrier", "tpu.trace_start", "tpu.trace_stop",
    "func.return", "scf.yield", "scf.condition", "arith.index_cast", "arith.index_castui",
    "vector.splat", "vector.step", "tpu.broadcast_in_sublanes", "tpu.gather", "tpu.dynamic_gather",
    "tpu.strided_load", "tpu.strided_store", "tpu.shuffled_load", "tpu.shuffled_store",
    "tpu.masked_load", "tpu.vector_load", "tpu.device_id", "tpu.delay", "tpu.iteration_bound",
    "tpu.program_id", "tpu.log", "tpu.assume_multiple", "tpu.erase_memref_layout",
    "vector.create_mask", "vector.constant_mask", "tpu.create_mask", "tpu.create_subelement_mask",
    "tpu.prng_set_seed_32", "tpu.sem_alloc", "tpu.region", "tpu.pack_subelements",
    "tpu.unpack_subelements", "tpu.relayout", "tpu.fptosi", "tpu.sitofp",
})


class _BodyReader:
    """Turn the kernel body into BodyOp/Branch/Loop items plus a scalar program for conditions."""

    def __init__(self, kernel_name: str, grid_args: Sequence[Any]) -> None:
        self.kernel_name = kernel_name
        self.slot = _Slots()
        for arg in grid_args:
            self.slot(arg)
        self.program: list[Instr] = []
        self.unmodelled: set[str] = set()

    def region(self, block: Any) -> tuple[Any, ...]:
        items: list[Any] = []
        for op in block.operations:
            item = self.op(op)
            if item is not None:
                items.append(item)
        return tuple(items)

    def _blocks(self, region: Any) -> tuple[Any, ...]:
        items: list[Any] = []
        for block in region.blocks:
            items.extend(self.region(block))
        return tuple(items)

    def op(self, op: Any) -> Any:
        name = _op_name(op)
        results = op.operation.results
        scalar_int = bool(results) and all(
            _split_shaped(str(r.type))[0] == "scalar"
            and re.fullmatch(r"index|u?i\d+", str(r.type).strip()) is not None
            for r in results
        )
        if name in INDEX_MAP_OPS and name not in {"func.return", "memref.load"} and scalar_int:
            self.program.append(_instr(op, name, self.slot))
            return None
        if name == "scf.if":
            regions = op.operation.regions
            cond = self.slot(op.operation.operands[0])
            then = self._blocks(regions[0])
            otherwise = self._blocks(regions[1]) if len(regions) > 1 else ()
            return Branch(cond, then, otherwise)
        if name == "scf.for":
            operands = list(op.operation.operands)[:3]
            lb, ub, step = (self._const_of(v) for v in operands)
            trips = None
            if lb is not None and ub is not None and step:
                trips = max(0, -(-(ub - lb) // step))
            bounds = tuple(self.slot(v) for v in operands)
            return Loop(trips, self._blocks(op.operation.regions[0]), bounds)  # type: ignore[arg-type]
        if name == "scf.while":
            body: list[Any] = []
            for region in op.operation.regions:
                body.extend(self._blocks(region))
            return Loop(None, tuple(body))
        if name in {"scf.yield", "scf.condition", "func.return"}:
            return None
        if op.operation.regions and name not in {"vector.multi_reduction", "vector.contract"}:
            nested: list[Any] = []
            for region in op.operation.regions:
                nested.extend(self._blocks(region))
            self.unmodelled.add(name)
            return Loop(1, tuple(nested)) if nested else None
        return self._cost(op, name)

    def _const_of(self, value: Any) -> int | None:
        owner = value.owner
        try:
            if _op_name(owner) == "arith.constant":
                c = _constant(owner)
                return None if c is UNKNOWN else int(c)
        except (AttributeError, TypeError, ValueError):
            return None
        return None

    def _cost(self, op: Any, name: str) -> BodyOp | None:
        results = op.operation.results
        shape: tuple[int, ...] = ()
        etype = ""
        if results:
            _, shape, etype, _ = _split_shaped(str(results[0].type))
        elems = math.prod(shape) if shape else 1
        if name in {"tpu.matmul", "vector.contract"}:
            return self._matmul(op, name, shape, etype)
        if name in _FLOAT_ARITH:
            per = 2 if name == "math.fma" else 1
            return BodyOp(name, shape, etype, flops=per * elems, vpu_ops=per * elems)
        if name in _TRANSCENDENTAL:
            return BodyOp(name, shape, etype, transcendentals=elems, vpu_ops=elems)
        if name in _VPU_OTHER:
            return BodyOp(name, shape, etype, vpu_ops=elems)
        if name in _REDUCTIONS:
            src = _split_shaped(str(op.operation.operands[0].type))
            n = math.prod(src[1]) if src[1] else 1
            is_float = src[2].startswith(("float", "bfloat"))
            return BodyOp(name, shape, etype, flops=n if is_float else 0, vpu_ops=n)
        if name == "tpu.enqueue_dma":
            src = _split_shaped(str(op.operation.operands[0].type))
            moved = nbytes(src[1], src[2]) if not src[2].startswith("!") else 0
            return BodyOp(name, src[1], src[2], dma_bytes=moved)
        if name in _FREE:
            return None
        self.unmodelled.add(name)
        return None

    def _matmul(self, op: Any, name: str, shape: tuple[int, ...], etype: str) -> BodyOp:
        lhs = _split_shaped(str(op.operation.operands[0].type))
        rhs = _split_shaped(str(op.operation.operands[1].type))
        dims_text = _attr_str(op, "dimension_numbers")
        if dims_text:
            groups = [
                [int(x) for x in g.split(",") if x.strip()]
                for g in re.findall(r"\[([^\]]*)\]", dims_text)
            ]
            lhs_c, _rhs_c, lhs_nc, rhs_nc = groups[0], groups[1], groups[2], groups[3]
            lhs_b = groups[5] if len(groups) > 5 else []
        else:
            t_lhs = "transpose_lhs = true" in str(op.operation.attributes)
            t_rhs = "transpose_rhs = true" in str(op.operation.attributes)
            nl, nr = len(lhs[1]), len(rhs[1])
            lhs_c = [nl - 2] if t_lhs else [nl - 1]
            lhs_nc = [nl - 1] if t_lhs else [nl - 2]
            rhs_nc = [nr - 2] if t_rhs else [nr - 1]
            lhs_b = list(range(nl - 2))
        k = math.prod(lhs[1][i] for i in lhs_c)
        m = math.prod(lhs[1][i] for i in lhs_nc)
        n = math.prod(rhs[1][i] for i in rhs_nc)
        b = math.prod(lhs[1][i] for i in lhs_b) if lhs_b else 1
        wider = lhs[2] if dtype_bits(lhs[2]) >= dtype_bits(rhs[2]) else rhs[2]
        flops = 2 * b * m * n * k
        return BodyOp(name, shape, etype, flops=flops, matmul=(b, m, n, k), matmul_dtype=wider)


__all__ = [
    "MAX_GRID_STEPS",
    "BodyOp",
    "Branch",
    "IndexMap",
    "Loop",
    "LoweredProgram",
    "MosaicError",
    "MosaicKernel",
    "Scratch",
    "Window",
    "dtype_bits",
    "nbytes",
    "parse_lowered",
]
