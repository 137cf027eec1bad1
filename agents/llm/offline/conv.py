"""Convolutions (`lax.conv_general_dilated`, 1-D to 3-D) as window-tap matmuls on the MXU.

Mosaic has no convolution rule, so the kernel writes one as matmuls over the window's taps:
for each tap, a shifted window of the padded input times that tap's (in_channels/groups x
out_channels/groups) weight slice, accumulated in f32. With few channels one tap's matmul
would leave most of the MXU's contraction depth empty, so `taps_per_dot` taps are packed
into one matmul: their windows side by side along the channels (an im2col in VMEM, nothing
more read from HBM) against the taps' weight slices stacked. By default as many taps as fill
the MXU's depth (`packed_taps`); one tap per matmul and the whole window are the tuner's
other choices.

Layout work outside the kernel (transposes, pads, strided slices, reshapes) makes every
tap's window one contiguous row range of a 2-D (rows, channels) slab:
- the input goes channels-last (any `dimension_numbers`: NHWC, NCHW, NDHWC, ...) and gets
  the conv's padding;
- a stride s splits each spatial axis into s phases (`x[p::s]`), so output position o and
  tap k read phase (k*d) % s at row o + (k*d) // s: every tap is a stride-1 window of one
  phase (d: the dilation);
- the phase's spatial axes are flattened with the last one padded to a sublane multiple,
  so a tap is the row range [offset, offset + rows) of the slab; the output comes out
  "wide" (the padded last axis) and its extra columns are sliced off after the kernel;
- feature groups are a grid axis: group g's input channels times its weight block.

Grid (cdiv(N, block_images), groups), both `parallel`; per step `block_images` whole images
(all phases, all rows) and the group's whole weight are in VMEM. The reference's epilogue
(bias, activation, normalisation, pooling, the layout back) runs in the conv kernel on its
block of images in VMEM when it keeps images independent (`conv_match` probes it), or when
it mixes them (a batch norm) and one block holds the whole batch; else in a second Pallas
kernel on the conv's output, per block of images or on the whole batch in one block.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import numpy as np

from agents.llm.offline.classify import TaskFacts
from agents.llm.offline.common import (
    LANES,
    dim_check_source,
    header,
    pow2_floor,
    scoped_vmem,
    sublane_tile,
    tiled_bytes,
    tunables_literal,
)
from agents.llm.offline.conv_geometry import MXU_DEPTH, geometry, packed_taps, taps_choices
from agents.llm.offline.jaxpr_source import NARY_HELPER
from agents.llm.offline.levers import raised_vmem_limit

LEVERS = ["window_tap_matmuls", "packed_taps", "f32_accumulator", "stride_phase_split",
          "image_blocks_parallel", "epilogue_in_conv_kernel", "epilogue_kernel_per_image_block"]
CARRIED_KNOBS = ("taps_per_dot", "fuse_epilogue")  # a child keeps its tuned parent's (planner)
STRATEGY = ("Convolution as MXU matmuls over the window's taps (several taps' windows side by "
            "side in one matmul when the channels are few) on a phase-split, flattened image "
            "slab, f32 accumulation; image blocks and feature groups parallel; the epilogue "
            "in the conv kernel when it keeps images independent, else in a second kernel "
            "(on the whole batch when it mixes images).")
def _shapes(facts: TaskFacts) -> dict[str, Any]:
    """The conv's operand and slab sizes at the tuning point (for VMEM sizing)."""
    d = facts.detail
    xs, ws = d["lhs_shape"], d["rhs_shape"]
    ls, rs = d["lhs_spec"], d["rhs_spec"]
    space = tuple((xs[a] - 1) * k + 1 for a, k in zip(ls[2:], d["lhs_dilation"], strict=True))
    kernel = tuple(ws[a] for a in rs[2:])
    features, group_in = ws[rs[0]], ws[rs[1]]
    dtypes = [facts.args[d["lhs"]].dtype, facts.args[d["rhs"]].dtype]
    _, _, taps, rows, length = geometry(space, kernel, d["strides"], d["padding"], d["dilation"],
                                        sublane_tile(dtypes))
    return {"n": xs[ls[0]], "features": features, "group_in": group_in,
            "group_out": features // d["groups"], "phases": math.prod(d["strides"]),
            "taps": len(taps), "rows": rows, "length": length,
            "itemsize": max(np.dtype(t).itemsize for t in dtypes)}


