"""The report page: one HTML file, no scripts, charts as PNG files beside it.

Every speedup is shown with its label (simulated or measured); the two are never pooled.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from html import escape
from typing import Any

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import JsonLexer, PythonLexer

from projections.metrics import FAST_P
from projections.report.graphplot import node_numbers
from projections.report.model import ReportData, RunReport, Winner
from projections.report.plots import label_words, phase_order
from projections.report.style import CSS

DASH = "&ndash;"
_FORMATTER = HtmlFormatter(noclasses=True, style="friendly", nowrap=True)


def _x(value: float | None) -> str:
    return DASH if value is None else f"{value:.2f}x"


def _rate(value: float | None) -> str:
    return DASH if value is None else f"{100 * value:.0f}%"


def _num(value: float | None, digits: int = 0) -> str:
    return DASH if value is None else f"{value:,.{digits}f}"


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


def badge(label: str | None) -> str:
    words = label_words(label)
    kind = {"simulated": "sim", "measured": "real"}.get(words, "other")
    return f'<span class="badge {kind}">{escape(words)}</span>'


def _table(head: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "") -> str:
    """Cells are HTML already (escaped by the caller)."""
    th = "".join(f"<th>{h}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


def _figure(src: str, alt: str, caption: str = "") -> str:
    cap = f"<figcaption>{caption}</figcaption>" if caption else ""
    return f'<figure><img src="{escape(src)}" alt="{escape(alt)}">{cap}</figure>'


def _tiles(data: ReportData) -> str:
    summary = data.metrics.summary()
    blocks = []
    for label, s in summary["by_measured_on"].items():
        tiles = [
            ("runs", f"{s['runs']}"),
            ("kernels compiled", _rate(s["compile_rate"])),
            ("kernels correct", _rate(s["correctness_rate"])),
            ("geomean speedup, floored", _x(s["geomean_speedup"])),
            ("fast_1", _rate(s["fast_p"].get("1"))),
        ]
        cells = "".join(f'<div class="tile"><div class="v">{v}</div><div class="k">{escape(k)}</div>'
                        "</div>" for k, v in tiles)
        blocks.append(f'<div class="tiles"><div class="tile-label">{badge(label)}</div>{cells}</div>')
    tokens = summary["tokens"]
    wall = sum(r.wall_s for r in data.runs)
    extra = [("LLM tokens", _num(tokens["total"])),
             ("tokens / correct kernel", _num(tokens["per_correct_kernel"])),
             ("wall time", f"{wall / 60:,.1f} min")]
    cells = "".join(f'<div class="tile"><div class="v">{v}</div><div class="k">{escape(k)}</div></div>'
                    for k, v in extra)
    blocks.append(f'<div class="tiles"><div class="tile-label"><span class="badge other">cost'
                  f"</span></div>{cells}</div>")
    return "".join(blocks)


def _fast_p_section(data: ReportData, images: dict[str, str]) -> str:
    by_policy = data.metrics.by_policy()
    parts = []
    labels = sorted({lb for per in by_policy.values() for lb in per})
    for label in labels:
        rows = []
        for policy, per_label in by_policy.items():
            if label in per_label:
                s = per_label[label]
                rows.append([escape(policy), str(s["runs"]), str(s["correct_runs"]),
                             _x(s["best_speedup"]), _x(s["geomean_speedup"]),
                             *(_rate(s["fast_p"][f"{p:g}"]) for p in FAST_P)])
        head = ["policy", "runs", "correct", "best", "geomean (floored)",
                *(f"fast<sub>{p:g}</sub>" for p in FAST_P)]
        parts.append(_figure(images[f"fast_p:{label}"], f"fast_p curve, {label_words(label)}",
                             f"Share of tasks whose verified kernel is correct and more than p times "
                             f"faster than XLA, for every threshold p; {badge(label)} speedups."))
        parts.append(_table(head, rows, "num"))
        parts.append(_efficiency_table(by_policy, label))
    if not labels:
        parts.append('<p class="muted">No run has a result to count yet.</p>')
    return "".join(parts)


def _efficiency_table(by_policy: dict[str, dict[str, dict[str, Any]]], label: str) -> str:
    """How each policy spent its candidates (`projections.metrics`: one definition)."""
    rows = []
    for policy, per_label in by_policy.items():
        e = per_label.get(label, {}).get("efficiency")
        if e is None:
            continue
        rows.append([escape(policy), str(e["candidates"]), str(e["judged"]),
                     str(e["distinct_kernels"]), _num(e["distinct_per_candidate"], 2),
                     str(e["tested_twice"]), _num(e["mean_candidates_to_best"], 1),
                     _x(e["best_over_first"]), str(e["climbed"])])
    head = ["policy", "candidates", "judged", "distinct kernels", "distinct / candidate",
            "tested twice", "candidates to best", "best / first", "runs climbed &ge;1.10x"]
    return ('<p class="muted">Search efficiency: a candidate judged before is cited, not '
            'tested again; best / first is the best valid speedup over the first valid '
            'candidate\'s.</p>' + _table(head, rows, "num"))


def _task_rows(data: ReportData) -> Iterable[list[str]]:
    for run in data.runs:
        kernels = len(run.kernels)
        compiled = sum(k.compiled for k in run.kernels)
        correct = sum(k.valid for k in run.kernels)
        result = run.stats.result if run.stats.counted else None
        verdict = DASH
        if run.winner is not None:
            ok = run.winner.verdict == "pass"
            verdict = (f'<a href="#winner-{escape(run.run_id)}" class="{"ok" if ok else "bad"}">'
                       f"{escape(run.winner.verdict)}</a>")
        yield [
            f"<b>{escape(run.task)}</b>", f'<code title="{escape(run.run_id)}">{escape(run.run_id[-8:])}</code>',
            escape(run.policy), escape(run.target), escape(run.status),
            _yes(compiled > 0, f"{compiled}/{kernels}"), _yes(correct > 0, f"{correct}/{kernels}"),
            _speedup_cell(result), badge(run.label), verdict,
        ]


def _speedup_cell(value: float | None) -> str:
    """A regression (below 1.0x) reads as one: a user would keep the XLA baseline."""
    if value is None:
        return DASH
    cls = "ok" if value >= 1.0 else "warn"
    note = "" if value >= 1.0 else ' <small class="warn">slower than XLA</small>'
    return f'<b class="{cls}">{_x(value)}</b>{note}'


def _yes(ok: bool, detail: str) -> str:
    return f'<span class="{"ok" if ok else "bad"}">{"yes" if ok else "no"}</span> <small>{detail}</small>'


def _graph_section(run: RunReport, src: str) -> str:
    numbers = node_numbers(run)
    best = run.graph.best
    rows = []
    for node in run.graph.nodes:
        if node.status == "root":
            continue
        failure = run.node_failure(node.node_id) if node.status == "invalid" else None
        why = "" if failure is None else f"<b>{escape(failure[0])}</b>: {escape(failure[1] or '(no message)')}"
        parent = numbers.get(node.parent_id or "")
        rows.append([
            f"#{numbers[node.node_id]}" + (" ★" if best is node else ""),
            "root" if parent == 0 else (f"#{parent}" if parent is not None else DASH),
            escape(node.strategy) or DASH, str(node.iterations_done),
            node.unjudged or escape(node.status),
            _x(node.speedup if node.status == "valid" else None), f'<div class="why">{why}</div>',
        ])
    table = _table(["node", "parent", "strategy", "iterations", "status", "speedup", "failure"],
                   rows, "nodes")
    stop = f" Stopped: {escape(run.graph.state.stopped)}." if run.graph.state.stopped else ""
    return (f'<h3 id="graph-{escape(run.run_id)}">{escape(run.task)} <small>· {escape(run.policy)} · '
            f"{escape(run.run_id)} · {badge(run.label)}</small></h3>"
            f'<p class="muted">{len(rows)} trajector{"y" if len(rows) == 1 else "ies"}, '
            f"status {escape(run.status)}.{stop}</p>"
            + _figure(src, f"search graph of run {run.run_id}") + table)


def _phase_section(data: ReportData, src: str) -> str:
    summary = data.metrics.summary()
    walls = summary["phase_wall_s"]
    tokens = summary["phase_tokens"]
    rows = []
    for phase in phase_order(sorted(set(walls) | set(tokens))):
        w, t = walls.get(phase, {}), tokens.get(phase, {})
        rows.append([escape(phase), str(w.get("count", 0)), _num(w.get("total"), 1),
                     _num(w.get("mean"), 2), str(t.get("llm_calls", 0)), _num(t.get("tokens", 0))])
    return (_figure(src, "wall time and tokens per phase")
            + _table(["phase", "events", "wall s (total)", "wall s (mean)", "LLM calls", "tokens"],
                     rows, "num"))


def _winner_section(run: RunReport) -> str:
    w = run.winner
    head = (f'<h3 id="winner-{escape(run.run_id)}">{escape(run.task)} <small>· {escape(run.policy)} · '
            f"{escape(run.run_id)}</small></h3>")
    if w is None:
        return head + f'<p class="muted">No verified winner ({escape(run.reason or run.status)}).</p>'
    facts = _receipt_facts(w)
    code = (f'<pre class="code">{highlight(w.code, PythonLexer(), _FORMATTER)}</pre>' if w.code
            else '<p class="muted">The kernel source is not in this log.</p>')
    receipt = ""
    if w.receipt_text is not None:
        pretty = json.dumps(w.receipt, indent=2, sort_keys=True) if w.receipt else w.receipt_text
        receipt = (f"<details><summary>full receipt (JSON, sha256 {escape(w.receipt_sha256[:16])}…)"
                   f'</summary><pre class="code">{highlight(pretty, JsonLexer(), _FORMATTER)}</pre>'
                   "</details>")
    else:
        receipt = '<p class="muted">The receipt artifact is not in this log.</p>'
    return head + _table(["", ""], facts, "kv") + code + receipt


def _receipt_facts(w: Winner) -> list[list[str]]:
    verdict_cls = "ok" if w.verdict == "pass" else "bad"
    facts = [
        ["verdict", f'<b class="{verdict_cls}">{escape(w.verdict)}</b>'
                    + (f" — {escape('; '.join(w.reasons))}" if w.reasons else "")],
        ["speedup", f"{_speedup_cell(w.speedup)} {badge(w.measured_on)}"],
        ["node", f"<code>{escape(w.node_id)}</code>"],
        ["config", f"<code>{escape(json.dumps(w.config, sort_keys=True))}</code>"],
        ["kernel sha256", f"<code>{escape(w.code_sha256 or '')}</code>" if w.code_sha256 else DASH],
        ["receipt sha256", f"<code>{escape(w.receipt_sha256)}</code>"],
    ]
    r = w.receipt or {}
    m = r.get("measurement") or {}
    if m:
        facts.append(["latency / XLA", f"{_num((m.get('latency_s') or 0) * 1e6, 2)} µs / "
                                       f"{_num((m.get('baseline_s') or 0) * 1e6, 2)} µs"])
    if r.get("suite"):
        facts.append(["test suite", f"{r['suite'].get('cases', '?')} cases, sha256 "
                                    f"<code>{escape(str(r['suite'].get('sha256', ''))[:16])}…</code>"])
        notes = [str(n) for n in r["suite"].get("notes") or []]
        if notes:  # what the suite could not cover (tails not exercised) is shown, not buried
            facts.append(["suite notes", "<br>".join(
                f'<b class="bad">{escape(n)}</b>' if "NOT" in n else escape(n) for n in notes)])
    sig = r.get("signature") or {}
    if sig:
        facts.append(["signed", f"{escape(str(sig.get('algorithm', '')))}, key "
                                f"<code>{escape(str(sig.get('key_fingerprint', '')))}</code>"])
    return facts


def _weak_sandbox_note(runs: Sequence[RunReport]) -> str:
    """A warning above everything when some run's candidates ran without the full sandbox."""
    weak = [r.run_id for r in runs if r.weak_sandbox]
    if not weak:
        return ""
    return ('<p class="note"><b class="bad">Weak sandbox:</b> the candidates of '
            + ", ".join(f"<code>{escape(r)}</code>" for r in weak)
            + " ran without the full sandbox (own namespaces, uid 65534, read-only filesystem, "
            "private /tmp), because the user passed --allow-weak-sandbox "
            "(KG_ALLOW_WEAK_SANDBOX=1).</p>\n")


