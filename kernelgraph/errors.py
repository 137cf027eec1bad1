"""The root of every exception kernelgraph raises on purpose.

One root lets a caller tell "the project refused this input or state, and says why" from
"something broke": the CLI catches `KernelgraphError` and reports it as a usage error
(exit 2), while any other exception is a bug and keeps its traceback. Each project
exception also keeps its standard base (`ValueError`, `KeyError`, `RuntimeError`), so code
that catches those still works. This module imports nothing at load, so every package (the
evaluator's sandboxed child included) can depend on it cheaply.
"""

from __future__ import annotations


class KernelgraphError(Exception):
    """An error kernelgraph raises deliberately, with a message meant for the user."""


def first_line(text: str, width: int = 1000) -> str:
    """A reason's first line for a person: whole up to `width` (a refusal's estimate and the
    `--scale` that fits come at its end), shortened at a word past it, never cut mid-word."""
    lines = text.strip().splitlines()
    if not lines:
        return ""
    if len(lines[0]) <= width:
        return lines[0]
    import textwrap

    return textwrap.shorten(lines[0], width, placeholder=" ...")


__all__ = ["KernelgraphError", "first_line"]
