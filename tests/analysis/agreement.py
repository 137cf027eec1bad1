"""One definition of each figure: the SQL views must say what the Python projections say."""

from __future__ import annotations

from typing import Any

import pytest

from eventstore.log import EventLog
from eventstore.views import FAST_P_POINTS, fast_p_column
from projections import FAST_P, BestOfN, Metrics, fast_p


def _rows(log: EventLog, query: str) -> list[dict[str, Any]]:
    names, rows = log.query(query)  # column names are part of what is checked
    return [dict(zip(names, row, strict=True)) for row in rows]


def _close(sql: float | None, py: float | None) -> bool:
    if sql is None or py is None:
        return sql is None and py is None
    return sql == pytest.approx(py, rel=1e-9, abs=1e-12)


def check_views_agree(log: EventLog) -> dict[str, int]:
    """Assert every figure agrees; returns how many values of each kind were compared."""
    log.sql("SELECT 1")  # make the current views
    metrics = Metrics().apply_all(log.events())
    summary = metrics.summary()
    compared = {"labels": 0, "runs": 0, "policies": 0, "phases": 0, "failures": 0}
    assert FAST_P == FAST_P_POINTS

    sql_labels = {r["measured_on"]: r for r in _rows(log, "SELECT * FROM metrics_summary")}
    assert set(sql_labels) == set(summary["by_measured_on"])
    for label, py in summary["by_measured_on"].items():
        sql = sql_labels[label]
        for key in ("runs", "kernels", "nodes"):
            assert sql[key] == py[key], (label, key)
        for key in ("compile_rate", "correctness_rate", "node_compile_rate",
                    "node_correctness_rate", "geomean_speedup"):
            assert _close(sql[key], py[key]), (label, key, sql[key], py[key])
        for p in FAST_P:
            assert _close(sql[fast_p_column(p)], py["fast_p"][f"{p:g}"]), (label, p)
        compared["labels"] += 1

    runs = {r["run_id"]: r for r in _rows(log, "SELECT * FROM run_results")}
    assert set(runs) == set(metrics.state.runs)
    for run_id, stats in metrics.state.runs.items():
        sql = runs[run_id]
        assert (sql["measured_on"], sql["counted"], sql["policy"]) == (
            stats.label, stats.counted, stats.policy), run_id
        assert _close(sql["speedup"], stats.result), run_id
        compared["runs"] += 1

    by_policy = metrics.by_policy()
    speedups = _rows(log, "SELECT * FROM policy_speedups")
    assert {(r["policy"], r["measured_on"]) for r in speedups} == {
        (p, lb) for p, per in by_policy.items() for lb in per}
    for r in speedups:
        py = by_policy[r["policy"]][r["measured_on"]]
        assert (r["runs"], r["correct_runs"]) == (py["runs"], py["correct_runs"])
        assert _close(r["best_speedup"], py["best_speedup"])
        assert _close(r["geomean_speedup"], py["geomean_speedup"])
        compared["policies"] += 1
    curve = _rows(log, "SELECT * FROM fast_p_curve")
    results = {run_id: s.result for run_id, s in metrics.results().items()}
    for r in curve:
        group = [results[k] for k, s in metrics.results().items()
                 if (s.policy or "unknown", s.label) == (r["policy"], r["measured_on"])]
        assert _close(r["fast_p"], fast_p(group, r["p"])), r
        if r["p"] in FAST_P:
            assert _close(r["fast_p"], by_policy[r["policy"]][r["measured_on"]]["fast_p"][f"{r['p']:g}"])
    assert len(curve) == 81 * sum(len(per) for per in by_policy.values())

    (total,) = _rows(log, "SELECT * FROM token_costs WHERE policy = '*'")
    tokens = summary["tokens"]
    assert total["tokens"] == tokens["total"] and total["llm_calls"] == tokens["llm_calls"]
    assert _close(total["tokens_per_run"], tokens["per_run"])
    assert _close(total["tokens_per_correct_kernel"], tokens["per_correct_kernel"])

    phases = _rows(log, "SELECT phase, sum(events) AS events, sum(wall_s) AS wall_s, "
                        "sum(llm_calls) AS llm_calls, sum(tokens) AS tokens "
                        "FROM phase_costs GROUP BY phase")
    walls, phase_tokens = summary["phase_wall_s"], summary["phase_tokens"]
    assert {r["phase"] for r in phases} == set(walls) | set(phase_tokens)
    for r in phases:
        wall = walls.get(r["phase"], {"count": 0, "total": 0.0})
        spent = phase_tokens.get(r["phase"], {"llm_calls": 0, "tokens": 0})
        assert r["events"] == wall["count"] and _close(r["wall_s"], wall["total"]), r
        assert (r["llm_calls"], r["tokens"]) == (spent["llm_calls"], spent["tokens"]), r
        compared["phases"] += 1

    failed: dict[tuple[str, str], int] = {}
    for traj in BestOfN().apply_all(log.events()).trajectories:
        for it in traj.history:
            if not it.valid and not it.no_gain:
                key = (it.failed_phase or "unknown", it.measured_on)
                failed[key] = failed.get(key, 0) + 1
    rows = _rows(log, "SELECT * FROM phase_failures")
    assert {(r["failed_phase"], r["measured_on"]): r["failures"] for r in rows} == failed
    compared["failures"] = len(rows)
    return compared
