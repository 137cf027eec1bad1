"""Row-block kernels (elementwise, row-wise reductions, any row-independent op) and the
single-block kernel: the reference's own jaxpr runs inside the kernel on a block.

Each grid step owns `block_rows` whole rows of every row-shaped input and output, so
reductions over the other axes stay in VMEM; inputs without a row axis (weights, biases)
are one block fetched once. The grid is `pl.cdiv(rows, block_rows)` and `parallel`: the
last block may hang past the end, and its extra rows are computed and dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agents.llm.offline import topk_source
from agents.llm.offline.classify import TaskFacts
from agents.llm.offline.common import (
    LANES,
    SUBLANES,
    aligned_tunables,
    dim_check_source,
    dims_expr,
    header,
    pow2_floor,
    round_down,
    scoped_vmem,
    sublane_tile,
    tunables_literal,
)
from agents.llm.offline.jaxpr_readable import divisions_as
from agents.llm.offline.jaxpr_source import NARY_HELPER
from agents.llm.offline.levers import deepest_buffering

DEFAULT_HBM_BYTES_PER_S = 1.64e12  # v6e, when the request's chip figures leave it out
DEFAULT_STEP_OVERHEAD_S = 0.35e-6


def row_bytes(facts: TaskFacts) -> int:
    """Bytes one row of every row-shaped input and output occupies."""
    row_in = facts.detail.get("row_inputs", [])
    total = sum(a.nbytes // max(a.shape[0], 1) for a, r in zip(facts.args, row_in, strict=True) if r)
    for shape, (_, dtype) in zip(facts.out_shapes, facts.outs, strict=True):
        total += math.prod(shape[1:]) * np.dtype(dtype).itemsize
    return max(total, 1)


def row_align(facts: TaskFacts) -> int:
    """1-D row arrays put rows on lanes (x128); in a 2-D row array rows are sublanes (x8 for
    32-bit, x16 for 16-bit, x32 for 8-bit dtypes); in more axes rows are a leading dim (x8)."""
    row_in = facts.detail.get("row_inputs", [])
    arrays = [(len(a.shape), a.dtype) for a, r in zip(facts.args, row_in, strict=True) if r]
    arrays += [(len(s), dtype) for s, (_, dtype) in zip(facts.out_shapes, facts.outs, strict=True)]
    if any(ndim == 1 for ndim, _ in arrays):
        return LANES
    return sublane_tile([dtype for ndim, dtype in arrays if ndim == 2] or ["float32"])


def pipeline_steps(io_bytes: int, chip: dict[str, Any] | None) -> int:
    """Steps that balance the exposed first fetch and last write-back (total DMA time / n)
    against the fixed per-step cost (n x overhead): n = sqrt(DMA time / overhead)."""
    chip = chip or {}
    bandwidth = float(chip.get("hbm_bytes_per_s") or DEFAULT_HBM_BYTES_PER_S)
    overhead = float(chip.get("per_step_overhead_s") or DEFAULT_STEP_OVERHEAD_S)
    return min(16, max(2, math.ceil(math.sqrt(io_bytes / bandwidth / overhead))))


def default_block_rows(facts: TaskFacts, chip: dict[str, Any] | None,
                       max_block_bytes: int = 8 * 1024 * 1024) -> int:
    """Rows per step: about `pipeline_steps` steps, each block at most `max_block_bytes` per
    row array, all double-buffered blocks within half the scoped VMEM."""
    rows = facts.dim_values[facts.detail["row"]]
    per_row = row_bytes(facts)
    fixed = sum(a.nbytes for a, r in zip(facts.args, facts.detail["row_inputs"], strict=True) if not r)
    budget = max(scoped_vmem(chip) // 2 - 2 * fixed, per_row * SUBLANES * 2)
    by_vmem = budget // (2 * per_row)
    by_block = max_block_bytes // max(per_row // max(len(facts.outs), 1), 1)
    by_steps = math.ceil(rows / pipeline_steps(facts.io_bytes, chip))
    align = row_align(facts)
    block = min(by_vmem, by_block, max(by_steps, align))
    return max(align, round_down(pow2_floor(block), align))


def rows_tunables(default: int, align: int) -> dict[str, list[int]]:
    values = [default]
    for v in (default // 2, default * 2, default // 4, default * 4):
        if v >= align and v % align == 0 and v not in values:
            values.append(v)
    return {"block_rows": values[:4]}


_WHOLE_KERNEL = '''

def _kernel(*refs, dims, n_in, sub_rows):
    """One block of whole rows: the reference's ops on the block in VMEM."""
    del sub_rows
    values = [ref[...] for ref in refs[:n_in]]
    outs = _body(*values, **dims)
    for ref, value in zip(refs[n_in:], outs, strict=True):
        ref[...] = value.astype(ref.dtype)
