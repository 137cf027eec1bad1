"""SQL views over the log, for analysis with plain SQL, a notebook or a Parquet export.

Each figure has one definition, written down in `projections/metrics.py`; the views
compute the same figures in SQL and `tests/analysis/test_views.py` holds the two to
agreement on synthetic and real logs. Simulated and real figures stay apart: every
view that aggregates speedups groups by `measured_on`.

| view | one row per |
| --- | --- |
| `events_json` | event (the envelope as columns, the body as JSON) |
| `nodes` | requested trajectory, with its evaluation |
| `kernels` | candidate kernel (one per iteration, `IterationFinished`) |
| `run_results` | run: its request, label, result speedup, whether it counts |
| `metrics` | run and `measured_on` label (kernel rates, the run's speedup, tokens) |
| `metrics_summary` | `measured_on` label: the paper's figures over runs |
| `fast_p_curve` | policy, label and p in 0, 0.05 .. 4 |
| `policy_speedups` | policy and label: best and floored geometric-mean speedup |
| `phase_failures` | failed phase and label: how many kernels it failed |
| `token_costs` | policy (and `*` for the whole log): tokens per run and per correct kernel |
| `phase_costs` | run and phase: wall time and the LLM tokens spent on it |

A writable open stores the views in the file (so a plain `duckdb` session sees them) when
they are missing or out of date; a reader of a log whose stored views are older creates
temporary ones with the current definitions before its first query.
"""

from __future__ import annotations

import hashlib
from typing import Any

from eventstore.events import EVENT_TYPES, PRICE_PHASE

VIEW_NAMES: tuple[str, ...] = (
    "events_json", "nodes", "kernels", "run_results", "metrics", "metrics_summary",
    "fast_p_curve", "policy_speedups", "phase_failures", "token_costs", "phase_costs",
)

FAST_P_POINTS: tuple[float, ...] = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0)
"""The p of `metrics_summary`'s fast_p columns (the paper's); `projections.metrics.FAST_P`."""


def fast_p_column(p: float) -> str:
    """fast_0, fast_0_5, fast_1 ...: a column name for a p."""
    return "fast_" + f"{p:g}".replace(".", "_")


def _phase_of_type() -> str:
    """SQL mapping an event type to the agent phase it ends (`Event.phase`), else NULL."""
    arms = " ".join(
        f"WHEN '{cls.__struct_config__.tag}' THEN '{cls.phase}'"
        for cls in EVENT_TYPES if cls.phase is not None
    )
    return f"CASE type {arms} END"


def _j(field: str, sql_type: str | None = None, body: str = "body") -> str:
    if sql_type is None:
        return f"json_extract_string({body}, '$.{field}')"
    return f"CAST(json_extract({body}, '$.{field}') AS {sql_type})"


_EVENTS_JSON = f"""
SELECT seq, event_id, run_id, {_j('node_id')} AS node_id, type,
       {_j('v', 'INTEGER')} AS v, to_timestamp({_j('ts', 'DOUBLE')}) AS ts,
       {_j('producer')} AS producer, {_j('causation_id')} AS causation_id,
       body::JSON AS payload
FROM events
"""

_NODES = f"""
WITH requested AS (
    SELECT run_id, {_j('node_id')} AS node_id, seq, {_j('parent_id')} AS parent_id,
           {_j('strategy')} AS strategy, {_j('policy')} AS policy
    FROM events WHERE type = 'ExpansionRequested'
), evaluated AS (
    SELECT run_id, {_j('node_id')} AS node_id, arg_max(body, seq) AS body
    FROM events WHERE type = 'NodeEvaluated' GROUP BY ALL
)
SELECT r.run_id, r.node_id, r.parent_id, r.strategy, r.policy,
       {_j('compiled', 'BOOLEAN', 'e.body')} AS compiled,
       {_j('valid', 'BOOLEAN', 'e.body')} AS valid,
       {_j('speedup', 'DOUBLE', 'e.body')} AS speedup,
       {_j('latency_s', 'DOUBLE', 'e.body')} AS latency_s,
       {_j('measured_on', None, 'e.body')} AS measured_on,
       {_j('iterations', 'INTEGER', 'e.body')} AS iterations,
       {_j('code_sha256', None, 'e.body')} AS code_sha256,
       CASE WHEN e.body IS NULL THEN 'pending'
            WHEN {_j('valid', 'BOOLEAN', 'e.body')} THEN 'valid'
            ELSE 'invalid' END AS status
FROM requested r LEFT JOIN evaluated e USING (run_id, node_id)
ORDER BY r.run_id, r.seq
"""

