"""The jaxpr rewrites made before a task is classified and its body written out: each
replaces ops a kernel body cannot carry, or work it need not do, by ops that compute the
same (`windows`: a pooling window as a pooling matmul; `cumulative`: a cumsum as a
triangular matmul; `linear_sums`: a sum over a dot's free axis taken before the dot).
"""

from __future__ import annotations

from typing import Any

from agents.llm.offline import linear_sums
from agents.llm.offline.jaxpr_source import flatten


def rewritten(closed: Any) -> Any:
    """`closed` with every rewrite that applies made (module doc), else as it is."""
    primitives = {e.primitive.name for e in flatten(closed)[1]}
    if primitives & {"reduce_window_sum", "cumsum"}:
        from agents.llm.offline import cumulative, windows

        for rewrite in (windows.without_windows, cumulative.without_cumsums):
            closed = rewrite(closed) or closed
    if {"dot_general", "reduce_sum"} <= primitives:
        closed = linear_sums.without_summed_dots(closed) or closed
    return closed
