"""The kernel body reader: body ops with their costs, `pl.when` branches and loops."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from tools.lowered.kernel import BodyOp, Branch, DmaKey, Loop, VectorValue
from tools.lowered.ops import Slots, attr_str, constant_value, instr, int_attr, op_name
from tools.lowered.scalar import INDEX_MAP_OPS, UNKNOWN, Instr
from tools.lowered.types import (
    VREG_BYTES,
    XLU_BITS,
    MosaicError,
    cross_lane_kind,
    cross_lane_vregs,
    dtype_bits,
    nbytes,
    split_shaped,
    tile_padded_bytes,
)

# Results that need not be held whole: splats, broadcasts, iotas and masks repeat one
# vreg's worth of data (Mosaic makes them a vreg at a time where they are used), and a load
# (or a reshape of one) copies bytes already in a VMEM buffer, which can be re-read.
_NOT_HELD = frozenset({
    "arith.constant", "vector.broadcast", "vector.splat", "vector.step", "tpu.iota",
    "tpu.broadcast_in_sublanes", "vector.create_mask", "vector.constant_mask",
    "tpu.create_mask", "tpu.create_subelement_mask",
    "vector.load", "tpu.load", "tpu.vector_load", "tpu.strided_load", "tpu.masked_load",
    "tpu.shuffled_load", "vector.shape_cast",
})

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
    "vector.insert", "vector.insert_strided_slice",
    "tpu.memref_slice", "tpu.memref_squeeze", "tpu.memref_reshape", "tpu.memref_bitcast",
    "memref.load", "memref.store", "tpu.iota", "tpu.concatenate", "tpu.repeat",
    "tpu.sem_signal",
    "tpu.sem_wait", "tpu.sem_read", "tpu.sem_barrier", "tpu.trace_start", "tpu.trace_stop",
    "func.return", "scf.yield", "scf.condition", "arith.index_cast", "arith.index_castui",
    "vector.splat", "vector.step", "tpu.broadcast_in_sublanes", "tpu.gather", "tpu.dynamic_gather",
    "tpu.strided_load", "tpu.strided_store", "tpu.shuffled_load", "tpu.shuffled_store",
    "tpu.masked_load", "tpu.vector_load", "tpu.device_id", "tpu.delay", "tpu.iteration_bound",
    "tpu.program_id", "tpu.log", "tpu.assume_multiple", "tpu.erase_memref_layout",
    "vector.create_mask", "vector.constant_mask", "tpu.create_mask", "tpu.create_subelement_mask",
    "tpu.prng_set_seed_32", "tpu.sem_alloc", "tpu.region", "tpu.pack_subelements",
    "tpu.unpack_subelements", "tpu.relayout", "tpu.fptosi", "tpu.sitofp",
    "memref.alloca",  # scratch of a `pl.run_scoped` region: an allocation, no work
})
# Data movement on the cross-lane unit (assumption 4 of tools.performance.roofline).
_TRANSPOSES = frozenset({"vector.transpose", "tpu.transpose"})
_ROTATES = frozenset({"tpu.roll", "tpu.dynamic_rotate", "tpu.rotate"})
_MATMULS = frozenset({"tpu.matmul", "vector.contract"})


def _feeds_only_matmuls(op: Any) -> bool:
    """A transpose whose every reader is a matmul: the compiler folds it into the MXU's
    operand, at the per-chip cost `x @ w.T` has over `x @ w` (`benchmarks/xlu.py`)."""
    uses = list(op.operation.results[0].uses)
    return bool(uses) and all(
        hasattr(use.owner, "name") and op_name(use.owner) in _MATMULS for use in uses)


# Views of a ref: a DMA's source, destination or semaphore is its root through these.
_VIEWS = frozenset({
    "tpu.memref_slice", "tpu.memref_squeeze", "tpu.memref_reshape", "tpu.memref_bitcast",
    "tpu.erase_memref_layout", "memref.subview", "memref.reinterpret_cast",
})
_EXTRACTS = frozenset({"vector.extract", "vector.extractelement"})


def _segments(op: Any) -> list[list[Any]] | None:
    """The op's operands grouped by `operandSegmentSizes` (None when it has none)."""
    text = attr_str(op, "operandSegmentSizes") or ""
    sizes = [int(x) for x in re.findall(r"\d+", text.split(":", 1)[-1])] if text else []
    operands = list(op.operation.operands)
    if not sizes or sum(sizes) != len(operands):
        return None
    groups, at = [], 0
    for size in sizes:
        groups.append(operands[at:at + size])
        at += size
    return groups


