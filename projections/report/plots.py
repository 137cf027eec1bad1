"""The report's charts as PNG files: fast_p curves, search progression, phase costs.

Matplotlib through its Agg canvas on `Figure` objects (no pyplot, no global state, no
display). A chart never mixes simulated and real speedups: callers pass runs of one
`measured_on` label, and the label is in every title and axis.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from projections.metrics import FAST_P, fast_p
from projections.report.model import RunReport

DPI = 110
PALETTE = ("#2563eb", "#d97706", "#059669", "#db2777", "#7c3aed", "#0891b2", "#65a30d",
           "#dc2626", "#4b5563", "#a16207")
FAILED = "#b91c1c"
BASELINE = "#6b7280"
PHASE_ORDER = ("test_synth", "baseline", "plan", "implement", "compile", "fix", "test",
               "autotune", "profile", "verify")
MAX_LEGEND_RUNS = 8


def label_words(label: str | None) -> str:
    """How a `measured_on` label reads in a chart: simulated, or measured on a device."""
    return {"simulated": "simulated", "real": "measured"}.get(label or "", label or "unlabelled")


def new_figure(width: float, height: float, *, layout: str | None = "constrained") -> Figure:
    fig = Figure(figsize=(width, height), dpi=DPI, layout=layout)
    FigureCanvasAgg(fig)
    return fig


def save(fig: Figure, path: Path) -> Path:
    # zlib level 2: a fraction of the default's encoding time, files a little larger.
    fig.savefig(path, format="png", dpi=DPI, facecolor="white", pil_kwargs={"compress_level": 2})
    return path


def _style(ax: object) -> None:
    ax.spines[["top", "right"]].set_visible(False)  # type: ignore[attr-defined]
    ax.grid(True, color="#e5e7eb", linewidth=0.8)  # type: ignore[attr-defined]
    ax.set_axisbelow(True)  # type: ignore[attr-defined]


def fast_p_chart(curves: dict[str, list[float | None]], label: str | None, path: Path) -> Path:
    """fast_p(p) for p in [0, 4], one line per policy; `curves` maps policy -> run results."""
    fig = new_figure(9.5, 4.2)
    ax = fig.add_subplot()
    grid = np.linspace(0.0, 4.0, 401)
    for i, (policy, results) in enumerate(sorted(curves.items())):
        colour = PALETTE[i % len(PALETTE)]
        ys = [fast_p(results, float(p)) for p in grid]
        ax.plot(grid, ys, drawstyle="steps-post", color=colour, linewidth=2.2,
                label=f"{policy} ({len(results)} run{'s' if len(results) != 1 else ''})")
        ax.plot(FAST_P, [fast_p(results, p) for p in FAST_P], "o", color=colour, markersize=5)
    ax.axvline(1.0, color=BASELINE, linestyle="--", linewidth=1)
    ax.text(1.02, 1.03, "XLA baseline", color=BASELINE, fontsize=8, va="bottom")
    ax.set_xlim(0, 4)
    ax.set_ylim(-0.02, 1.08)
    ax.set_xlabel(f"speedup threshold p ({label_words(label)})")
    ax.set_ylabel("fast_p: share of tasks correct\nwith speedup > p")
    ax.set_title(f"fast_p over p, {label_words(label)} speedups", loc="left", fontweight="bold")
    ax.legend(title="policy", frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    _style(ax)
    return save(fig, path)


def _run_name(run: RunReport) -> str:
    return f"{run.task} · {run.policy} · {run.run_id[-6:]}"


def progression_chart(runs: Sequence[RunReport], label: str | None, path: Path) -> Path:
    """Best speedup so far, by search depth and by kernel (iteration) order, per run."""
    fig = new_figure(11, 4.6 + 0.18 * (min(len(runs), MAX_LEGEND_RUNS) // 4))
    by_depth, by_kernel = fig.subplots(1, 2)
    any_valid = False
    top, depth_max, kernel_max = 1.0, 1, 1
    for i, run in enumerate(runs):
        colour = PALETTE[i % len(PALETTE)]
        name = _run_name(run) if len(runs) <= MAX_LEGEND_RUNS else None
        any_valid |= _depth_series(by_depth, run, colour, name)
        _kernel_series(by_kernel, run, colour)
        top = max([top, *(k.speedup for k in run.kernels if k.speedup is not None)])
        depth_max = max([depth_max, *(n.depth for n in run.graph.nodes)])
        kernel_max = max(kernel_max, len(run.kernels))
    words = label_words(label)
    for ax, xlabel, title, right in (
        (by_depth, "search depth (trajectories from the root)", "by depth", depth_max),
        (by_kernel, "candidate kernel, in the order written", "by iteration", kernel_max),
    ):
        ax.axhline(1.0, color=BASELINE, linestyle="--", linewidth=1)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"speedup over XLA ({words})")
        ax.set_title(f"best speedup so far, {title}", loc="left", fontweight="bold")
        ax.set_ylim(-0.1, top * 1.15 + 0.05)
        ax.set_xlim(0.5, right + 0.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
        _style(ax)
    by_kernel.plot([], [], "x", color=FAILED, label="failed kernel (no speedup)")
    by_kernel.plot([], [], "--", color=BASELINE, label="XLA baseline (1.0x)")
    handles, names = by_depth.get_legend_handles_labels()
    more, more_names = by_kernel.get_legend_handles_labels()
    fig.legend(handles + more, names + more_names, loc="outside lower center", frameon=False,
               fontsize=8, ncols=min(4, len(names) + len(more_names)))
    if not any_valid:
        for ax in (by_depth, by_kernel):
            ax.text(0.5, 0.5, "no correct kernel yet", transform=ax.transAxes, ha="center",
                    color=FAILED, fontsize=11)
    return save(fig, path)


def _depth_series(ax: object, run: RunReport, colour: str, name: str | None) -> bool:
    nodes = [n for n in run.graph.nodes if n.status != "root"]
    if not nodes:
        return False
    depths = range(1, max(n.depth for n in nodes) + 1)
    best: float | None = None
    xs, ys = [], []
    for d in depths:
        for n in nodes:
            if n.depth == d and n.status == "valid" and n.speedup is not None:
                best = n.speedup if best is None else max(best, n.speedup)
        if best is not None:
            xs.append(d)
            ys.append(best)
    valid = [(n.depth, n.speedup) for n in nodes if n.status == "valid" and n.speedup is not None]
    failed = [n.depth for n in nodes if n.status == "invalid" and n.unjudged is None]
    if valid:
        ax.scatter(*zip(*valid, strict=True), color=colour, alpha=0.35, s=22)  # type: ignore[attr-defined]
    if failed:
        ax.scatter(failed, [0.0] * len(failed), marker="x", color=FAILED, s=28)  # type: ignore[attr-defined]
    if xs:
        ax.plot(xs, ys, "-o", color=colour, linewidth=2, markersize=5, label=name)  # type: ignore[attr-defined]
    return bool(xs)


def _kernel_series(ax: object, run: RunReport, colour: str) -> None:
    best: float | None = None
    xs, ys = [], []
    for k in run.kernels:
        if k.valid and k.speedup is not None:
            best = k.speedup if best is None else max(best, k.speedup)
        if best is not None:
            xs.append(k.order)
            ys.append(best)
    valid = [(k.order, k.speedup) for k in run.kernels if k.valid and k.speedup is not None]
    failed = [k.order for k in run.kernels if not k.valid]
    if valid:
        ax.scatter(*zip(*valid, strict=True), color=colour, alpha=0.35, s=22)  # type: ignore[attr-defined]
    if failed:
        ax.scatter(failed, [0.0] * len(failed), marker="x", color=FAILED, s=28)  # type: ignore[attr-defined]
    if xs:
        ax.plot(xs, ys, drawstyle="steps-post", color=colour, linewidth=2)  # type: ignore[attr-defined]
        ax.plot(xs[-1:], ys[-1:], "o", color=colour, markersize=5)  # type: ignore[attr-defined]


def phase_order(phases: Sequence[str]) -> list[str]:
    """The pipeline's order, then anything else (an agent's name) alphabetically."""
    known = [p for p in PHASE_ORDER if p in phases]
    return known + sorted(p for p in phases if p not in PHASE_ORDER)


def phase_chart(wall_s: dict[str, float], tokens: dict[str, int], path: Path) -> Path:
    """Wall time and LLM tokens per phase, side by side, in pipeline order."""
    phases = phase_order(sorted(set(wall_s) | set(tokens)))
    fig = new_figure(11, 0.9 + 0.32 * max(len(phases), 3))
    wall_ax, token_ax = fig.subplots(1, 2, sharey=True)
    ys = np.arange(len(phases))
    walls = [wall_s.get(p, 0.0) for p in phases]
    toks = [tokens.get(p, 0) for p in phases]
    wall_ax.barh(ys, walls, color=PALETTE[0])
    token_ax.barh(ys, toks, color=PALETTE[1])
    wall_ax.set_yticks(ys, phases)
    wall_ax.invert_yaxis()
    for ax, values, unit, title in ((wall_ax, walls, "s", "wall time per phase"),
                                    (token_ax, toks, "", "LLM tokens per phase")):
        top = max(values, default=0) or 1
        for y, v in zip(ys, values, strict=True):
            if v:
                ax.text(v + top * 0.01, y, f"{v:,.1f} s" if unit else f"{v:,}", va="center",
                        fontsize=8, color="#374151")
        ax.set_xlim(0, top * 1.18)
        ax.set_title(title, loc="left", fontweight="bold")
        _style(ax)
        ax.grid(axis="y", visible=False)
    wall_ax.set_xlabel("seconds (sum over events)")
    token_ax.set_xlabel("tokens in + out")
    return save(fig, path)