def default_blocks(facts: TaskFacts, chip: dict[str, Any] | None) -> dict[str, int]:
    s = _shapes(facts)
    block = pow2_floor(max(1, min(s["n"], 8)))
    while block > 1 and vmem_bytes(facts, {"block_images": block})[0] > scoped_vmem(chip) // 2:
        block //= 2
    return {"block_images": block}


def extents(facts: TaskFacts) -> dict[str, int]:
    return {"block_images": _shapes(facts)["n"]}


def grid_text(params: dict[str, int]) -> str:
    return (f"conv grid (cdiv(N, {params['block_images']}), groups), both parallel: input slab "
            "(i, g, 0, 0, 0) with every phase, weights (g, 0, 0, 0), wide output (i, g, 0, 0); "
            "epilogue grid over the same image blocks (or one whole-batch block).")


def vmem_bytes(facts: TaskFacts, params: dict[str, int]) -> tuple[int, str]:
    """The conv kernel's VMEM for a block of images, each array padded to (8, 128) tiles."""
    s = _shapes(facts)
    b = params["block_images"]
    packed = params.get("taps_per_dot") or packed_taps(s["group_in"], s["taps"])
    item = s["itemsize"]
    slab = b * s["phases"] * tiled_bytes((s["length"], s["group_in"]), item)
    weight = tiled_bytes((s["taps"] * s["group_in"], s["group_out"]), item)
    out = b * tiled_bytes((s["rows"], s["group_out"]), 4)
    window = tiled_bytes((s["rows"], packed * s["group_in"]), item) if packed > 1 else 0
    total = 2 * (slab + weight + out) + tiled_bytes((s["rows"], s["group_out"]), 4) + window
    return total, (f"2 x ({b} images x {s['phases']} phases x {s['length']} rows x {s['group_in']} "
                   f"channels slab + {s['taps']} taps x {s['group_in']}x{s['group_out']} weights + "
                   f"{b} x {s['rows']}x{s['group_out']} out) + f32 accumulator"
                   + (f" + {packed} taps' packed window" if window else "")
                   + f", padded to (8, 128) tiles = {total:,} B")


