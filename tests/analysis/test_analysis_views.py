"""The SQL views: the same figures as the projections, current on any log, and the README's
worked examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest

from eventstore.events import (
    Event,
    KernelWritten,
    LlmCalled,
    PlanProposed,
    RunRequested,
)
from eventstore.log import EventLog
from eventstore.synthetic import synthetic_log
from eventstore.views import VIEW_NAMES, VIEWS_SHA256
from projections import Metrics
from tests.analysis.agreement import check_views_agree
from tests.analysis.logs import mixed_runs, write_log
from tests.realrun import RealRun

README = Path(__file__).parents[2] / "README.md"


def test_views_agree_with_the_projections_over_policies_labels_and_failures(tmp_path: Path) -> None:
    with EventLog(write_log(tmp_path / "mixed.duckdb", mixed_runs()), read_only=True) as log:
        compared = check_views_agree(log)
    assert compared["labels"] == 2 and compared["runs"] == 9
    assert compared["policies"] == 5 and compared["failures"] >= 2 and compared["phases"] >= 10


def test_views_agree_on_a_long_interleaved_log(tmp_path: Path) -> None:
    with EventLog(tmp_path / "long.duckdb") as log:
        log.append(list(synthetic_log(3_000, seed=5)))
        compared = check_views_agree(log)
    assert compared["runs"] > 5


def test_a_plan_that_wrote_no_kernel_is_neither_a_kernel_nor_a_failure(tmp_path: Path) -> None:
    """Nodes whose planner stopped (the author's space spent) wrote nothing: the compile and
    correctness rates, over kernels and over trajectories, and the failures leave them out, in
    the projections and the views alike."""
    import random

    from eventstore.synthetic import synthetic_run

    def figures(stopped: int) -> tuple[dict, list]:
        events = list(synthetic_run(random.Random(11), run_id="r", nodes=3, iterations=2,
                                    stopped_nodes=stopped))
        with EventLog(write_log(tmp_path / f"s{stopped}.duckdb", events), read_only=True) as log:
            check_views_agree(log)
            failures = log.query("SELECT failed_phase, failures FROM phase_failures")[1]
        return Metrics().apply_all(events).summary()["by_measured_on"]["simulated"], failures

    (without, failed), (stopped, failed_stopped) = figures(0), figures(3)
    for key in ("kernels", "compile_rate", "correctness_rate", "nodes", "node_compile_rate",
                "node_correctness_rate"):
        assert stopped[key] == without[key], key
    assert failed_stopped == failed
    from kernelgraph.cli.logcmds import _graph_tree
    from projections import SearchGraph

    events = list(synthetic_run(random.Random(11), run_id="r", nodes=3, iterations=2,
                                stopped_nodes=3))
    graph = SearchGraph().apply_all(events)
    assert [n.node_id for n in graph.state.nodes.values() if n.wrote_no_kernel] == ["n4", "n5", "n6"]
    shown = [str(b.label) for b in _graph_tree(graph).children[0].children]
    assert sum("no kernel written" in line for line in shown) == 3, shown


def test_a_kernel_priced_out_is_compiled_but_neither_correct_nor_wrong(tmp_path: Path) -> None:
    """Nodes whose one kernel was priced no faster than its parent compiled and were never
    tested: they raise the kernels and the compile rates, and leave both correctness rates
    as they were, in the projections and the views alike."""
    import random

    from eventstore.synthetic import synthetic_run

    def figures(priced: int) -> dict:
        events = list(synthetic_run(random.Random(11), run_id="r", nodes=3, iterations=2,
                                    priced_nodes=priced))
        with EventLog(write_log(tmp_path / f"p{priced}.duckdb", events), read_only=True) as log:
            check_views_agree(log)
            row = log.query("SELECT kernels, compile_rate, correctness_rate, nodes, "
                            "node_compile_rate, node_correctness_rate FROM metrics_summary")[1][0]
        summary = Metrics().apply_all(events).summary()["by_measured_on"]["simulated"]
        assert pytest.approx(list(row)) == [summary[k] for k in (
            "kernels", "compile_rate", "correctness_rate", "nodes", "node_compile_rate",
            "node_correctness_rate")]
        return summary

    without, priced = figures(0), figures(2)
    assert priced["kernels"] == without["kernels"] + 2 and priced["nodes"] == without["nodes"] + 2
    for rate, count in (("compile_rate", "kernels"), ("node_compile_rate", "nodes")):
        compiled = without[rate] * without[count]
        assert priced[rate] == pytest.approx((compiled + 2) / (without[count] + 2)), rate
    assert priced["correctness_rate"] == without["correctness_rate"]
    assert priced["node_correctness_rate"] == without["node_correctness_rate"]
    from kernelgraph.cli.logcmds import _graph_tree
    from projections import SearchGraph

    graph = SearchGraph().apply_all(synthetic_run(random.Random(11), run_id="r", nodes=3,
                                                  iterations=2, priced_nodes=2))
    assert [n.node_id for n in graph.state.nodes.values()
            if n.unjudged == "no kernel tested"] == ["n4", "n5"]
    shown = [str(b.label) for b in _graph_tree(graph).children[0].children]
    assert sum("no kernel tested" in line for line in shown) == 2, shown


def _call(run: str, causation: str | None, agent: str, tokens: int) -> LlmCalled:
    return LlmCalled.create(run_id=run, producer=f"{agent}@1", causation_id=causation, agent=agent,
                            provider="offline", model="m", prompt_sha256="p", response_sha256="r",
                            tokens_in=tokens, tokens_out=1, latency_ms=1.0)


def test_tokens_go_to_the_phase_their_command_ended(tmp_path: Path) -> None:
    events: list[Event] = [
        RunRequested.create(run_id="r", producer="t", node_id="root", task_name="t",
                            task_sha256="s", policy="auto", target="sim-tpu-v6e", provider="offline"),
        _call("r", "plan-1", "planner", 99),
        _call("r", "plan-1", "planner", 9),   # the malformed answer asked again
        PlanProposed.create(run_id="r", producer="planner@1", causation_id="plan-1",
                            plan_sha256="p", wall_s=2.0),
        _call("r", "write-1", "implementer", 49),
        KernelWritten.create(run_id="r", producer="implementer@1", causation_id="write-1",
                             code_sha256="c", wall_s=1.0),
        _call("r", "write-2", "implementer", 19),   # the implementer gave up: no KernelWritten
        _call("r", None, "fixer", 4),
    ]
    metrics = Metrics().apply_all(events)
    assert metrics.summary()["phase_tokens"] == {
        "plan": {"llm_calls": 2, "tokens": 110}, "implement": {"llm_calls": 1, "tokens": 50},
        "implementer": {"llm_calls": 1, "tokens": 20}, "fixer": {"llm_calls": 1, "tokens": 5}}
    with EventLog(tmp_path / "tokens.duckdb") as log:
        log.append(events)
        check_views_agree(log)
        assert log.sql("SELECT phase, tokens FROM phase_costs ORDER BY phase") == [
            ("fixer", 5), ("implement", 50), ("implementer", 20), ("plan", 110)]


def test_a_reader_of_a_log_with_old_views_gets_the_current_ones(tmp_path: Path) -> None:
    path = write_log(tmp_path / "old.duckdb", mixed_runs())
    con = duckdb.connect(str(path))
    con.execute("DROP VIEW policy_speedups; UPDATE kg_meta SET value = 'old' WHERE key = 'views_sha256'")
    con.close()
    with EventLog(path, read_only=True) as log:
        assert len(log.sql("SELECT * FROM policy_speedups")) == 5
    with EventLog(path):  # a writer stores them again
        pass
    con = duckdb.connect(str(path), read_only=True)
    try:
        stored = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
        assert set(VIEW_NAMES) <= stored
        assert con.execute("SELECT value FROM kg_meta WHERE key = 'views_sha256'").fetchone() == (VIEWS_SHA256,)
    finally:
        con.close()


def readme_queries() -> list[str]:
    """The ```sql blocks of README.md's "Analysing a log" section, one query each."""
    text = README.read_text()
    section = re.search(r"^## Analysing a log\n(.*?)(?=^## )", text, re.S | re.M)
    assert section is not None, "README.md has no '## Analysing a log' section"
    blocks = re.findall(r"```sql\n(.*?)```", section.group(1), re.S)
    return [q.strip().rstrip(";") for block in blocks for q in block.split(";\n") if q.strip()]


def test_the_readme_examples_answer_on_a_log_of_several_policies(tmp_path: Path) -> None:
    queries = readme_queries()
    assert len(queries) >= 3
    with EventLog(write_log(tmp_path / "mixed.duckdb", mixed_runs()), read_only=True) as log:
        for query in queries:
            assert log.sql(query), f"no rows from README query:\n{query}"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_views_and_projections_agree_on_a_real_run(real_run: RealRun) -> None:
    with EventLog(real_run.db, read_only=True) as log:
        compared = check_views_agree(log)
        assert compared == {"labels": 1, "runs": 1, "policies": 1,
                            "phases": compared["phases"], "failures": compared["failures"]}
        assert compared["phases"] >= 8  # test_synth .. verify, from one real trajectory
        (tokens,) = log.sql("SELECT tokens FROM token_costs WHERE policy = '*'")[0]
        assert tokens > 0
        planned = log.sql("SELECT tokens FROM phase_costs WHERE phase = 'plan'")
        assert planned and planned[0][0] > 0  # the planner's tokens reached its phase
        for query in readme_queries():
            assert log.sql(query) is not None