# A kernel that is not valid failed somewhere: an iteration that ended without naming
# the phase is counted under 'unknown', never dropped. An iteration whose plan wrote no
# kernel (`no_gain`) is no kernel; one priced no faster than its parent (failed_phase
# 'price') was never tested, so correctness leaves it out (projections.metrics).
_PRICED_OUT = f"(NOT {_j('valid', 'BOOLEAN')} AND {_j('failed_phase')} = '{PRICE_PHASE}')"
_KERNELS = f"""
SELECT run_id, {_j('node_id')} AS node_id, {_j('iteration', 'INTEGER')} AS iteration, seq,
       to_timestamp({_j('ts', 'DOUBLE')}) AS ts, {_j('measured_on')} AS measured_on,
       {_j('compiled', 'BOOLEAN')} AS compiled, {_j('valid', 'BOOLEAN')} AS valid,
       NOT coalesce({_PRICED_OUT}, false) AS tested,
       {_j('speedup', 'DOUBLE')} AS speedup, {_j('latency_s', 'DOUBLE')} AS latency_s,
       CASE WHEN NOT {_j('valid', 'BOOLEAN')}
            THEN coalesce({_j('failed_phase')}, 'unknown') END AS failed_phase,
       {_j('error')} AS error, {_j('code_sha256')} AS code_sha256
FROM events WHERE type = 'IterationFinished' AND NOT coalesce({_j('no_gain', 'BOOLEAN')}, false)
"""

# A trajectory that wrote a kernel: not every iteration a plan that wrote none
# (projections.searchgraph.wrote_no_kernel).
_ITERATIONS = f"coalesce({_j('iterations', 'INTEGER')}, 0)"
_WROTE = (f"type = 'NodeEvaluated' AND NOT ({_ITERATIONS} > 0 AND "
          f"coalesce({_j('no_gain_plans', 'INTEGER')}, 0) >= {_ITERATIONS})")
# ... and tested one: not every kernel it wrote priced out (projections.searchgraph.tested_no_kernel)
_TESTED = (f"{_WROTE} AND NOT ({_ITERATIONS} - coalesce({_j('no_gain_plans', 'INTEGER')}, 0)"
           " <= priced_out)")