'''

_NARROW_KERNEL = '''

def _kernel(*refs, dims, n_in, sub_rows):
    """One block of whole rows: the reference's ops on the block in VMEM; narrow arrays come
    and go as (width, rows) blocks, transposed in VMEM."""
    del sub_rows
    values = [ref[...].T if t else ref[...] for ref, t in zip(refs[:n_in], _IN_T, strict=True)]
    outs = _body(*values, **dims)
    for ref, value, t in zip(refs[n_in:], outs, _OUT_T, strict=True):
        ref[...] = (value.T if t else value).astype(ref.dtype)
'''

_SUB_TILE_KERNEL = '''

def _kernel(*refs, dims, n_in, sub_rows):
    """One block of whole rows in `sub_rows` sub-tiles, so live values stay in vregs."""
    in_refs, out_refs = refs[:n_in], refs[n_in:]
    rows = out_refs[0].shape[0] // sub_rows
    sub_dims = {**dims, _ROW: rows}

    def _sub_tile(s, carry):
        r = pl.multiple_of(s * rows, rows)
        values = [ref[pl.ds(r, rows)] if is_row else ref[...]
                  for ref, is_row in zip(in_refs, _ROW_INPUTS, strict=True)]
        outs = _body(*values, **sub_dims)
        for ref, value in zip(out_refs, outs, strict=True):
            ref[pl.ds(r, rows)] = value.astype(ref.dtype)
        return carry

    lax.fori_loop(0, sub_rows, _sub_tile, 0, unroll=True)
'''

_RECIPROCAL_DIV = '''

def _div(x, y):
    """x / y as one reciprocal per element of the smaller (broadcast) divisor and a multiply."""
    if jnp.issubdtype(jnp.result_type(x, y), jnp.floating) and jnp.size(y) < jnp.size(x):
        return x * (1.0 / jnp.asarray(y)).astype(jnp.result_type(x, y))
    return x / y
'''

_ROW_WRAPPER = '''

def _row_spec(shape, block_rows, buffers):
    rest = (0,) * (len(shape) - 1)
    if buffers == 2:
        return pl.BlockSpec((block_rows, *shape[1:]), lambda i: (i, *rest))
    return pl.BlockSpec((block_rows, *shape[1:]), lambda i: (i, *rest), pipeline_mode=pl.Buffered(buffers))


%LANE_SPEC%def _whole_spec(shape):
    zeros = (0,) * len(shape)
    if SINGLE_BUFFER_WHOLE:  # the block never moves: one buffer
        return pl.BlockSpec(tuple(shape), lambda i: zeros, pipeline_mode=pl.Buffered(1))
    return pl.BlockSpec(tuple(shape), lambda i: zeros)


@functools.partial(jax.jit, static_argnames=("block_rows", "buffers", "sub_rows"))
def %NAME%(%ARGS%, *, block_rows: int = %DEFAULT%, buffers: int = %BUFFERS%, sub_rows: int = %SUB_ROWS%):
%CHECKS%
    rows = dims[_ROW]
    if block_rows % _ROW_ALIGN:
        raise ValueError(f"{block_rows=} must be a multiple of {_ROW_ALIGN}")
    block_rows = rows if rows <= block_rows else block_rows
    sub = sub_rows if block_rows % (sub_rows * _ROW_ALIGN) == 0 else 1
    args = (%ARGS%,)
    out_avals = _out_avals(**dims)
    block_dims = {**dims, _ROW: block_rows}