_TEMPLATE = '''

def _accumulate(x_ref, w_ref, b, *, taps, rows, taps_per_dot, features):
    """Image `b` of the block as the conv's f32 (rows, features) slab: one MXU matmul per
    group of `taps_per_dot` window taps (their windows side by side along the channels, so
    the contraction is that many times deeper)."""
    group_in = x_ref.shape[-1]
    acc = jnp.zeros((rows, features), jnp.float32)
    for first in range(0, len(taps), taps_per_dot):
        group = taps[first:first + taps_per_dot]
        windows = [x_ref[b, phase, pl.ds(offset, rows), :] for phase, offset in group]
        window = windows[0] if len(windows) == 1 else jnp.concatenate(windows, axis=-1)
        weights = w_ref[pl.ds(first * group_in, len(group) * group_in), :]
        acc += jnp.dot(window, weights, preferred_element_type=jnp.float32)
    return acc


def _conv_kernel(x_ref, w_ref, o_ref, *, taps, rows, taps_per_dot):
    """The conv alone, image by image; its wide output goes back to HBM."""

    def _image(b, carry):
        acc = _accumulate(x_ref, w_ref, b, taps=taps, rows=rows, taps_per_dot=taps_per_dot,
                          features=o_ref.shape[-1])
        o_ref[b] = acc.astype(o_ref.dtype)
        return carry

    lax.fori_loop(0, x_ref.shape[0], _image, 0)


def _fused_kernel(x_ref, w_ref, *refs, taps, rows, taps_per_dot, wide, trim, dims, n_extra,
                  flip):
    """The conv of each image of the block into VMEM scratch, then the reference's epilogue
    on the whole block, as the epilogue's own kernel would run it: the conv's output never
    leaves VMEM. An output marked in `flip` is stored transposed."""
    extras = [ref[...] for ref in refs[:n_extra]]
    out_refs, conv_ref = refs[n_extra:-1], refs[-1]

    def _image(b, carry):
        acc = _accumulate(x_ref, w_ref, b, taps=taps, rows=rows, taps_per_dot=taps_per_dot,
                          features=wide[-1])
        conv_ref[b] = acc.reshape(wide)[trim].astype(conv_ref.dtype)
        return carry

    lax.fori_loop(0, x_ref.shape[0], _image, 0)
    outs = _epilogue(conv_ref[...], *extras, **dims)
    for ref, value, flipped in zip(out_refs, outs, flip, strict=True):
        value = value.astype(ref.dtype)
        if flipped:
            value = value.reshape(ref.shape[::-1]).T
        ref[...] = value if value.shape == ref.shape else value.reshape(ref.shape)


def _lanes_first(shape):
    """A (rows, narrow) output whose transposed tiling is the smaller: XLA:TPU keeps it
    rows-minor, so written as (narrow, rows) it needs no relayout copy after the kernel."""
    return (len(shape) == 2 and shape[1] < LANES
            and _tiled_bytes(shape[::-1], jnp.float32) < _tiled_bytes(shape, jnp.float32))


def _tiled_bytes(shape, dtype):
    """A block's bytes in VMEM: its last axis padded to 128 lanes, the one before to the
    dtype's sublane tile (8 rows of 32 bits)."""
    itemsize = jnp.dtype(dtype).itemsize
    dims = list(shape) or [1]
    dims[-1] = -(-dims[-1] // LANES) * LANES
    if len(dims) > 1:
        sublanes = SUBLANES * max(1, 4 // itemsize)
        dims[-2] = -(-dims[-2] // sublanes) * sublanes
    return math.prod(dims) * itemsize


def _vmem_limit(blocks, scratch_bytes=0):
    """`vmem_limit_bytes` for these (shape, dtype) blocks as VMEM tiles them, two buffers
    each, plus scratch and a quarter spare; None while the chip's default scoped limit holds
    them (up to VMEM_CAP: past it the compiler says the blocks do not fit)."""
    need = sum(2 * _tiled_bytes(shape, dtype) for shape, dtype in blocks)
    need = (need + scratch_bytes) * 5 // 4
    return None if need <= SCOPED_VMEM else min(need, VMEM_CAP)


def _slabs(lhs, rhs):
    """The conv's operands as the kernel reads them, and its geometry. Only layout work:
    transposes, a pad, strided slices, reshapes."""
    x = jnp.transpose(lhs, (LHS_SPEC[0], *LHS_SPEC[2:], LHS_SPEC[1]))  # (N, *space, C)
    w = jnp.transpose(rhs, (*RHS_SPEC[2:], RHS_SPEC[1], RHS_SPEC[0]))  # (*window, C/G, O)
    if any(d > 1 for d in LHS_DILATION):  # a transposed conv: zeros between input positions
        x = lax.pad(x, jnp.zeros((), x.dtype),
                    [(0, 0, 0), *((0, 0, d - 1) for d in LHS_DILATION), (0, 0, 0)])
    n, *space, channels = x.shape
    *window, group_in, features = w.shape
    if channels != group_in * GROUPS or features % GROUPS:
        raise ValueError(f"{lhs.shape=} and {rhs.shape=} do not make {GROUPS} feature groups")
    outs, phase_dims, taps, rows, length = _geometry(
        tuple(space), tuple(window), STRIDES, PADDING, DILATION, SUBLANE_TILE)
    config = [(0, 0, 0)] + [(lo, phase_dims[i] * STRIDES[i] - space[i] - lo, 0)
                            for i, (lo, _) in enumerate(PADDING)] + [(0, 0, 0)]
    x = lax.pad(x, jnp.zeros((), x.dtype), config)
    if any(s > 1 for s in STRIDES):  # the phases by one transpose: axis i -> (phase_dims[i], s_i)
        nd = len(STRIDES)
        x = x.reshape(n, *itertools.chain(*zip(phase_dims, STRIDES, strict=True)), channels)
        x = x.transpose(0, *(2 + 2 * i for i in range(nd)), *(1 + 2 * i for i in range(nd)),
                        1 + 2 * nd)
    count = math.prod(STRIDES)
    if GROUPS == 1:  # reshapes only: no data moves
        x = x.reshape(n, 1, count, length, channels)
        w = w.reshape(1, len(taps) * group_in, features)
    else:
        x = x.reshape(n, count, length, GROUPS, group_in).transpose(0, 3, 1, 2, 4)
        w = w.reshape(len(taps) * group_in, GROUPS, features // GROUPS).transpose(1, 0, 2)
    channels_last = (n, *outs, features)
    out_shape = tuple(channels_last[i] for i in OUT_ORDER)
    geometry = {"outs": outs, "phase_dims": phase_dims, "taps": taps, "rows": rows,
                "count": count, "length": length, "group_in": group_in, "features": features,
                "out_shape": out_shape}
    return x, w, geometry


def _conv(x, w, geo, *, block_images, taps_per_dot):
    """The conv alone in a Pallas kernel, then its output trimmed and laid out as the
    reference's."""
    n, taps, rows, group_in = x.shape[0], geo["taps"], geo["rows"], geo["group_in"]
    group_out = geo["features"] // GROUPS
    block = min(block_images, n)
    packed = max(1, min(taps_per_dot, len(taps)))
    limit = _vmem_limit([((block, geo["count"], geo["length"], group_in), x.dtype),
                         ((len(taps) * group_in, group_out), w.dtype),
                         ((block, rows, group_out), OUT_DTYPE)],
                        scratch_bytes=_tiled_bytes((rows, group_out), jnp.float32)
                        + _tiled_bytes((rows, packed * group_in), x.dtype))
    out = pl.pallas_call(
        functools.partial(_conv_kernel, taps=taps, rows=rows, taps_per_dot=packed),
        out_shape=jax.ShapeDtypeStruct((n, GROUPS, rows, group_out), OUT_DTYPE),
        grid=(pl.cdiv(n, block), GROUPS),
        in_specs=[
            pl.BlockSpec((block, None, geo["count"], geo["length"], group_in),
                         lambda i, g: (i, g, 0, 0, 0)),
            pl.BlockSpec((None, len(taps) * group_in, group_out), lambda i, g: (g, 0, 0)),
        ],
        out_specs=pl.BlockSpec((block, None, rows, group_out), lambda i, g: (i, g, 0, 0)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel"),
                                             vmem_limit_bytes=limit),
    )(x, w)
    out = out if GROUPS == 1 else out.transpose(0, 2, 1, 3)
    out = out.reshape(n, geo["outs"][0], *geo["phase_dims"][1:], geo["features"])
    out = out[(slice(None), slice(None), *(slice(0, o) for o in geo["outs"][1:]), slice(None))]
    return jnp.transpose(out, OUT_ORDER)


def _fusable(block, n, shapes):
    """Can the epilogue run inside the conv kernel? When the task allows it (FUSABLE) and its
    outputs are blocked by the conv's blocks of images (one block of the whole batch, for an
    epilogue that mixes images)."""
    return FUSABLE and _epilogue_block(block, n, shapes) == min(block, n)


def _fused(x, w, extras, geo, avals, shapes, dims, *, block_images, taps_per_dot):
    """The conv and the epilogue in one Pallas kernel over blocks of images."""
    n, taps, rows, group_in = x.shape[0], geo["taps"], geo["rows"], geo["group_in"]
    block = min(block_images, n)
    packed = max(1, min(taps_per_dot, len(taps)))
    wide = (geo["outs"][0], *geo["phase_dims"][1:], geo["features"])
    trim = tuple(slice(0, o) for o in geo["outs"]) + (slice(None),)
    # an epilogue that mixes images runs here only when the one block holds them all; then a
    # narrow 2-D output XLA:TPU keeps rows-minor is written transposed
    flip = tuple(block >= n and _lanes_first(shape) for shape in shapes)
    shapes = [shape[::-1] if flipped else shape for shape, flipped in zip(shapes, flip, strict=True)]
    out_specs = [_whole(shape) if BATCH is None or flipped else _images(shape, block)
                 for shape, flipped in zip(shapes, flip, strict=True)]
    step_dims = dims if BATCH is None else {**dims, BATCH: block}
    conv_block = (block, *geo["outs"], geo["features"])
    limit = _vmem_limit(
        [((block, geo["count"], geo["length"], group_in), x.dtype),
         ((len(taps) * group_in, geo["features"]), w.dtype)]
        + [(e.shape, e.dtype) for e in extras]
        + [(spec.block_shape, a.dtype) for spec, a in zip(out_specs, avals, strict=True)],
        scratch_bytes=_tiled_bytes(conv_block, OUT_DTYPE)
        + 2 * _tiled_bytes((rows, geo["features"]), jnp.float32)
        + _tiled_bytes((rows, packed * group_in), x.dtype))
    outs = pl.pallas_call(
        functools.partial(_fused_kernel, taps=taps, rows=rows, taps_per_dot=packed, wide=wide,
                          trim=trim, dims=step_dims, n_extra=len(extras), flip=flip),
        out_shape=[jax.ShapeDtypeStruct(shape, a.dtype) for shape, a in zip(shapes, avals, strict=True)],
        grid=(pl.cdiv(n, block),),
        in_specs=[
            pl.BlockSpec((block, None, geo["count"], geo["length"], group_in),
                         lambda i: (i, 0, 0, 0, 0)),
            pl.BlockSpec((None, len(taps) * group_in, geo["features"]), lambda i: (0, 0, 0)),
            *(_whole(e.shape) for e in extras),
        ],
        out_specs=out_specs,
        scratch_shapes=[pltpu.VMEM(conv_block, OUT_DTYPE)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",),
                                             vmem_limit_bytes=limit),
    )(x, w, *extras)
    return [o.T if flipped else o for o, flipped in zip(outs, flip, strict=True)]


def _epilogue_kernel(*refs, dims, n_in):
    """The reference's ops after the convolution, on one block."""
    values = [ref[...] for ref in refs[:n_in]]
    outs = _epilogue(*values, **dims)
    for ref, value in zip(refs[n_in:], outs, strict=True):
        value = value.astype(ref.dtype)
        ref[...] = value if value.shape == ref.shape else value.reshape(ref.shape)


def _whole(shape):
    zeros = (0,) * len(shape)
    return pl.BlockSpec(tuple(shape), lambda i: zeros)


def _images(shape, block):
    rest = (0,) * (len(shape) - 1)
    return pl.BlockSpec((block, *shape[1:]), lambda i: (i, *rest))


def _epilogue_block(block, n, out_shapes):
    """Images per epilogue step: `block` when every output's block keeps the (8, 128) rule."""
    if BATCH is None:
        return n
    for shape in out_shapes:
        if len(shape) == 1 or (len(shape) == 2 and block % SUBLANES):
            return n
    return min(block, n)


def _epilogue_call(y, extras, avals, shapes, dims, *, block_images):
    """The epilogue in a second Pallas kernel over blocks of images (the whole batch when it
    mixes them)."""
    ins = (y, *extras)
    n = y.shape[0]
    block = _epilogue_block(block_images, n, shapes)
    if block < n:
        in_specs = [_images(y.shape, block)] + [_whole(x.shape) for x in extras]
        out_specs = [_images(shape, block) for shape in shapes]
        step_dims = {**dims, BATCH: block}
    else:
        in_specs = [_whole(x.shape) for x in ins]
        out_specs = [_whole(shape) for shape in shapes]
        step_dims = dims
    limit = _vmem_limit([(spec.block_shape, x.dtype) for spec, x in zip(in_specs, ins, strict=True)]
                        + [(spec.block_shape, a.dtype) for spec, a in zip(out_specs, avals, strict=True)])
    return pl.pallas_call(
        functools.partial(_epilogue_kernel, dims=step_dims, n_in=len(ins)),
        out_shape=[jax.ShapeDtypeStruct(shape, a.dtype) for shape, a in zip(shapes, avals, strict=True)],
        grid=(pl.cdiv(n, block),),
        in_specs=in_specs,
        out_specs=out_specs,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",),
                                             vmem_limit_bytes=limit),
    )(*ins)


@functools.partial(jax.jit, static_argnames=("block_images", "taps_per_dot", "fuse_epilogue"))
def %NAME%(%ARGS%, *, block_images: int = %BLOCK%, taps_per_dot: int = %TAPS%,
           fuse_epilogue: int = %FUSE%):
%CHECKS%
    if block_images < 1:
        raise ValueError(f"{block_images=} must be positive")
    if taps_per_dot < 1:
        raise ValueError(f"{taps_per_dot=} must be positive")
    args = (%ARGS%,)
    lhs, rhs = _operands(*args, **dims)
    x, w, geo = _slabs(lhs, rhs)
    extras = tuple(args[i] for i in EPILOGUE_ARGS)
    conv_out = jax.ShapeDtypeStruct(geo["out_shape"], OUT_DTYPE)
    avals = jax.eval_shape(functools.partial(_epilogue, **dims), conv_out, *extras)
    shapes = [tuple(a.shape) or (1, 1) for a in avals]
    if fuse_epilogue and _fusable(block_images, x.shape[0], shapes):
        outs = _fused(x, w, extras, geo, avals, shapes, dims, block_images=block_images,
                      taps_per_dot=taps_per_dot)
    else:
        y = _conv(x, w, geo, block_images=block_images, taps_per_dot=taps_per_dot)
        outs = _epilogue_call(y, extras, avals, shapes, dims, block_images=block_images)
    outs = [o.reshape(a.shape) for o, a in zip(outs, avals, strict=True)]
    return %RETURN%


def build(block_images: int = %BLOCK%, taps_per_dot: int = %TAPS%, fuse_epilogue: int = %FUSE%):
    return functools.partial(%NAME%, block_images=block_images, taps_per_dot=taps_per_dot,
                             fuse_epilogue=fuse_epilogue)
'''


