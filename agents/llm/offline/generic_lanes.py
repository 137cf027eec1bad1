"""The generic class's narrow arrays in the layout XLA:TPU keeps them (`narrow_lanes`).

An array narrower than the lanes (last axis under 128) over a second-to-last axis of 128 or
more, both whole in every block, is kept by XLA:TPU with the wider axis minor, so a kernel
that reads it row-major gets a relayout copy on each side. With the knob on, the wrapper
swaps the last two axes of such arrays (a bitcast in that layout), the kernel reads and
writes (..., width, rows) blocks and transposes them in VMEM (the cross-lane unit's time,
which the cost model prices). :mod:`agents.llm.offline.generic` writes the kernel.
"""

from __future__ import annotations

from agents.llm.offline.classify import TaskFacts
from agents.llm.offline.common import LANES


def narrow_swaps(facts: TaskFacts) -> tuple[list[bool], list[bool]]:
    """Per input and per output: an array narrower than the lanes (last axis under 128) over
    a second-to-last axis of 128 or more, both whole in every block. XLA:TPU keeps such an
    array with that wider axis minor, so a kernel that reads it row-major gets a relayout
    copy before it; read and written as (..., width, rows) blocks (the wrapper's swap of the
    last two axes is then a bitcast) and transposed in VMEM, it needs none."""
    t = facts.detail

    def narrow(shape: tuple[int, ...], axes: tuple[int | None, ...]) -> bool:
        return (len(shape) >= 2 and shape[-1] < LANES and shape[-2] >= LANES
                and axes[-1] is None and axes[-2] is None)

    return ([narrow(tuple(a.shape), tuple(x)) for a, x in zip(facts.args, t["in_axes"], strict=True)],
            [narrow(tuple(s), tuple(x)) for s, x in zip(facts.out_shapes, t["out_axes"], strict=True)])


def lanes_knob(facts: TaskFacts) -> bool:
    """Whether the kernel gets the `narrow_lanes` knob: some array can swap, and the tiling
    is not summed (the summing kernel has no code path for swapped blocks)."""
    ins, outs = narrow_swaps(facts)
    return (any(ins) or any(outs)) and not facts.detail.get("reduced")


_LANES_KERNEL = '''

def _kernel(*refs, dims, n_in, swap_in, swap_out):
    """One block of every tiled axis: the reference's ops on it in VMEM. An array marked in
    `swap_in` or `swap_out` arrives or leaves as a (..., width, rows) block, transposed here."""
    values = [jnp.swapaxes(ref[...], -1, -2) if swap else ref[...]
              for ref, swap in zip(refs[:n_in], swap_in, strict=True)]
    outs = _body(*values, **dims)
    for ref, value, swap in zip(refs[n_in:], outs, swap_out, strict=True):
        value = value.astype(ref.dtype)
        ref[...] = jnp.swapaxes(value, -1, -2) if swap else value
'''


def with_lanes(wrapper: str, kernel: str) -> str:
    """The wrapper with the `narrow_lanes` knob: the marked arrays swap their last two axes
    around the call (bitcasts in the layouts XLA:TPU keeps them in) and in VMEM."""
    steps = [
        (kernel, _LANES_KERNEL),
        ("    args = (", "    swap_in = _SWAP_IN if narrow_lanes else (False,) * len(_SWAP_IN)\n"
                       "    swap_out = _SWAP_OUT if narrow_lanes else (False,) * len(_SWAP_OUT)\n"
                       "    args = tuple(jnp.swapaxes(x, -1, -2) if swap else x for x, swap in zip(("),
        (",)\n    out_avals = _out_avals(**dims)\n",
         ",), swap_in, strict=True))\n"
         "    out_avals = [((*shape[:-2], shape[-1], shape[-2]), dtype) if swap else (shape, dtype)\n"
         "                 for (shape, dtype), swap in zip(_out_avals(**dims), swap_out, strict=True)]\n"),
        ("n_in=len(args))", "n_in=len(args),\n                          swap_in=swap_in, swap_out=swap_out)"),
        ("    )(*args)\n", "    )(*args)\n    outs = [jnp.swapaxes(o, -1, -2) if swap else o\n"
                         "            for o, swap in zip(outs, swap_out, strict=True)]\n"),
    ]
    for old, new in steps:
        if wrapper.count(old) != 1:
            raise AssertionError(f"the generic wrapper changed: {old!r} is not there once")
        wrapper = wrapper.replace(old, new)
    return wrapper