%SPECS%    outs = pl.pallas_call(
        functools.partial(_kernel, dims=block_dims, n_in=len(args), sub_rows=sub),
        out_shape=[jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in out_avals],
        grid=(pl.cdiv(rows, block_rows),),
        in_specs=in_specs,
        out_specs=out_specs,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",),
                                             vmem_limit_bytes=VMEM_LIMIT_BYTES),
    )(*args)
%NARROW_OUTS%    return %RETURN%


def build(block_rows: int = %DEFAULT%, buffers: int = %BUFFERS%, sub_rows: int = %SUB_ROWS%):
    return functools.partial(%NAME%, block_rows=block_rows, buffers=buffers, sub_rows=sub_rows)
'''

_SINGLE_WRAPPER = '''

def _kernel(*refs, dims, n_in):
    values = [ref[...] for ref in refs[:n_in]]
    outs = _body(*values, **dims)
    for ref, value in zip(refs[n_in:], outs, strict=True):
        value = value.astype(ref.dtype)
        ref[...] = value if value.shape == ref.shape else jnp.broadcast_to(value, ref.shape)


def _whole_spec(shape):
    zeros = (0,) * len(shape)
    return pl.BlockSpec(tuple(shape), lambda i: zeros)


@jax.jit
def %NAME%(%ARGS%):
%CHECKS%
    args = (%ARGS%,)
    out_avals = _out_avals(**dims)
    # a 0-d output is a (1, 1) block (a TPU block has at least one tile), reshaped after
    block_shapes = [tuple(shape) or (1, 1) for shape, _ in out_avals]
    outs = pl.pallas_call(
        functools.partial(_kernel, dims=dims, n_in=len(args)),
        out_shape=[jax.ShapeDtypeStruct(block, dtype)
                   for block, (_, dtype) in zip(block_shapes, out_avals, strict=True)],
        grid=(1,),
        in_specs=[_whole_spec(x.shape) for x in args],
        out_specs=[_whole_spec(block) for block in block_shapes],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",),
                                             vmem_limit_bytes=VMEM_LIMIT_BYTES),
    )(*args)
    outs = [out.reshape(shape) for out, (shape, _) in zip(outs, out_avals, strict=True)]
    return %RETURN%


def build():
    return %NAME%
'''


_ROW_SPECS = '''    in_specs = [_row_spec(x.shape, block_rows, buffers) if is_row else _whole_spec(x.shape)
                for x, is_row in zip(args, _ROW_INPUTS, strict=True)]
    out_specs = [_row_spec(shape, block_rows, 2) for shape, _ in out_avals]
'''
_NARROW_SPECS = '''    args = tuple(x.T if t else x for x, t in zip(args, _IN_T, strict=True))  # XLA keeps them rows-minor
    in_specs = [_lane_spec(x.shape, block_rows) if t else
                _row_spec(x.shape, block_rows, buffers) if is_row else _whole_spec(x.shape)
                for x, is_row, t in zip(args, _ROW_INPUTS, _IN_T, strict=True)]
    out_avals = [((shape[::-1], dtype) if t else (shape, dtype))
                 for (shape, dtype), t in zip(out_avals, _OUT_T, strict=True)]
    out_specs = [_lane_spec(shape, block_rows) if t else _row_spec(shape, block_rows, 2)
                 for (shape, _), t in zip(out_avals, _OUT_T, strict=True)]
'''
_LANE_SPEC = '''def _lane_spec(shape, block_rows):
    """A (width, rows) array: all of its width, block_rows rows along the lanes."""
    return pl.BlockSpec((shape[0], block_rows), lambda i: (0, i))