def out_order(facts: TaskFacts) -> tuple[int, ...]:
    """The transpose from the kernel's channels-last output to the conv's output layout."""
    spec = facts.detail["out_spec"]
    return tuple(int(i) for i in np.argsort((spec[0], *spec[2:], spec[1])))


def fusable(facts: TaskFacts, block: int) -> bool:
    """Can the epilogue run in the conv kernel itself, on its blocks of images? When it keeps
    images independent, or `block` images are the whole batch (a batch norm then runs on the
    block in VMEM as its own kernel would), the conv has one feature group and writes
    channels-last (written as the kernel's FUSABLE; it also checks its outputs' blocks, and
    that one block holds the batch, when it is traced)."""
    d = facts.detail
    order = out_order(facts)
    whole = d["batch"] is not None or block >= _shapes(facts)["n"]
    return whole and d["groups"] == 1 and order == tuple(range(len(order)))


def applied_levers(facts: TaskFacts, taps_per_dot: int, fuse_epilogue: int) -> list[str]:
    """The LEVERS this task's kernel takes: packed taps only with more than one per matmul,
    the phase split only with a stride, the epilogue in the conv kernel or else in one of
    its own per image block when it keeps images independent."""
    d = facts.detail
    skip = {"stride_phase_split"} if all(s == 1 for s in d["strides"]) else set()
    skip |= set() if taps_per_dot > 1 else {"packed_taps"}
    skip |= {"epilogue_kernel_per_image_block"} if fuse_epilogue or not d["batch"] else set()
    skip |= set() if fuse_epilogue else {"epilogue_in_conv_kernel"}
    return [lever for lever in LEVERS if lever not in skip]


