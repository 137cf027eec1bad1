"""Pure folds over events: the search graph, best-of-N history, metrics, run views."""

from __future__ import annotations

from projections.base import Projection, handles
from projections.bestofn import BestOfN, IterationSnapshot, Trajectory
from projections.metrics import FAST_P, Metrics, fast_p, geomean_floored
from projections.replay import LogView
from projections.searchgraph import Node, SearchGraph

__all__ = [
    "FAST_P",
    "BestOfN",
    "IterationSnapshot",
    "LogView",
    "Metrics",
    "Node",
    "Projection",
    "SearchGraph",
    "Trajectory",
    "fast_p",
    "geomean_floored",
    "handles",
]