'''
_NARROW_OUTS = "    outs = [out.T if t else out for out, t in zip(outs, _OUT_T, strict=True)]\n"


def narrow_arrays(facts: TaskFacts) -> tuple[tuple[bool, ...], tuple[bool, ...]]:
    """Which inputs and outputs are 2-D row arrays narrower than the lanes (XLA:TPU keeps
    such an array with its rows minor-most)."""
    row_in = facts.detail.get("row_inputs", [])
    ins = tuple(bool(r) and len(a.shape) == 2 and a.shape[1] < LANES
                for a, r in zip(facts.args, row_in, strict=True))
    return ins, tuple(len(shape) == 2 and shape[1] < LANES for shape in facts.out_shapes)


def _out_avals_source(facts: TaskFacts) -> str:
    dims = ", ".join(f"{s}=None" for s in facts.symbols)
    items = ", ".join(f"({dims_expr(d)}, {dtype!r})" for d, dtype in facts.outs)
    signature = f"*, {dims}" if dims else ""
    return f"def _out_avals({signature}):\n    return [{items}]"


def _fill(template: str, facts: TaskFacts, fn_name: str, default: int = 0) -> str:
    names = [a.name for a in facts.args]
    ret = "outs[0]" if len(facts.outs) == 1 else "tuple(outs)"
    return (template.replace("%NAME%", fn_name).replace("%ARGS%", ", ".join(names))
            .replace("%CHECKS%", dim_check_source(names, [a.dims for a in facts.args]))
            .replace("%RETURN%", ret).replace("%DEFAULT%", str(default)))


@dataclass(frozen=True)
class RowsSpec:
    """The schedule of one row-block kernel (the reference's own ops never change)."""

    block_rows: int
    buffers: int = 2  # pipeline depth of the row-shaped inputs
    single_buffer_whole: bool = False  # inputs without a row axis (weights) get one buffer
    sub_rows: int = 1  # inner fori_loop sub-tiles per block
    reciprocal_div: bool = False  # a division by a broadcast row statistic as 1/y and a multiply
    vmem_limit_bytes: int | None = None
    tune_schedule: bool = False  # buffers and sub_rows in TUNABLES too
    topk_group: int | None = None  # a top-k's tournament group (0: k rounds of max); None: the body's
    narrow_transposed: bool = False  # 2-D row arrays narrower than the lanes as (width, rows) blocks
    levers: tuple[str, ...] = field(default=(), compare=False)


def default_spec(facts: TaskFacts, params: dict[str, Any], chip: dict[str, Any] | None) -> RowsSpec:
    align = row_align(facts)
    default = int(params.get("block_rows") or 0) or default_block_rows(facts, chip)
    return RowsSpec(block_rows=round_down(default, align))


def strategy_line(spec: RowsSpec) -> str:
    parts = [f"{spec.block_rows} whole rows per block"]
    if spec.buffers != 2:
        parts.append(f"{spec.buffers}-deep row pipeline")
    if spec.single_buffer_whole:
        parts.append("single buffer for the inputs without a row axis")
    if spec.sub_rows > 1:
        parts.append(f"{spec.sub_rows} fori_loop sub-tiles per block")
    if spec.reciprocal_div:
        parts.append("divisions by row statistics as one reciprocal and a multiply")
    if spec.vmem_limit_bytes:
        parts.append(f"vmem_limit_bytes {spec.vmem_limit_bytes:,}")
    if spec.narrow_transposed:
        parts.append("arrays narrower than the lanes in (width, rows) blocks: rows on the lanes")
    if spec.topk_group is not None:
        parts.append(f"top-k as a tournament over groups of {spec.topk_group} columns, rows along "
                     "lanes" if spec.topk_group else "top-k as k rounds of max")
    return "; ".join(parts)


def rows_source(facts: TaskFacts, params: dict[str, Any], task_name: str,
                spec: RowsSpec | None = None) -> str:
    """A row-block candidate file for `spec` (by default `params['block_rows']` rows)."""
    spec = spec or default_spec(facts, params, None)
    align = LANES if spec.narrow_transposed else row_align(facts)
    default = round_down(spec.block_rows, align)
    tunables = aligned_tunables(params.get("tunables") or rows_tunables(default, align),
                                {"block_rows": align})
    if spec.tune_schedule:
        tunables = {**tunables, **({"buffers": list(dict.fromkeys([spec.buffers, 2, 3]))} if deepest_buffering() > 2 else {}),
                    "sub_rows": list(dict.fromkeys([spec.sub_rows, 1, 2]))}
    doc = (f"{facts.kernel_class} kernel for {task_name}: blocks of whole rows, the reference's "
           "ops evaluated in VMEM.\n\n"
           f"Schedule: {strategy_line(spec)}.\n"
           f"Levers applied: {', '.join(spec.levers) or 'none (the class default)'}.\n\n"
           + "\n".join(f"Class evidence: {r}" for r in facts.reasons))
    constants = "\n".join([
        tunables_literal(tunables),
        f"_ROW = {facts.detail['row']!r}",
        f"_ROW_ALIGN = {'LANES' if align == LANES else 'SUBLANES' if align == SUBLANES else align}",
        f"_ROW_INPUTS = {tuple(facts.detail['row_inputs'])!r}",
        f"SINGLE_BUFFER_WHOLE = {spec.single_buffer_whole}",
        f"VMEM_LIMIT_BYTES = {spec.vmem_limit_bytes!r}",
    ])
    narrow = spec.narrow_transposed
    if narrow:
        ins, outs = narrow_arrays(facts)
        constants += (f"\n_IN_T = {ins!r}  # inputs read as (width, rows) blocks"
                      f"\n_OUT_T = {outs!r}  # outputs written as (width, rows) blocks")
    body = facts.body_source
    if spec.topk_group is not None:
        body = topk_source.with_group(body, spec.topk_group)
    helpers = NARY_HELPER
    if spec.reciprocal_div:
        body = divisions_as(body, "_div")
        helpers += _RECIPROCAL_DIV
    kernel = (_NARROW_KERNEL if narrow else
              _SUB_TILE_KERNEL if spec.sub_rows > 1 or spec.tune_schedule else _WHOLE_KERNEL)
    wrapper = (_ROW_WRAPPER.replace("%BUFFERS%", str(spec.buffers))
               .replace("%SUB_ROWS%", str(spec.sub_rows))
               .replace("%LANE_SPEC%", _LANE_SPEC if narrow else "")
               .replace("%SPECS%", _NARROW_SPECS if narrow else _ROW_SPECS)
               .replace("%NARROW_OUTS%", _NARROW_OUTS if narrow else ""))
    return (header(doc) + "\n" + constants + "\n" + helpers + "\n\n" + body
            + "\n\n\n" + _out_avals_source(facts) + kernel + _fill(wrapper, facts, "rows_kernel", default))


def render(facts: TaskFacts, spec: RowsSpec, task_name: str,
           tunables: dict[str, list[int]] | None = None) -> str:
    return rows_source(facts, {"tunables": tunables} if tunables else {}, task_name, spec)


def single_source(facts: TaskFacts, task_name: str, vmem_limit_bytes: int | None = None) -> str:
    """The whole arrays as one block, one grid step: correct whenever it fits VMEM (the scoped
    limit, or `vmem_limit_bytes` when given)."""
    doc = (f"single-block kernel for {task_name}: the whole arrays in VMEM, one grid step, the "
           "reference's ops evaluated inside.\n\n" + "\n".join(f"Class evidence: {r}" for r in facts.reasons))
    constants = f"\nTUNABLES = {{}}\nVMEM_LIMIT_BYTES = {vmem_limit_bytes!r}\n"
    return (header(doc) + constants + NARY_HELPER + "\n\n" + facts.body_source + "\n\n\n"
            + _out_avals_source(facts) + _fill(_SINGLE_WRAPPER, facts, "single_block_kernel"))