class BodyReader:
    """Turn the kernel body into BodyOp/Branch/Loop items plus a scalar program for conditions."""

    def __init__(self, kernel_name: str, grid_args: Sequence[Any],
                 prefetch_args: Sequence[Any] = ()) -> None:
        self.kernel_name = kernel_name
        self.slot = Slots()
        for arg in [*grid_args, *prefetch_args]:  # slots 0.. grid, then the prefetch refs
            self.slot(arg)
        self._prefetch = list(prefetch_args)
        self.program: list[Instr] = []
        self.unmodelled: set[str] = set()
        # Whether the kernel does anything to its scalar-prefetch refs but read them with
        # `memref.load`: a store (or a view that could be stored through) would make the
        # values it reads differ from the operands it was given.
        self.prefetch_written = False
        self.largest: VectorValue | None = None

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
        name = op_name(op)
        results = op.operation.results
        for r in results:
            self._note_value(name, str(r.type))
        if self._prefetch and name != "memref.load" and any(
            v in self._prefetch for v in op.operation.operands
        ):
            self.prefetch_written = True
        scalar_int = bool(results) and all(
            split_shaped(str(r.type))[0] == "scalar"
            and re.fullmatch(r"index|u?i\d+", str(r.type).strip()) is not None
            for r in results
        )
        if name in INDEX_MAP_OPS and name != "func.return" and scalar_int:
            self.program.append(instr(op, name, self.slot))
            if name == "arith.constant":
                return None  # an immediate
            if name == "memref.load":
                return BodyOp(name, (), "", smem_loads=1)
            return BodyOp(name, (), "", scalar_ops=1)
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
            unsigned_cmp = "unsignedCmp" in str(op.operation.attributes)
            if lb is not None and ub is not None and step is not None and step > 0 and not unsigned_cmp:
                trips = max(0, -(-(ub - lb) // step))
            bounds = None if unsigned_cmp else tuple(self.slot(v) for v in operands)
            region = op.operation.regions[0]
            iv = self.slot(region.blocks[0].arguments[0]) if region.blocks[0].arguments else None
            return Loop(trips, self._blocks(region), bounds, iv)  # type: ignore[arg-type]
        if name == "scf.while":
            body: list[Any] = []
            for region in op.operation.regions:
                body.extend(self._blocks(region))
            return Loop(None, tuple(body))
        if name in {"scf.yield", "scf.condition", "func.return", "tpu.yield"}:
            return None
        if name == "tpu.region":  # `pl.run_scoped`: its body runs once, in place
            return Loop(1, self._blocks(op.operation.regions[0]), iterates=False)
        if op.operation.regions and name not in {"vector.multi_reduction", "vector.contract"}:
            nested: list[Any] = []
            for region in op.operation.regions:
                nested.extend(self._blocks(region))
            self.unmodelled.add(name)
            return Loop(1, tuple(nested), iterates=False) if nested else None
        return self._cost(op, name)

    def _note_value(self, name: str, type_text: str) -> None:
        """Keep the largest `vector<...>` result (scalars, memrefs and indices live elsewhere)."""
        if name in _NOT_HELD or not type_text.lstrip().startswith("vector<"):
            return
        try:
            _, shape, etype, _ = split_shaped(type_text)
            if len(shape) >= 2:  # (8 x packing, 128) tiles of the last two dims
                size = tile_padded_bytes(shape, etype)
            else:  # a 1-D vector fills whole vregs densely: no row padding
                size = -(-nbytes(shape, etype) // VREG_BYTES) * VREG_BYTES
        except MosaicError:  # a dynamic dim or an element type of unknown width: not counted
            return
        if self.largest is None or size > self.largest.nbytes:
            self.largest = VectorValue(name, shape, etype, size)

    def _const_of(self, value: Any) -> int | None:
        owner = value.owner
        try:
            if op_name(owner) == "arith.constant":
                c = constant_value(owner)
                return None if c is UNKNOWN else int(c)
        except (AttributeError, TypeError, ValueError):
            return None
        return None

    def _cost(self, op: Any, name: str) -> BodyOp | None:
        results = op.operation.results
        shape: tuple[int, ...] = ()
        etype = ""
        if results:
            _, shape, etype, _ = split_shaped(str(results[0].type))
        elems = math.prod(shape) if shape else 1
        if name in {"tpu.matmul", "vector.contract"}:
            return self._matmul(op, name, shape, etype)
        scalar = bool(results) and split_shaped(str(results[0].type))[0] == "scalar"
        if scalar and (name in _FLOAT_ARITH or name in _VPU_OTHER):
            return BodyOp(name, (), etype, flops=int(name in _FLOAT_ARITH), scalar_ops=1)
        if name == "memref.load":
            return BodyOp(name, (), etype, smem_loads=1)
        if name == "memref.store":
            return BodyOp(name, (), "", smem_stores=1)
        if name in _EXTRACTS and scalar:
            return BodyOp(name, (), etype, lane_extracts=1)
        if name in _FLOAT_ARITH:
            per = 2 if name == "math.fma" else 1
            return BodyOp(name, shape, etype, flops=per * elems, vpu_ops=per * elems)
        if name in _TRANSCENDENTAL:
            return BodyOp(name, shape, etype, transcendentals=elems, vpu_ops=elems)
        if name in _VPU_OTHER:
            return BodyOp(name, shape, etype, vpu_ops=elems)
        if name in _REDUCTIONS:
            src = split_shaped(str(op.operation.operands[0].type))
            n = math.prod(src[1]) if src[1] else 1
            is_float = src[2].startswith(("float", "bfloat"))
            # A reduction to a scalar ends in the scalar unit: a vector -> scalar move.
            return BodyOp(name, shape, etype, flops=n if is_float else 0, vpu_ops=n,
                          lane_extracts=int(scalar))
        if name == "tpu.enqueue_dma":
            src = split_shaped(str(op.operation.operands[0].type))
            moved = nbytes(src[1], src[2]) if not src[2].startswith("!") else 0
            return BodyOp(name, src[1], src[2], dma_bytes=moved, dma_key=self._dma_key(op, name))
        if name in {"tpu.wait_dma", "tpu.wait_dma2"}:
            # No work of its own: it orders the DMAs (priced by tools.performance.dmapair).
            ref = split_shaped(str(op.operation.operands[-1 if name == "tpu.wait_dma" else 1].type))
            size = nbytes(ref[1], ref[2]) if not ref[2].startswith("!") else 0
            return BodyOp(name, (), "", dma_wait=True, dma_key=self._dma_key(op, name),
                          wait_bytes=size)
        if name in _TRANSPOSES or name in _ROTATES:
            return self._cross_lane(op, name, shape, etype)
        if name in _FREE:
            return None
        self.unmodelled.add(name)
        return None

    def _cross_lane(self, op: Any, name: str, shape: tuple[int, ...],
                    etype: str) -> BodyOp | None:
        """A transpose or rotation: cross-lane unit work where it moves data between lanes
        or sublanes, else a renaming of vregs (free, like a copy). An axis or width the
        compiler's figures do not cover leaves the op unpriced (the estimate unsound)."""
        source = split_shaped(str(op.operation.operands[0].type))
        rank = len(source[1])
        if name in _TRANSPOSES:
            text = attr_str(op, "permutation") or ""  # array<i64: 1, 0>
            perm = [int(p) for p in re.findall(r"-?\d+", text.partition(":")[2])]
            if len(perm) != rank:
                self.unmodelled.add(f"{name} (permutation unread)")
                return None
            kind = cross_lane_kind(range(rank), perm)
            if kind and _feeds_only_matmuls(op):
                kind = "into_matmul"
        else:
            text = attr_str(op, "dimension")
            try:
                axis = None if text is None else int_attr(text)
            except MosaicError:
                axis = None
            if axis is None:
                self.unmodelled.add(f"{name} (axis unread)")
                return None
            kind = "rotate" if axis % max(rank, 1) == rank - 1 else ""
        if not kind:
            return None
        bits = dtype_bits(etype) if etype else 0
        if bits not in XLU_BITS:
            self.unmodelled.add(f"{name} of {bits}-bit elements")
            return None
        return BodyOp(name, shape, etype,
                      xlu=(kind, bits, cross_lane_vregs(source[1], shape, etype)))

    def _dma_key(self, op: Any, name: str) -> DmaKey | None:
        """(semaphore, source, destination) of a start or a `wait_dma2`; None when the op
        does not name all three (the old `tpu.wait_dma`, an unreadable segment layout)."""
        groups = _segments(op)
        if groups is None:
            return None
        if name == "tpu.enqueue_dma" and len(groups) >= 4 and all(len(groups[i]) == 1
                                                                  for i in (0, 2, 3)):
            refs = [groups[3][0], groups[0][0], groups[2][0]]
            extra = [v for g in groups[4:] for v in g]
        elif name == "tpu.wait_dma2" and len(groups) >= 3 and all(len(g) == 1 for g in groups[:3]):
            refs = [groups[0][0], groups[1][0], groups[2][0]]
            extra = [v for g in groups[3:] for v in g]
        else:
            return None
        shape: list[Any] = []
        slots: list[int] = []
        for ref in refs:
            shape.append(self._view_chain(ref, slots))
        shape.append(len(extra))
        slots.extend(self.slot(v) for v in extra)  # device and core ids, when remote
        return DmaKey(tuple(shape), tuple(slots))

    def _view_chain(self, value: Any, slots: list[int]) -> tuple[Any, ...]:
        """The ref's root slot and the views taken of it (index operands go to `slots`)."""
        chain: list[Any] = []
        for _ in range(64):
            owner = value.owner
            try:
                view = op_name(owner) if hasattr(owner, "operation") else ""
            except AttributeError:
                view = ""
            if view not in _VIEWS:
                break
            operands = list(owner.operation.operands)
            chain.append((view, str(value.type), len(operands) - 1))
            slots.extend(self.slot(v) for v in reversed(operands[1:]))
            value = operands[0]
        return ("root", self.slot(value), str(value.type), tuple(chain))

    def _matmul(self, op: Any, name: str, shape: tuple[int, ...], etype: str) -> BodyOp:
        lhs = split_shaped(str(op.operation.operands[0].type))
        rhs = split_shaped(str(op.operation.operands[1].type))
        dims_text = attr_str(op, "dimension_numbers")
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