# The run's label is its baseline's (else its first evaluated node's, else its end's); its
# speedup is the verified winner's once finished, else the best valid node's so far, and
# only ever a figure of its own label. `counted`: the run has a label and a result to count.
_RUN_RESULTS = f"""
WITH priced AS (
    SELECT run_id, {_j('node_id')} AS node_id, count(*) AS priced_out FROM events
    WHERE type = 'IterationFinished' AND {_PRICED_OUT} GROUP BY ALL
), ev AS (
    SELECT e.run_id, e.seq, e.type, e.body, coalesce(p.priced_out, 0) AS priced_out
    FROM events e LEFT JOIN priced p
         ON e.type = 'NodeEvaluated' AND p.run_id = e.run_id AND p.node_id = {_j('node_id', None, 'e.body')}
    WHERE e.type IN ('RunRequested', 'BaselineMeasured', 'NodeEvaluated', 'RunFinished')
), per_run AS (
    SELECT run_id,
        arg_min({_j('task_name')}, seq) FILTER (WHERE type = 'RunRequested') AS task,
        arg_min({_j('policy')}, seq) FILTER (WHERE type = 'RunRequested') AS policy,
        arg_min({_j('target')}, seq) FILTER (WHERE type = 'RunRequested') AS target,
        arg_min({_j('provider')}, seq) FILTER (WHERE type = 'RunRequested') AS provider,
        arg_max({_j('measured_on')}, seq) FILTER (WHERE type = 'BaselineMeasured') AS baseline_label,
        arg_min({_j('measured_on')}, seq) FILTER (WHERE type = 'NodeEvaluated') AS node_label,
        arg_min({_j('measured_on')}, seq) FILTER (WHERE type = 'RunFinished') AS end_label,
        count(*) FILTER (WHERE {_WROTE}) AS nodes,
        count(*) FILTER (WHERE {_WROTE} AND {_j('compiled', 'BOOLEAN')}) AS nodes_compiled,
        count(*) FILTER (WHERE {_WROTE} AND {_j('valid', 'BOOLEAN')}) AS nodes_correct,
        count(*) FILTER (WHERE {_TESTED}) AS nodes_tested,
        count(*) FILTER (WHERE type = 'RunFinished') > 0 AS finished,
        arg_max({_j('status')}, seq) FILTER (WHERE type = 'RunFinished') AS status,
        arg_max_null({_j('speedup', 'DOUBLE')}, seq) FILTER (WHERE type = 'RunFinished') AS final_speedup,
        arg_max({_j('measured_on')}, seq) FILTER (WHERE type = 'RunFinished') AS final_label
    FROM ev GROUP BY run_id
), labelled AS (
    SELECT *, coalesce(baseline_label, node_label, end_label) AS measured_on FROM per_run
), best AS (
    SELECT l.run_id, max({_j('speedup', 'DOUBLE', 'ev.body')}) AS best_speedup
    FROM labelled l JOIN ev ON ev.run_id = l.run_id AND ev.type = 'NodeEvaluated'
    WHERE {_j('valid', 'BOOLEAN', 'ev.body')} AND {_j('measured_on', None, 'ev.body')} = l.measured_on
    GROUP BY l.run_id
), result AS (
    SELECT l.*, b.best_speedup,
           CASE WHEN l.finished THEN (CASE WHEN l.final_label = l.measured_on THEN l.final_speedup END)
                ELSE b.best_speedup END AS speedup
    FROM labelled l LEFT JOIN best b USING (run_id)
)
SELECT run_id, task, policy, target, provider, measured_on, status, finished,
       nodes, nodes_compiled, nodes_correct, nodes_tested, best_speedup, speedup,
       speedup IS NOT NULL AS correct,
       greatest(coalesce(speedup, 1.0), 1.0) AS floored_speedup,
       measured_on IS NOT NULL AND (finished OR nodes > 0) AS counted
FROM result
"""

_TOKENS_PER_RUN = f"""
SELECT run_id, count(*) AS llm_calls,
       sum({_j('tokens_in', 'BIGINT')} + {_j('tokens_out', 'BIGINT')}) AS tokens
FROM events WHERE type = 'LlmCalled' GROUP BY run_id
"""

_METRICS = f"""
WITH k AS (
    SELECT run_id, measured_on, count(*) AS kernels,
           avg(CASE WHEN compiled THEN 1.0 ELSE 0.0 END) AS compile_rate,
           count(*) FILTER (WHERE valid) / nullif(count(*) FILTER (WHERE tested), 0)
               AS correctness_rate
    FROM kernels GROUP BY ALL
), tokens AS ({_TOKENS_PER_RUN})
SELECT k.run_id, k.measured_on, k.kernels, k.compile_rate, k.correctness_rate,
       r.best_speedup, r.speedup, r.floored_speedup, coalesce(t.tokens, 0) AS llm_tokens
FROM k LEFT JOIN run_results r ON r.run_id = k.run_id AND r.measured_on = k.measured_on
       LEFT JOIN tokens t ON t.run_id = k.run_id
ORDER BY k.run_id, k.measured_on
"""


