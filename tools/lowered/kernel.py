"""The kernel record: what the parent knows of one `pallas_call` and of the whole program."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tools.lowered.scalar import UNKNOWN, IndexMap, Instr, run_with_memory
from tools.lowered.types import MAX_GRID_STEPS, MosaicError, nbytes

PrefetchStep = tuple[str, Any]
"""One layout op between a program argument and a scalar-prefetch operand: ("reshape",
shape), ("transpose", permutation), ("slice", (starts, limits, strides)) or ("convert", dtype)."""
PREFETCH_STEPS = frozenset({"stablehlo.reshape", "stablehlo.transpose", "stablehlo.slice",
                            "stablehlo.convert"})
"""The ops a scalar-prefetch operand may be computed with from an argument and still be known
to the model: a wrapper that flattens or transposes a page table moves values, not makes them."""


def _integer_dtype(name: Any) -> np.dtype | None:
    try:
        dtype = np.dtype(name)
    except TypeError:
        return None
    return dtype if dtype.kind in "biu" else None


def prefetch_value(argument: Any, steps: Sequence[PrefetchStep]) -> np.ndarray | None:
    """The operand `steps` compute from `argument` (a program input's value), or None where a
    step does not apply to it (a convert to or from anything but an integer type)."""
    value = np.asarray(argument)
    for kind, detail in steps:
        if kind == "reshape":
            value = value.reshape(detail)
        elif kind == "transpose":
            value = value.transpose(detail)
        elif kind == "slice":
            starts, limits, strides = detail
            value = value[tuple(slice(a, b, c) for a, b, c in zip(starts, limits, strides, strict=True))]
        elif kind == "convert" and _integer_dtype(detail) is not None and value.dtype.kind in "biu":
            value = value.astype(_integer_dtype(detail))
        else:
            return None
    return value


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
class DmaKey:
    """What a manual DMA start or wait names: its semaphore, source and destination refs.

    Each ref is its root buffer (a kernel argument or a `run_scoped` allocation) and the
    chain of views taken of it (`tpu.memref_slice` with its index operands, squeezes,
    reshapes). `shape` is everything but the index values: roots, view ops, their types;
    `slots` the index operands' slots in the body's scalar program, compared by value at
    the point each op runs (:mod:`tools.performance.dmapair`).
    """

    shape: tuple[Any, ...]
    slots: tuple[int, ...]


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
    dma_wait: bool = False  # a `tpu.wait_dma`: the kernel stops until a DMA lands
    dma_key: DmaKey | None = None  # a start's or wait's (semaphore, src, dst); None: unread
    wait_bytes: int = 0  # bytes the wait's own refs describe (what it waits for, unpaired)
    # Scalar-core work (assumption 4b of tools.performance.roofline).
    scalar_ops: int = 0  # scalar ALU ops (integer and float arithmetic on scalars)
    smem_loads: int = 0  # scalar loads (`memref.load`: SMEM)
    smem_stores: int = 0  # scalar stores (`memref.store`)
    lane_extracts: int = 0  # vector -> scalar moves (`vector.extract` of one element)
    # Cross-lane unit work: (kind, element bits, vregs) of a transpose that moves the lane or
    # sublane axis, or a rotation along lanes (priced by tools.performance.chips)
    xlu: tuple[str, int, float] | None = None


@dataclass(frozen=True)
class VectorValue:
    """A `vector<...>` value the body produces: Mosaic code-generates each vector op whole,
    so all of it is live at once, in vregs while it fits and in VMEM past them."""

    op: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int  # tile-padded as Mosaic lays vectors out in vregs (see BodyReader)


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
    iv: int | None = None  # slot of an `scf.for` induction variable
    # False for a region that runs once in place (`pl.run_scoped`, an unmodelled op's
    # regions): no iteration of its own, no loop overhead.
    iterates: bool = True

    def trips(self, env: dict[int, Any], n: int) -> np.ndarray | None:
        """Trip count at each of `n` steps, or None when it depends on data."""
        if self.trip_count is not None:
            return np.full(n, self.trip_count, dtype=np.int64)
        if self.bounds is None:
            return None
        lb, ub, step = (env.get(slot, UNKNOWN) for slot in self.bounds)
        if lb is UNKNOWN or ub is UNKNOWN or step is UNKNOWN:
            return None
        lb, ub, step = (np.asarray(x, dtype=np.int64) for x in (lb, ub, step))
        if np.any(step <= 0):  # a zero or negative step never ends: not a count
            return None
        trips = np.maximum(0, -((lb - ub) // step))
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
    # Which argument of the program's main function each scalar-prefetch operand is computed
    # from (None: anything else computes it), and whether the body only ever reads those refs.
    prefetch_sources: tuple[int | None, ...] = ()
    # The layout ops that compute each operand from its argument, in order (empty: the
    # argument itself); :func:`prefetch_value` applies them.
    prefetch_steps: tuple[tuple[PrefetchStep, ...], ...] = ()
    prefetch_read_only: bool = True
    # The largest vector value the body produces, scf.for/scf.if regions included.
    largest_value: VectorValue | None = None

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

    def prefetch_memory(self, prefetch: Sequence[np.ndarray] | None) -> dict[int, np.ndarray]:
        """Slot -> value of each scalar-prefetch ref, when the caller knows them and the body
        never writes them (else empty: loads stay unknown)."""
        if prefetch is None or not self.prefetch_read_only:
            return {}
        if len(prefetch) != len(self.scalar_prefetch):
            raise MosaicError(f"kernel {self.name}: {len(prefetch)} scalar-prefetch values for "
                              f"{len(self.scalar_prefetch)} operands")
        return {self.n_grid_slots + i: np.asarray(v) for i, v in enumerate(prefetch)}

    def scalar_env(self, steps: np.ndarray,
                   prefetch: Sequence[np.ndarray] | None = None) -> dict[int, Any]:
        """The body's scalar values at every step; UNKNOWN = data the caller did not supply."""
        slots = {i: steps[i] for i in range(min(self.n_grid_slots, steps.shape[0]))}
        return run_with_memory(self.scalar_program, slots, self.prefetch_memory(prefetch))

    def branch_conditions(self, steps: np.ndarray,
                          prefetch: Sequence[np.ndarray] | None = None,
                          ) -> dict[int, np.ndarray | None]:
        """Each `pl.when` condition's value at every step (None where it depends on data)."""
        env = self.scalar_env(steps, prefetch)
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
            "largest_value": None if self.largest_value is None else {
                "op": self.largest_value.op, "shape": list(self.largest_value.shape),
                "dtype": self.largest_value.dtype, "bytes": self.largest_value.nbytes,
            },
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
    # (kernel, bytes): an aliased kernel operand that is an argument the caller keeps; XLA
    # copies it before the kernel writes into it (`input_output_aliases` without donation).
    alias_copies: list[tuple[str, int]] = field(default_factory=list)


def kernel_prefetch(kernel: MosaicKernel, inputs: Sequence[Any] | None) -> list[Any] | None:
    """The values of `kernel`'s scalar-prefetch operands among the program's `inputs`."""
    if inputs is None or not kernel.scalar_prefetch:
        return None
    found = []
    steps = kernel.prefetch_steps or ((),) * len(kernel.prefetch_sources)
    for source, ops in zip(kernel.prefetch_sources, steps, strict=True):
        if source is None or source >= len(inputs) or inputs[source] is None:
            return None
        value = prefetch_value(inputs[source], ops)
        if value is None:
            return None
        found.append(value)
    return found if len(found) == len(kernel.scalar_prefetch) else None
