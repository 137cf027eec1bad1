"""The fixer's first answer to a scoped-VMEM overflow the TPU compiler measured: the same
kernel, its `VMEM_LIMIT_BYTES` raised to what the compiler said the kernel needs.

"Scoped allocation with size 61.08M and limit 32.00M" is the compiler's own count of what
the kernel's blocks, buffers and scratch take, against the scoped default. Where that count
fits the chip (below `levers.raised_vmem_limit`: three quarters of its VMEM, room left for
the compiler's own scratch), a kernel engineer raises the limit and keeps the blocks: halving
them, the ladder's next step, refetches every weight twice as often. The offline author's
VMEM figures are estimates; the compiler's is a measurement, so it is what the limit follows
(with `MARGIN` over it, rounded up to a MiB).

A whole-VMEM overflow ("Ran out of memory in memory space vmem. Used ... of ...") or a count
past the chip's room is not this rung's: the ladder shrinks the blocks instead.
"""

from __future__ import annotations

import ast
import math
import re
from typing import Any

from agents.llm.offline.levers import raised_vmem_limit
from kernelgraph import pyast

MARGIN = 1.125  # over the compiler's count: another configuration of the sweep may need a little more
FIX_PREFIX = "raised vmem_limit_bytes to"  # how the fix reads in the fix history
_MIB = 1 << 20
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SCOPED = re.compile(r"Scoped allocation with size ([\d.]+)([KMG]?) and limit ([\d.]+)([KMG]?)")
_LIMIT_LINE = re.compile(r"^VMEM_LIMIT_BYTES = (None|\d[\d_]*)[ \t]*$", re.M)


def asked_bytes(message: str) -> int | None:
    """The scoped VMEM the compiler counted for the kernel, when it says the kernel needs more
    than its limit; None otherwise."""
    m = _SCOPED.search(message)
    if m is None:
        return None
    size = float(m.group(1)) * _UNITS[m.group(2)]
    limit = float(m.group(3)) * _UNITS[m.group(4)]
    return math.ceil(size) if size > limit else None


def with_compiler_limit(code: str, message: str, chip: dict[str, Any] | None
                        ) -> tuple[str, str] | None:
    """(the kernel with its VMEM limit raised to the compiler's count, what changed), or None
    where the rung does not apply: no scoped count in `message`, a count past the chip's
    room, a kernel without a module-level `VMEM_LIMIT_BYTES`, or one already at that limit."""
    asked = asked_bytes(message)
    found = _LIMIT_LINE.search(code)
    if asked is None or found is None:
        return None
    limit = math.ceil(asked * MARGIN / _MIB) * _MIB
    room = raised_vmem_limit(chip)
    current = None if found.group(1) == "None" else int(found.group(1).replace("_", ""))
    if limit > room or (current is not None and current >= limit):
        return None
    change = (f"{FIX_PREFIX} {limit:,} B ({limit // _MIB} MiB): the TPU compiler counted "
              f"{asked / _MIB:.2f} MiB of scoped VMEM for these blocks, within the chip's "
              f"{room // _MIB} MiB of room, so the blocks are kept")
    raised = code[:found.start()] + f"VMEM_LIMIT_BYTES = {limit}" + code[found.end():]
    return _noted(raised, f"VMEM limit: {change}."), change


def _noted(code: str, note: str) -> str:
    """`code` with `note` as the last paragraph of its module docstring (unchanged without
    one), so the file says why its limit is what it is."""
    tree = pyast.parse(code)
    first = tree.body[0] if tree.body else None
    if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str) and first.end_lineno is not None):
        return code
    lines = code.splitlines(keepends=True)
    end = first.end_lineno - 1
    closing = lines[end].rfind('"""')
    if closing < 0:
        return code
    lines[end] = lines[end][:closing] + f"\n\n{note}" + lines[end][closing:]
    return "".join(lines)


def is_compiler_limit_fix(fix: object) -> bool:
    """Whether a fix-history entry's fix was this rung (the ladder does not count it)."""
    return str(fix or "").startswith(FIX_PREFIX)