def _fast_p_columns() -> str:
    return ",\n       ".join(
        f"avg(CASE WHEN speedup > {p!r} THEN 1.0 ELSE 0.0 END) AS {fast_p_column(p)}"
        for p in FAST_P_POINTS
    )


_METRICS_SUMMARY = f"""
WITH k AS (
    SELECT measured_on, count(*) AS kernels,
           count(*) FILTER (WHERE compiled) AS compiled, count(*) FILTER (WHERE valid) AS correct,
           count(*) FILTER (WHERE tested) AS tested
    FROM kernels GROUP BY measured_on
), r AS (
    SELECT measured_on, count(*) AS runs, sum(nodes) AS nodes,
           sum(nodes_compiled) AS nodes_compiled, sum(nodes_correct) AS nodes_correct,
           sum(nodes_tested) AS nodes_tested,
           exp(avg(ln(floored_speedup))) AS geomean_speedup,
       {_fast_p_columns()}
    FROM run_results WHERE counted GROUP BY measured_on
), labels AS (
    SELECT measured_on FROM run_results WHERE measured_on IS NOT NULL
    UNION SELECT measured_on FROM kernels
)
SELECT l.measured_on, coalesce(r.runs, 0) AS runs, coalesce(k.kernels, 0) AS kernels,
       k.compiled / k.kernels AS compile_rate, k.correct / nullif(k.tested, 0) AS correctness_rate,
       coalesce(r.nodes, 0) AS nodes,
       r.nodes_compiled / nullif(r.nodes, 0) AS node_compile_rate,
       r.nodes_correct / nullif(r.nodes_tested, 0) AS node_correctness_rate,
       r.geomean_speedup, {', '.join('r.' + fast_p_column(p) for p in FAST_P_POINTS)}
FROM labels l LEFT JOIN k USING (measured_on) LEFT JOIN r USING (measured_on)
ORDER BY l.measured_on
"""

_FAST_P_CURVE = """
SELECT coalesce(policy, 'unknown') AS policy, measured_on, p, count(*) AS runs,
       avg(CASE WHEN speedup > p THEN 1.0 ELSE 0.0 END) AS fast_p
FROM run_results, (SELECT unnest(range(0, 401, 5)) / 100 AS p) grid
WHERE counted GROUP BY ALL ORDER BY ALL
"""

_POLICY_SPEEDUPS = """
SELECT coalesce(policy, 'unknown') AS policy, measured_on, count(*) AS runs,
       count(*) FILTER (WHERE correct) AS correct_runs, max(speedup) AS best_speedup,
       exp(avg(ln(floored_speedup))) AS geomean_speedup
FROM run_results WHERE counted GROUP BY ALL ORDER BY ALL
"""

_PHASE_FAILURES = """
SELECT failed_phase, measured_on, count(*) AS failures,
       count(*) / sum(count(*)) OVER (PARTITION BY measured_on) AS share_of_failures,
       arg_max(error, seq) AS last_error
FROM kernels WHERE NOT valid GROUP BY failed_phase, measured_on
ORDER BY measured_on, failures DESC, failed_phase
"""

