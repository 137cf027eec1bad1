"""`kernelgraph report`: one HTML page with PNG charts, rebuilt from the event log alone.

    build_report(log, out_dir, run_id=None) -> Path of out_dir/index.html

The page holds the fast_p curve per policy, search progression by depth and by
iteration, each run's search graph with node speedups and failure reasons, the per-task
table, wall time and tokens per phase, and each winner's source with its receipt. The
charts are PNG files in the same folder, referenced by relative paths, so the folder can
be moved or served as it is.
"""

from __future__ import annotations

from pathlib import Path

from eventstore.log import EventLog
from projections.report.graphplot import graph_chart
from projections.report.html import render
from projections.report.model import ReportData, ReportError, RunReport, load
from projections.report.plots import fast_p_chart, phase_chart, progression_chart

__all__ = ["ReportData", "ReportError", "RunReport", "build_report", "load"]


def build_report(log: EventLog, out_dir: Path, run_id: str | None = None) -> Path:
    """Write index.html and its charts into `out_dir` (created if missing)."""
    data = load(log, run_id)
    out_dir.mkdir(parents=True, exist_ok=True)
    images = _charts(data, out_dir)
    page = out_dir / "index.html"
    tmp = page.with_suffix(".html.tmp")
    tmp.write_text(render(data, images), encoding="utf-8")
    tmp.replace(page)
    return page


def _charts(data: ReportData, out_dir: Path) -> dict[str, str]:
    """Every chart the page shows, by key, as a path relative to the page."""
    images: dict[str, str] = {}

    def put(key: str, path: Path) -> None:
        images[key] = path.relative_to(out_dir).as_posix()

    results = data.metrics.results()
    labels = sorted({r.label for r in data.runs if r.label})
    for label in labels:
        curves: dict[str, list[float | None]] = {}
        for run in data.runs:
            if run.label == label and run.run_id in results:
                curves.setdefault(run.policy, []).append(results[run.run_id].result)
        if curves:
            put(f"fast_p:{label}", fast_p_chart(curves, label, out_dir / f"fast_p-{label}.png"))
        runs = [r for r in data.runs if r.label == label]
        put(f"progression:{label}", progression_chart(runs, label, out_dir / f"progression-{label}.png"))
    for run in data.runs:
        put(f"graph:{run.run_id}", graph_chart(run, out_dir / f"graph-{run.run_id}.png"))
    summary = data.metrics.summary()
    walls = {phase: w["total"] for phase, w in summary["phase_wall_s"].items()}
    tokens = {phase: t["tokens"] for phase, t in summary["phase_tokens"].items()}
    put("phases", phase_chart(walls, tokens, out_dir / "phases.png"))
    return images
