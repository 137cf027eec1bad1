"""One run's search graph as a PNG: a tidy tree, nodes coloured by speedup, failures named.

The root is the XLA baseline (1.0x); each other node is a trajectory, labelled with its
number in creation order (the report's node table lists the same numbers), its speedup
or the phase it failed in and why.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from matplotlib import colormaps
from matplotlib.cm import ScalarMappable
from matplotlib.colors import TwoSlopeNorm
from matplotlib.patches import FancyBboxPatch

from projections.report.model import RunReport
from projections.report.plots import BASELINE, FAILED, label_words, new_figure, save
from projections.searchgraph import Node

MAX_REASONS = 24
"""Beyond this many nodes the failure reasons stay in the node table, not on the drawing."""


def node_numbers(run: RunReport) -> dict[str, int]:
    """#0 is the root; trajectories are numbered in the order they were requested."""
    return {n.node_id: i for i, n in enumerate(run.graph.nodes)}


def layout(run: RunReport) -> dict[str, tuple[float, float]]:
    """Leaves on consecutive columns, each parent centred over its children, depth downwards."""
    graph = run.graph
    nodes = graph.state.nodes
    tops = [n for n in graph.nodes if n.parent_id is None or n.parent_id not in nodes]
    pos: dict[str, tuple[float, float]] = {}
    next_x = 0.0

    def place(node: Node, depth: int) -> float:
        nonlocal next_x
        children = [nodes[c] for c in node.children if c in nodes and c not in pos]
        if not children:
            x = next_x
            next_x += 1.0
        else:
            xs = [place(child, depth + 1) for child in children]
            x = (xs[0] + xs[-1]) / 2
        pos[node.node_id] = (x, -float(depth))
        return x

    for top in tops:
        if top.node_id not in pos:
            place(top, 0 if top.parent_id is None else 1)
    return pos


def graph_chart(run: RunReport, path: Path) -> Path:
    pos = layout(run)
    numbers = node_numbers(run)
    columns = max((x for x, _ in pos.values()), default=0.0) + 1
    levels = max((-y for _, y in pos.values()), default=0.0) + 1
    many = len(pos) > MAX_REASONS
    shown = max(columns, 3.0)  # a lone trajectory keeps the proportions of a small tree
    width, height = min(1.75 * shown + 1.5, 22), 1.0 + 1.45 * levels
    # Placed by hand: a layout engine would measure every label of the tree on each save.
    fig = new_figure(width, height, layout=None)
    bar_in = 1.1
    ax = fig.add_axes((0.01, 0.02, 1 - bar_in / width - 0.02, 1 - 0.45 / height - 0.02))
    cax = fig.add_axes((1 - 0.75 / width, 0.12, 0.12 / width, 0.72))
    ax.set_axis_off()

    speedups = [n.speedup for n in run.graph.nodes if n.status == "valid" and n.speedup]
    norm = TwoSlopeNorm(vmin=min([0.5, *speedups]) * 0.95, vcenter=1.0,
                        vmax=max([2.0, *speedups]) * 1.05)
    cmap = colormaps["RdYlGn"]
    best = run.graph.best

    for node in run.graph.nodes:
        if node.parent_id in pos and node.node_id in pos:
            (x0, y0), (x1, y1) = pos[node.parent_id], pos[node.node_id]  # type: ignore[index]
            ax.plot([x0, x0, x1, x1], [y0, (y0 + y1) / 2, (y0 + y1) / 2, y1], color="#9ca3af",
                    linewidth=1.2, zorder=1)
    for node in run.graph.nodes:
        x, y = pos[node.node_id]
        face, edge, text_colour = _colours(node, norm, cmap)
        width = 0.78
        box = FancyBboxPatch((x - width / 2, y - 0.2), width, 0.4,
                             boxstyle="round,pad=0.02,rounding_size=0.08", facecolor=face,
                             edgecolor=edge, linewidth=2.4 if best is node else 1.2, zorder=2)
        ax.add_patch(box)
        ax.text(x, y + 0.06, _title(node, numbers[node.node_id]), ha="center", va="center",
                fontsize=8.5, fontweight="bold", color=text_colour, zorder=3)
        ax.text(x, y - 0.1, _subtitle(node), ha="center", va="center", fontsize=7.5,
                color=text_colour, zorder=3)
        failure = run.node_failure(node.node_id) if node.status == "invalid" else None
        if failure is not None and not many:
            phase, error = failure
            reason = textwrap.shorten(error or "(no message)", 70, placeholder="...")
            ax.text(x, y - 0.27, "\n".join(textwrap.wrap(f"{phase}: {reason}", 26)[:3]),
                    ha="center", va="top", fontsize=6.5, color=FAILED, zorder=3)
        if best is node:
            ax.text(x + width / 2, y + 0.2, "★", ha="center", va="center", fontsize=13,
                    color="#ca8a04", zorder=4)

    middle = (columns - 1) / 2
    ax.set_xlim(middle - shown / 2 - 0.1, middle + shown / 2 + 0.1)
    ax.set_ylim(-(levels - 1) - 0.75, 0.4)
    bar = fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), cax=cax)
    bar.set_label(f"speedup over XLA ({label_words(run.label)})", fontsize=8)
    bar.ax.tick_params(labelsize=7)
    count = len(pos) - 1
    fig.text(0.01, 1 - 0.1 / height, f"{run.task} · {run.policy} · {count} "
             f"trajector{'y' if count == 1 else 'ies'}", ha="left", va="top", fontweight="bold",
             fontsize=10)
    return save(fig, path)


def _colours(node: Node, norm: TwoSlopeNorm, cmap: object) -> tuple[object, str, str]:
    if node.status == "root":
        return "#dbeafe", "#2563eb", "#1e3a8a"
    if node.status == "valid" and node.speedup is not None:
        return cmap(norm(node.speedup)), "#374151", "#111827"  # type: ignore[operator]
    if node.status == "invalid" and node.unjudged is None:
        return "#fee2e2", FAILED, "#7f1d1d"
    return "#f3f4f6", BASELINE, "#374151"


def _title(node: Node, number: int) -> str:
    if node.status == "root":
        return "XLA baseline"
    return f"#{number}" + (f" {_short_strategy(node.strategy)[:16]}" if node.strategy else "")


def _short_strategy(strategy: str) -> str:
    """A policy's hint `[lever=a+b class=c ...] text` as its levers (`a+b`); other text as is."""
    tag = re.match(r"\[lever=([^\s\]]+)[^\]]*\]", strategy)
    return tag.group(1) if tag else strategy


def _subtitle(node: Node) -> str:
    if node.status == "root":
        return "1.00x"
    if node.status == "valid" and node.speedup is not None:
        return f"{node.speedup:.2f}x"
    if node.unjudged:
        return node.unjudged
    if node.status == "invalid":
        return "failed"
    return node.status