_TOKEN_COSTS = f"""
WITH runs AS (
    SELECT run_id, coalesce(policy, 'unknown') AS policy FROM run_results
), tokens AS ({_TOKENS_PER_RUN}
), correct AS (
    SELECT run_id, count(*) FILTER (WHERE valid) AS correct_kernels FROM kernels GROUP BY run_id
), per_run AS (
    SELECT run_id, coalesce(r.policy, 'unknown') AS policy, r.run_id IS NOT NULL AS is_run,
           coalesce(t.llm_calls, 0) AS llm_calls, coalesce(t.tokens, 0) AS tokens,
           coalesce(c.correct_kernels, 0) AS correct_kernels
    FROM runs r FULL JOIN tokens t USING (run_id) FULL JOIN correct c USING (run_id)
)
SELECT coalesce(policy, '*') AS policy, count(*) FILTER (WHERE is_run) AS runs,
       sum(llm_calls) AS llm_calls, sum(tokens) AS tokens, sum(correct_kernels) AS correct_kernels,
       sum(tokens) / nullif(count(*) FILTER (WHERE is_run), 0) AS tokens_per_run,
       sum(tokens) / nullif(sum(correct_kernels), 0) AS tokens_per_correct_kernel
FROM per_run GROUP BY GROUPING SETS ((policy), ()) ORDER BY GROUPING(policy), policy
"""

# An LLM call's tokens belong to the phase of the first phase event that the same command
# caused after it; a call whose command ended no phase counts under its agent's name.
_PHASE_COSTS = f"""
WITH phase_events AS (
    SELECT run_id, seq, {_phase_of_type()} AS phase, {_j('causation_id')} AS causation_id,
           {_j('wall_s', 'DOUBLE')} AS wall_s
    FROM events WHERE {_phase_of_type()} IS NOT NULL
), calls AS (
    SELECT run_id, seq, {_j('causation_id')} AS causation_id, {_j('agent')} AS agent,
           {_j('tokens_in', 'BIGINT')} + {_j('tokens_out', 'BIGINT')} AS tokens
    FROM events WHERE type = 'LlmCalled'
), attributed AS (
    SELECT c.run_id, coalesce(p.phase, c.agent) AS phase, c.tokens
    FROM calls c ASOF LEFT JOIN phase_events p
      ON c.run_id = p.run_id AND c.causation_id = p.causation_id AND p.seq > c.seq
), wall AS (
    SELECT run_id, phase, count(*) AS events, sum(wall_s) AS wall_s
    FROM phase_events GROUP BY ALL
), tokens AS (
    SELECT run_id, phase, count(*) AS llm_calls, sum(tokens) AS tokens FROM attributed GROUP BY ALL
)
SELECT run_id, phase, coalesce(w.events, 0) AS events, coalesce(w.wall_s, 0.0) AS wall_s,
       coalesce(t.llm_calls, 0) AS llm_calls, coalesce(t.tokens, 0) AS tokens
FROM wall w FULL JOIN tokens t USING (run_id, phase)
ORDER BY run_id, phase
"""

_DEFINITIONS: dict[str, str] = {
    "events_json": _EVENTS_JSON,
    "nodes": _NODES,
    "kernels": _KERNELS,
    "run_results": _RUN_RESULTS,
    "metrics": _METRICS,
    "metrics_summary": _METRICS_SUMMARY,
    "fast_p_curve": _FAST_P_CURVE,
    "policy_speedups": _POLICY_SPEEDUPS,
    "phase_failures": _PHASE_FAILURES,
    "token_costs": _TOKEN_COSTS,
    "phase_costs": _PHASE_COSTS,
}
assert tuple(_DEFINITIONS) == VIEW_NAMES


def views_sql(*, temporary: bool) -> str:
    """Every view, in dependency order, as one script."""
    kind = "TEMP VIEW" if temporary else "VIEW"
    return "\n".join(
        f"CREATE OR REPLACE {kind} {name} AS {body.strip()};" for name, body in _DEFINITIONS.items()
    )


VIEWS_SHA256 = hashlib.sha256(views_sql(temporary=False).encode()).hexdigest()
"""Names the definitions a log's stored views were made from (kept in `kg_meta`)."""


def create_views(con: Any, *, temporary: bool) -> None:
    """(Re)create the views on a DuckDB connection: stored, or temporary for a read-only one.

    Binding them takes a few hundred milliseconds, so the log does it only when the stored
    ones are out of date, and a read-only reader only when it first runs SQL.
    """
    con.execute(views_sql(temporary=temporary))
