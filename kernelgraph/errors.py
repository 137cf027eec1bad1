"""The root of every exception kernelgraph raises on purpose.

One root lets a caller tell "the project refused this input or state, and says why" from
"something broke": the CLI catches `KernelgraphError` and reports it as a usage error
(exit 2), while any other exception is a bug and keeps its traceback. Each project
exception also keeps its standard base (`ValueError`, `KeyError`, `RuntimeError`), so code
that catches those still works. This module imports nothing, so every package (the
evaluator's sandboxed child included) can depend on it cheaply.
"""

from __future__ import annotations


class KernelgraphError(Exception):
    """An error kernelgraph raises deliberately, with a message meant for the user."""


__all__ = ["KernelgraphError"]