def render(data: ReportData, images: dict[str, str]) -> str:
    runs = data.runs
    labels = sorted({r.label for r in runs if r.label})
    progression = "".join(
        _figure(images[f"progression:{label}"], f"search progression, {label_words(label)}",
                f"{badge(label)} runs: lines are the best speedup so far, dots every evaluated "
                "trajectory (left) or correct kernel (right), crosses the kernels that failed.")
        for label in labels) or '<p class="muted">No trajectory has been evaluated yet.</p>'
    graphs = "".join(_graph_section(run, images[f"graph:{run.run_id}"]) for run in runs)
    winners = "".join(_winner_section(run) for run in runs)
    sim_note = ("Speedups marked <span class=\"badge sim\">simulated</span> come from an analytic "
                "roofline model of the lowered kernel on a sim-* target, never from a device; "
                "<span class=\"badge real\">measured</span> ones were timed on the device. The two "
                "are never averaged together.")
    nav = "".join(f'<a href="#{a}">{t}</a>' for a, t in (
        ("fast-p", "fast_p"), ("tasks", "tasks"), ("progression", "progression"),
        ("graphs", "search graphs"), ("costs", "costs"), ("winners", "winners")))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>kernelgraph report: {escape(data.db.name)}</title>
<style>{CSS}</style></head>
<body><header><div class="wrap">
<h1>kernelgraph report</h1>
<p class="sub">{len(runs)} run{'s' if len(runs) != 1 else ''} from <code>{escape(str(data.db))}</code>
 · {escape(_when(min(r.first_ts for r in runs)))} to {escape(_when(max(r.last_ts for r in runs)))}</p>
<nav>{nav}</nav></div></header>
<main class="wrap">
{_weak_sandbox_note(runs)}<p class="note">{sim_note}</p>
{_tiles(data)}
<section id="fast-p"><h2>fast_p</h2>{_fast_p_section(data, images)}</section>
<section id="tasks"><h2>Tasks</h2>
{_table(["task", "run", "policy", "target", "status", "compiled", "correct", "speedup",
         "figures", "verified"], _task_rows(data), "tasks")}
<p class="muted">Compiled and correct count candidate kernels (one per iteration). The speedup is
the verified winner's once a run has finished, else the best correct trajectory's so far.</p></section>
<section id="progression"><h2>Search progression</h2>{progression}</section>
<section id="graphs"><h2>Search graphs</h2>{graphs}</section>
<section id="costs"><h2>Where time and tokens go</h2>{_phase_section(data, images["phases"])}</section>
<section id="winners"><h2>Winners</h2>{winners}</section>
</main><footer class="wrap">Rebuilt from the event log alone by <code>kernelgraph report</code>
 at {escape(_when(datetime.now(UTC).timestamp()))}.</footer></body></html>
"""
