"""The report page's stylesheet, inlined so the page needs nothing from the network."""

from __future__ import annotations

CSS = """
:root { --ink: #111827; --muted: #6b7280; --line: #e5e7eb; --bg: #f8fafc; --card: #ffffff;
        --accent: #2563eb; --ok: #047857; --bad: #b91c1c; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans",
       sans-serif; color: var(--ink); background: var(--bg); }
.wrap { max-width: 1180px; margin: 0 auto; padding: 0 24px; }
header { background: #0f172a; color: #f8fafc; padding: 22px 0 14px; }
header h1 { margin: 0 0 4px; font-size: 24px; letter-spacing: -0.01em; }
header .sub { margin: 0 0 12px; color: #cbd5e1; }
header code { color: #e2e8f0; }
nav a { color: #93c5fd; margin-right: 18px; text-decoration: none; font-weight: 600; }
nav a:hover { text-decoration: underline; }
main { padding-top: 18px; }
section { background: var(--card); border: 1px solid var(--line); border-radius: 10px;
          padding: 6px 22px 18px; margin: 18px 0; }
h2 { font-size: 19px; margin: 14px 0 10px; }
h3 { font-size: 15px; margin: 22px 0 4px; }
h3 small { font-weight: 400; color: var(--muted); }
.note { background: #fffbeb; border: 1px solid #fde68a; border-radius: 8px; padding: 10px 14px;
        color: #78350f; margin: 0; }
.muted { color: var(--muted); }
.tiles { display: flex; flex-wrap: wrap; gap: 10px; align-items: stretch; margin: 14px 0 0; }
.tile-label { display: flex; align-items: center; min-width: 92px; }
.tile { flex: 1 1 120px; background: var(--card); border: 1px solid var(--line);
        border-radius: 10px; padding: 10px 14px; }
.tile .v { font-size: 22px; font-weight: 700; }
.tile .k { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 999px; font-size: 12px;
         font-weight: 600; vertical-align: 1px; }
.badge.sim { background: #fef3c7; color: #92400e; border: 1px solid #fcd34d; }
.badge.real { background: #d1fae5; color: #065f46; border: 1px solid #6ee7b7; }
.badge.other { background: #e0e7ff; color: #3730a3; border: 1px solid #a5b4fc; }
figure { margin: 10px 0 6px; }
figure img { display: block; max-width: 100%; height: auto; border: 1px solid var(--line);
             border-radius: 8px; }
figcaption { color: var(--muted); font-size: 13px; margin-top: 6px; }
table { border-collapse: collapse; width: 100%; margin: 10px 0; font-size: 13px; }
th { text-align: left; font-weight: 600; color: #374151; background: #f1f5f9;
     border-bottom: 1px solid var(--line); padding: 6px 8px; white-space: nowrap; }
td { border-bottom: 1px solid var(--line); padding: 6px 8px; vertical-align: top; }
table.num td:not(:first-child), table.num th:not(:first-child) { text-align: right; }
table.kv { width: auto; }
table.kv thead { display: none; }
table.kv td:first-child { color: var(--muted); padding-right: 18px; white-space: nowrap; }
.why { max-width: 560px; overflow-wrap: anywhere; color: #7f1d1d; font-size: 12px; }
.ok { color: var(--ok); font-weight: 600; }
.bad { color: var(--bad); font-weight: 600; }
.warn { color: #b45309; }
a.ok, a.bad { text-decoration: none; }
code { font: 12px/1.4 ui-monospace, "DejaVu Sans Mono", Menlo, monospace; }
pre.code { background: #f8fafc; border: 1px solid var(--line); border-radius: 8px;
           padding: 12px 14px; overflow: auto; max-height: 560px;
           font: 12px/1.45 ui-monospace, "DejaVu Sans Mono", Menlo, monospace; }
details summary { cursor: pointer; color: var(--accent); font-weight: 600; margin: 8px 0; }
footer { color: var(--muted); font-size: 12px; padding: 8px 24px 28px; }
"""
