"""Parse a lowered program's Mosaic kernels from its StableHLO text, without the candidate's code.

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
import dataclasses
import json
import re
from collections.abc import Iterator
from typing import Any

from tools import jaxprivate
from tools.lowered.body import BodyReader
from tools.lowered.kernel import (
    PREFETCH_STEPS,
    LoweredProgram,
    MosaicKernel,
    PrefetchStep,
    Scratch,
    Window,
)
from tools.lowered.ops import Slots, attr_str, first_line, instr, int_attr, ir_module, op_name
from tools.lowered.scalar import INDEX_MAP_OPS, IndexMap, Instr
from tools.lowered.types import DTYPE_BITS, MosaicError, nbytes, split_shaped

_STRUCTURAL = frozenset({
    "builtin.module", "func.func", "func.return", "func.call", "func.call_indirect",
    "stablehlo.return", "mhlo.return",
})

def parse_lowered(stablehlo_text: str) -> LoweredProgram:
    """Parse the StableHLO text of a lowered program into its Mosaic kernels.

    Raises `MosaicError` with a message naming the problem when the text is not StableHLO,
    a kernel body cannot be decoded, or an index map uses an op this module cannot evaluate.
    """
    ir = ir_module()
    ctx = jaxprivate.jax_mlir().make_ir_context()
    ctx.allow_unregistered_dialects = True
    try:
        with ctx:
            module = ir.Module.parse(stablehlo_text)
    except Exception as exc:
        raise MosaicError(f"not a readable StableHLO module: {first_line(exc)}") from None

    kernels: list[MosaicKernel] = []
    outside: list[str] = []
    custom_targets: list[str] = []
    outside_bytes: list[tuple[str, int]] = []
    inputs: list[tuple[tuple[int, ...], str]] = []
    outputs: list[tuple[tuple[int, ...], str]] = []
    donated: set[int] = set()
    alias_copies: list[tuple[str, int]] = []
    with ctx:
        for top in module.body.operations:
            if op_name(top) == "func.func" and attr_str(top, "sym_name") == '"main"':
                ftype = ir.FunctionType(ir.TypeAttr(top.operation.attributes["function_type"]).value)
                inputs = [_tensor(t) for t in ftype.inputs]
                outputs = [_tensor(t) for t in ftype.results]
                donated = _donated_arguments(top)
        sources = _ArgumentSources(module.body.operations)
        cancelled = _cancelled_transposes(module.body.operations)
        for op in _all_ops(module.body.operations):
            name = op_name(op)
            if name == "stablehlo.custom_call":
                target = attr_str(op, "call_target_name") or ""
                target = target.strip('"')
                if target == "tpu_custom_call":
                    kernel = _parse_custom_call(op)
                    n_prefetch = len(kernel.scalar_prefetch)
                    operands = list(op.operation.operands)
                    derived = [sources.derived(v) for v in operands[:n_prefetch]]
                    kernels.append(dataclasses.replace(
                        kernel, prefetch_sources=tuple(d and d[0] for d in derived),
                        prefetch_steps=tuple(d[1] if d else () for d in derived)))
                    for _, operand in kernel.output_operand_aliases:
                        # A caller's buffer the program was not given to keep: XLA copies it
                        # before the kernel writes into it.
                        arg = sources.of(operands[operand]) if operand < len(operands) else None
                        if arg is not None and arg not in donated:
                            alias_copies.append((kernel.name, _value_bytes(operands[operand])))
                    continue
                custom_targets.append(target)
            if name not in _STRUCTURAL:
                outside.append(name)
                if op not in cancelled:
                    outside_bytes.append((name, _tensor_bytes(op)))
    return LoweredProgram(kernels, outside, custom_targets, outside_bytes, inputs, outputs,
                          alias_copies)


def _donated_arguments(main: Any) -> set[int]:
    """Arguments of `main` the caller gave up (`donate_argnums`): XLA may write into them."""
    ir = ir_module()
    if "arg_attrs" not in main.operation.attributes:
        return set()
    attrs = ir.ArrayAttr(main.operation.attributes["arg_attrs"])
    return {i for i, a in enumerate(attrs)
            if "tf.aliasing_output" in str(a) or "jax.buffer_donor" in str(a)}


def _value_bytes(value: Any) -> int:
    kind, shape, dtype, _ = split_shaped(str(value.type))
    return nbytes(shape, dtype) if kind == "tensor" and dtype in DTYPE_BITS else 0


def _i64_array(op: Any, key: str) -> list[int]:
    text = attr_str(op, key) or ""
    return [int(x) for x in re.findall(r"-?\d+", text.split(":")[-1] if "array<" in text else text)]


def _permutation(op: Any) -> list[int]:
    return _i64_array(op, "permutation")


def _cancelled_transposes(top_ops: Any) -> list[Any]:
    """Transposes XLA's optimiser removes: a transpose of a transpose that together are the
    identity is free, and so is the inner one when nothing else reads it. (The lowered
    program is the unoptimised one; without a TPU compiler this is the layout
    simplification the model reproduces.)"""
    cancelled: list[Any] = []
    for op in _all_ops(top_ops):
        if op_name(op) != "stablehlo.transpose":
            continue
        source = op.operation.operands[0].owner
        if not hasattr(source, "name") or op_name(source) != "stablehlo.transpose":
            continue
        inner, outer = _permutation(source), _permutation(op)
        if len(inner) != len(outer) or [inner[p] for p in outer] != list(range(len(inner))):
            continue
        cancelled.append(op)
        if len(list(source.operation.results[0].uses)) == 1:
            cancelled.append(source)
    return cancelled


class _ArgumentSources:
    """Which argument of `main` a value is, through `func.call`s to private functions."""

    def __init__(self, top_ops: Any) -> None:
        self.calls: dict[str, list[Any]] = {}
        for top in top_ops:
            if op_name(top) != "func.func":
                continue
            for op in _all_ops([top]):
                if op_name(op) == "func.call":
                    callee = (attr_str(op, "callee") or "").strip().lstrip("@").strip('"')
                    self.calls.setdefault(callee, []).append(op)

    def derived(self, value: Any, depth: int = 0) -> tuple[int, tuple[PrefetchStep, ...]] | None:
        """Which argument of `main` `value` is computed from, and the layout ops that compute
        it (reshapes, transposes, slices, converts: see :data:`PREFETCH_STEPS`), in order; None
        where anything else computes it."""
        ir = ir_module()
        if depth > 32:
            return None
        if isinstance(value, ir.BlockArgument):
            owner = value.owner.owner
            if op_name(owner) != "func.func":
                return None
            sym = (attr_str(owner, "sym_name") or "").strip('"')
            if sym == "main":
                return int(value.arg_number), ()
            sites = self.calls.get(sym, [])
            if len(sites) != 1:  # called from several places: not one argument of main
                return None
            return self.derived(sites[0].operation.operands[value.arg_number], depth + 1)
        if not isinstance(value, ir.OpResult):
            return None
        op = value.owner
        name = op_name(op)
        if name not in PREFETCH_STEPS or len(op.operation.operands) != 1:
            return None
        shape, dtype = _tensor(value.type)
        if name == "stablehlo.reshape":
            step: PrefetchStep = ("reshape", tuple(shape))
        elif name == "stablehlo.convert":
            step = ("convert", dtype)
        elif name == "stablehlo.transpose":
            step = ("transpose", tuple(_permutation(op)))
        else:
            step = ("slice", tuple(tuple(_i64_array(op, key)) for key in
                                   ("start_indices", "limit_indices", "strides")))
        inner = self.derived(op.operation.operands[0], depth + 1)
        return None if inner is None else (inner[0], (*inner[1], step))

    def of(self, value: Any) -> int | None:
        """Which argument of `main` `value` is itself (through calls), with no op between."""
        found = self.derived(value)
        return found[0] if found is not None and not found[1] else None


def _tensor_bytes(op: Any) -> int:
    total = 0
    for v in [*op.operation.operands, *op.operation.results]:
        kind, shape, dtype, _ = split_shaped(str(v.type))
        if kind == "tensor" and dtype in DTYPE_BITS:
            total += nbytes(shape, dtype)
    return total



def _tensor(t: Any) -> tuple[tuple[int, ...], str]:
    _, shape, dtype, _ = split_shaped(str(t))
    return shape, dtype


def _all_ops(ops: Any) -> Iterator[Any]:
    for op in ops:
        yield op
        for region in op.operation.regions:
            for block in region.blocks:
                yield from _all_ops(block.operations)


def _parse_custom_call(op: Any) -> MosaicKernel:
    ir = ir_module()
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
    operand_types = [split_shaped(str(v.type)) for v in op.operation.operands]
    result_types = [split_shaped(str(r.type)) for r in op.operation.results]
    aliases = tuple(  # no tuple index: the call's one result
        (int(a or 0), int(b))
        for a, b in re.findall(
            r"output_tuple_indices = \[(\d*)\].*?operand_index = (\d+)",
            attr_str(op, "output_operand_aliases") or "",
        )
    )
    kernel_name = (attr_str(op, "kernel_name") or '"kernel"').strip('"')
    return _parse_mosaic(bytecode, kernel_name, operand_types, result_types, vmem_limit, aliases)


def parse_mosaic(body: bytes, kernel_name: str,
                 operand_types: list[tuple[str, tuple[int, ...], str, str]],
                 result_types: list[tuple[str, tuple[int, ...], str, str]],
                 vmem_limit: int | None) -> MosaicKernel:
    """A Mosaic kernel from its MLIR (bytecode, or the text XLA:TPU's own kernels carry) and
    its call's operand and result types (:func:`tools.lowered.types.split_shaped` form)."""
    return _parse_mosaic(body, kernel_name, operand_types, result_types, vmem_limit, ())


def _parse_mosaic(
    bytecode: bytes,
    kernel_name: str,
    operand_types: list[tuple[str, tuple[int, ...], str, str]],
    result_types: list[tuple[str, tuple[int, ...], str, str]],
    vmem_limit: int | None,
    aliases: tuple[tuple[int, int], ...],
) -> MosaicKernel:
    ir = ir_module()
    ctx = ir.Context()
    ctx.allow_unregistered_dialects = True
    jaxprivate.tpu_dialect().register_dialect(ctx)
    try:
        with ctx:
            module = ir.Module.parse(bytecode)
    except Exception as exc:
        raise MosaicError(f"kernel {kernel_name}: Mosaic body does not parse: {first_line(exc)}") from None
    with ctx:
        funcs = {}
        main = None
        for fop in module.body.operations:
            if op_name(fop) != "func.func":
                continue
            sym = (attr_str(fop, "sym_name") or "").strip('"')
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
    ir = ir_module()
    attrs = main.operation.attributes
    grid = tuple(ir.DenseI64ArrayAttr(attrs["iteration_bounds"])) if "iteration_bounds" in attrs else ()
    dynamic = [axis for axis, bound in enumerate(grid) if bound < 0]
    if dynamic:  # Mosaic's dynamic-grid sentinel: the bound is an operand, known at run time only
        raise MosaicError(
            f"kernel {kernel_name}: grid axis {', '.join(map(str, dynamic))} has a bound read "
            "from an operand at run time (a data-dependent trip count): its work cannot be "
            "counted")
    sems = tuple(
        re.sub(r".*<(\w+)>.*", r"\1", str(a)) for a in ir.ArrayAttr(attrs["dimension_semantics"])
    ) if "dimension_semantics" in attrs else ()
    n_prefetch = int_attr(attr_str(main, "scalar_prefetch"))
    n_scratch = int_attr(attr_str(main, "scratch_operands"))
    block = main.operation.regions[0].blocks[0]
    arg_types = [split_shaped(str(a.type)) for a in block.arguments]
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
    reader = BodyReader(kernel_name, [block.arguments[i] for i in range(n_grid)],
                        [block.arguments[i] for i in range(n_grid, n_grid + n_prefetch)])
    body = reader.region(block)
    return MosaicKernel(
        name=(attr_str(main, "sym_name") or kernel_name).strip('"'),
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
        prefetch_read_only=not reader.prefetch_written,
        largest_value=reader.largest,
    )


def _compile_index_map(fop: Any, sym: str, n_grid: int, kernel_name: str) -> IndexMap:
    slot = Slots()
    block = fop.operation.regions[0].blocks[0]
    n_args = len(block.arguments)
    for arg in block.arguments:
        slot(arg)
    program: list[Instr] = []
    outputs: tuple[int, ...] = ()
    for op in block.operations:
        name = op_name(op)
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
        program.append(instr(op, name, slot))
    return IndexMap(sym, n_grid, n_args, tuple(program), outputs)