def conv_source(facts: TaskFacts, params: dict[str, Any], task_name: str,
                chip: dict[str, Any] | None = None) -> str:
    d = facts.detail
    blocks = default_blocks(facts, chip)
    given = params.get("block_images")
    block = given if isinstance(given, int) and given > 0 else blocks["block_images"]
    s = _shapes(facts)
    depth = int((chip or {}).get("mxu_dim") or MXU_DEPTH)
    choices = taps_choices(s["group_in"], s["taps"], depth)
    # A fixer's configuration (tunables given) keeps one tap per matmul unless it says
    # otherwise: no lane concatenation left to fail.
    fixed = params.get("tunables")
    packed = params.get("taps_per_dot") or (1 if fixed else choices[0])
    can_fuse = fusable(facts, block)
    fuse = int(params.get("fuse_epilogue", 0 if fixed else can_fuse)) if can_fuse else 0
    flips = any(len(o) == 2 and o[1] < LANES and tiled_bytes(o[::-1], 4) < tiled_bytes(o, 4)
                for o in facts.out_shapes)  # the kernel's `_lanes_first`
    whole = [s["n"]] if fuse and flips else []
    tunables = dict(fixed) if fixed else {  # the whole batch too where a narrow output can flip
        "block_images": list(dict.fromkeys([block, max(1, block // 2), block * 2, *whole])),
        "taps_per_dot": list(dict.fromkeys([packed, *choices])),
        "fuse_epilogue": list(dict.fromkeys([fuse, 0]))}
    tunables.setdefault("taps_per_dot", [packed])
    tunables.setdefault("fuse_epilogue", [fuse])
    names = [a.name for a in facts.args]
    sub = sublane_tile([a.dtype for a in facts.args])
    where = ("in the conv kernel on each block of images (the conv's output stays in VMEM)"
             if fuse and d["batch"] else
             "in the conv kernel on its one block of the whole batch (it mixes images; the "
             "conv's output stays in VMEM)" if fuse else
             "in a second kernel per block of images" if d["batch"] else
             "in a second kernel on the whole batch in one block (it mixes images)")
    doc = (f"convolution kernel for {task_name}: {d['spatial']}-D conv_general_dilated as MXU "
           f"matmuls over the window's {s['taps']} taps, {packed} tap(s) per matmul (their windows "
           f"side by side along the {s['group_in']} channels), f32 accumulation; strides "
           f"{d['strides']}, padding "
           f"{d['padding']}, dilation {d['dilation']}, {d['groups']} feature group(s). The "
           f"reference's epilogue ({', '.join(d['epilogue_ops']) or 'none'}) runs {where}.\n\n"
           f"Blocks: {block} image(s) per step, {packed} tap(s) per matmul (TUNABLES "
           "block_images, taps_per_dot, fuse_epilogue).\n"
           f"Levers applied: {', '.join(applied_levers(facts, packed, fuse))}.\n\n"
           + "\n".join(f"Class evidence: {r}" for r in facts.reasons))
    constants = "\n".join([
        tunables_literal(tunables),
        f"LHS_SPEC = {d['lhs_spec']!r}",
        f"RHS_SPEC = {d['rhs_spec']!r}",
        f"OUT_SPEC = {d['out_spec']!r}",
        f"OUT_ORDER = {out_order(facts)!r}",
        f"FUSABLE = {can_fuse}",
        f"STRIDES = {d['strides']!r}",
        f"PADDING = {d['padding']!r}",
        f"DILATION = {d['dilation']!r}",
        f"LHS_DILATION = {d['lhs_dilation']!r}",
        f"GROUPS = {d['groups']}",
        f"OUT_DTYPE = jnp.{d['out_dtype']}",
        f"SUBLANE_TILE = {sub}",
        f"EPILOGUE_ARGS = {tuple(d['epilogue_args'])!r}",
        f"BATCH = {d['batch']!r}",
        f"SCOPED_VMEM = {scoped_vmem(chip)}",
        f"VMEM_CAP = {raised_vmem_limit(chip)}",
    ])
    geometry_source = inspect.getsource(geometry).replace("def geometry(", "def _geometry(")
    body = (_TEMPLATE.replace("%NAME%", "conv_kernel").replace("%ARGS%", ", ".join(names))
            .replace("%CHECKS%", dim_check_source(names, d["arg_dims"]))
            .replace("%RETURN%", "outs[0]" if len(facts.outs) == 1 else "tuple(outs)")
            .replace("%BLOCK%", str(block)).replace("%TAPS%", str(packed)).replace("%FUSE%", str(fuse)))
    text = (header(doc).replace("import functools\n", "import functools\nimport math\n", 1)
            .replace("import functools\n", "import functools\nimport itertools\n", 1))
    return (text + "\n" + constants + "\n" + NARY_HELPER + "\n\n" + d["operands_source"] + "\n\n\n"
            + d["epilogue_source"] + "\n\n\n" + geometry_source + body)
