"""The generic class's narrow arrays in the layout XLA:TPU keeps them (`narrow_lanes`).

An array narrower than the lanes (last axis under 128) over a second-to-last axis of 128 or
more is kept by XLA:TPU with the wider axis minor, so a kernel that reads or writes it
row-major gets a relayout copy beside it. With the knob on, the wrapper swaps the last two
axes of such arrays (a bitcast in that layout), the kernel reads and writes (..., width,
rows) blocks and transposes them in VMEM (the cross-lane unit's time, which the cost model
prices). Tiled rows go on the lanes only in blocks of 128s or whole; the summing kernel
swaps like the plain one. :mod:`agents.llm.offline.generic` writes the kernel.
"""

from __future__ import annotations

from agents.llm.offline.classify import TaskFacts
from agents.llm.offline.common import LANES


def narrow_swaps(facts: TaskFacts) -> tuple[list[bool], list[bool]]:
    """Per input and per output: an array narrower than the lanes (last axis under 128, whole
    in every block) over a second-to-last axis of 128 or more. XLA:TPU keeps such an array
    with that wider axis minor, so a kernel that reads it row-major gets a relayout copy
    before it (or after it, for an output); read and written as (..., width, rows) blocks (the
    wrapper's swap of the last two axes is then a bitcast) and transposed in VMEM, it needs
    none. Where the rows are tiled, the swap needs their block on the lanes to be a multiple
    of 128 or the whole axis; the wrapper checks that per configuration (`_lane_block`)."""
    t = facts.detail

    def narrow(shape: tuple[int, ...], axes: tuple[int | None, ...]) -> bool:
        return len(shape) >= 2 and shape[-1] < LANES and shape[-2] >= LANES and axes[-1] is None

    return ([narrow(tuple(a.shape), tuple(x)) for a, x in zip(facts.args, t["in_axes"], strict=True)],
            [narrow(tuple(s), tuple(x)) for s, x in zip(facts.out_shapes, t["out_axes"], strict=True)])


def lanes_knob(facts: TaskFacts) -> bool:
    """Whether the kernel gets the `narrow_lanes` knob: some array can swap."""
    ins, outs = narrow_swaps(facts)
    return any(ins) or any(outs)


_KERNEL_SWAPS = (  # the plain kernel (`generic._KERNEL`) with swapped blocks
    ("def _kernel(*refs, dims, n_in):", "def _kernel(*refs, dims, n_in, swap_in, swap_out):"),
    ("    values = [ref[...] for ref in refs[:n_in]]\n",
     "    values = [jnp.swapaxes(ref[...], -1, -2) if swap else ref[...]\n"
     "              for ref, swap in zip(refs[:n_in], swap_in, strict=True)]\n"),
    ("    for ref, value in zip(refs[n_in:], outs, strict=True):\n"
     "        ref[...] = value.astype(ref.dtype)\n",
     "    for ref, value, swap in zip(refs[n_in:], outs, swap_out, strict=True):\n"
     "        value = value.astype(ref.dtype)\n"
     "        ref[...] = jnp.swapaxes(value, -1, -2) if swap else value\n"),
)

_SUMMING_SWAPS = (  # the summing kernel (`generic_summed.SUMMING_KERNEL`) with swapped blocks
    ("def _summing_kernel(*refs, dims, n_in, n_out):",
     "def _summing_kernel(*refs, dims, n_in, n_out, swap_in, swap_out):"),
    ("    values = [ref[...] for ref in ins]\n",
     "    values = [jnp.swapaxes(ref[...], -1, -2) if swap else ref[...]\n"
     "              for ref, swap in zip(ins, swap_in, strict=True)]\n"),
    ("        for ref, value in zip(outs, _finish(*values, *totals, **dims), strict=True):\n"
     "            ref[...] = value.astype(ref.dtype)\n",
     "        for ref, value, swap in zip(outs, _finish(*values, *totals, **dims), swap_out,\n"
     "                                    strict=True):\n"
     "            value = value.astype(ref.dtype)\n"
     "            ref[...] = jnp.swapaxes(value, -1, -2) if swap else value\n"),
)


def replaced(text: str, steps: tuple[tuple[str, str], ...] | list[tuple[str, str]]) -> str:
    for old, new in steps:
        if text.count(old) != 1:
            raise AssertionError(f"the generic kernel changed: {old!r} is not there once")
        text = text.replace(old, new)
    return text


_LANE_HELPERS = '''

def _lane_block(shape, axes, blocks):
    """Whether the rows of a swapped array can be its block's lane axis: whole, or tiled in
    multiples of 128."""
    g = axes[-2]
    return g is None or blocks[g] % LANES == 0 or blocks[g] >= shape[-2]


def _swapped(axes, swap):
    return (*axes[:-2], axes[-1], axes[-2]) if swap else axes


def _block_spec('''


def with_lanes(wrapper: str, kernel: str, summing: bool = False) -> str:
    """The wrapper with the `narrow_lanes` knob: the marked arrays whose rows' block can be
    on the lanes swap their last two axes around the call (bitcasts in the layouts XLA:TPU
    keeps them in) and in VMEM."""
    steps = [
        (kernel, replaced(kernel, _SUMMING_SWAPS if summing else _KERNEL_SWAPS)),
        ("\n\ndef _block_spec(", _LANE_HELPERS),
        ("    args = (", "    given = ("),
        (",)\n    out_avals = _out_avals(**dims)\n",
         ",)\n    shapes = [x.shape for x in given]\n    out_avals = _out_avals(**dims)\n"
         "    swap_in = tuple(bool(narrow_lanes and s and _lane_block(shape, axes, blocks))\n"
         "                    for s, shape, axes in zip(_SWAP_IN, shapes, _IN_AXES, strict=True))\n"
         "    swap_out = tuple(bool(narrow_lanes and s and _lane_block(shape, axes, blocks))\n"
         "                     for s, (shape, _), axes in zip(_SWAP_OUT, out_avals, _OUT_AXES, strict=True))\n"
         "    args = tuple(jnp.swapaxes(x, -1, -2) if swap else x\n"
         "                 for x, swap in zip(given, swap_in, strict=True))\n"
         "    out_avals = [((*shape[:-2], shape[-1], shape[-2]), dtype) if swap else (shape, dtype)\n"
         "                 for (shape, dtype), swap in zip(out_avals, swap_out, strict=True)]\n"),
        ("n_in=len(args)", "n_in=len(args), swap_in=swap_in, swap_out=swap_out"),
        ("for x, axes in zip(args, _IN_AXES, strict=True)",
         "for x, axes in zip(args, map(_swapped, _IN_AXES, swap_in), strict=True)"),
        ("zip(out_avals, _OUT_AXES, strict=True)]",
         "zip(out_avals, map(_swapped, _OUT_AXES, swap_out), strict=True)]"),
        ("    )(*args)\n", "    )(*args)\n    outs = [jnp.swapaxes(o, -1, -2) if swap else o\n"
                         "            for o, swap in zip(outs, swap_out, strict=True)]\n"),
    ]
    return replaced(wrapper, steps)
