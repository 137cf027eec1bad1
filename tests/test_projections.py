"""Projections: hand-computed answers on a hand-built log, and fold equivalence properties."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore.events import (
    BaselineMeasured,
    Event,
    ExpansionRequested,
    IterationFinished,
    LlmCalled,
    MeasuredOn,
    NodeEvaluated,
    PlanProposed,
    RunFinished,
    RunRequested,
    SearchStopped,
    TestsRun,
)
from eventstore.synthetic import synthetic_run
from projections import BestOfN, LogView, Metrics, SearchGraph


class _Run:
    """Builds one run's events by hand."""

    def __init__(self, run_id: str, baseline_s: float, label: MeasuredOn = "simulated") -> None:
        self.run_id, self.baseline_s, self.label = run_id, baseline_s, label
        self.events: list[Event] = [
            RunRequested.create(run_id=run_id, producer="t", node_id="root", task_name=run_id,
                                task_sha256="h", policy="beam", target="sim-tpu-v6e",
                                provider="offline"),
            BaselineMeasured.create(run_id=run_id, producer="t", node_id="root",
                                    latency_s=baseline_s, measured_on=label, target="sim-tpu-v6e",
                                    wall_s=0.25 if run_id == "A" else 0.0),
        ]

    def node(self, node_id: str, parent: str) -> None:
        self.events.append(ExpansionRequested.create(run_id=self.run_id, producer="t",
                                                     node_id=node_id, parent_id=parent,
                                                     policy="beam", strategy="s"))

    def iteration(self, node_id: str, it: int, *, compiled: bool, speedup: float | None) -> None:
        valid = speedup is not None
        self.events.append(IterationFinished.create(
            run_id=self.run_id, producer="t", node_id=node_id, iteration=it, compiled=compiled,
            valid=valid, speedup=speedup, measured_on=self.label,
            latency_s=self.baseline_s / speedup if valid else None,
        ))

    def evaluated(self, node_id: str, *, compiled: bool, speedup: float | None, best: int | None,
                  iterations: int) -> None:
        self.events.append(NodeEvaluated.create(
            run_id=self.run_id, producer="t", node_id=node_id, valid=speedup is not None,
            compiled=compiled, speedup=speedup, best_iteration=best, iterations=iterations,
            latency_s=self.baseline_s / speedup if speedup else None, measured_on=self.label,
        ))

    def llm(self, tokens_in: int, tokens_out: int) -> None:
        self.events.append(LlmCalled.create(
            run_id=self.run_id, producer="t", node_id="n1", agent="planner", provider="offline",
            model="m", prompt_sha256="p", response_sha256="r", tokens_in=tokens_in,
            tokens_out=tokens_out, latency_ms=1.0))

    def finished(self, speedup: float | None) -> None:
        self.events.append(RunFinished.create(
            run_id=self.run_id, producer="t", status="completed", speedup=speedup,
            measured_on=self.label, best_node_id="n1" if speedup else None))


def _hand_built() -> list[Event]:
    a = _Run("A", 100e-6)
    a.node("n1", "root")
    a.events.append(PlanProposed.create(run_id="A", producer="t", node_id="n1", plan_sha256="p",
                                        iteration=0, wall_s=2.0))
    a.llm(100, 50)
    a.iteration("n1", 0, compiled=False, speedup=None)
    a.events.append(PlanProposed.create(run_id="A", producer="t", node_id="n1", plan_sha256="p",
                                        iteration=1, wall_s=3.0))
    a.events.append(TestsRun.create(run_id="A", producer="t", node_id="n1", iteration=1,
                                    code_sha256="c", suite_sha256="s", passed=True, n_cases=3,
                                    wall_s=1.5))
    a.llm(200, 25)
    a.iteration("n1", 1, compiled=True, speedup=2.0)
    a.evaluated("n1", compiled=True, speedup=2.0, best=1, iterations=2)
    a.node("n2", "n1")
    a.iteration("n2", 0, compiled=True, speedup=0.8)
    a.iteration("n2", 1, compiled=True, speedup=None)
    a.evaluated("n2", compiled=True, speedup=0.8, best=0, iterations=2)
    a.events.append(SearchStopped.create(run_id="A", producer="t", policy="beam", reason="budget"))
    a.finished(2.0)

    b = _Run("B", 10e-6)
    b.node("n1", "root")
    b.iteration("n1", 0, compiled=True, speedup=None)
    b.evaluated("n1", compiled=True, speedup=None, best=None, iterations=1)
    b.finished(None)

    c = _Run("C", 10e-6)
    c.node("n1", "root")
    c.iteration("n1", 0, compiled=True, speedup=0.4)
    c.iteration("n1", 1, compiled=True, speedup=0.5)
    c.evaluated("n1", compiled=True, speedup=0.5, best=1, iterations=2)
    c.finished(0.5)

    d = _Run("D", 50e-6, label="real")
    d.node("n1", "root")
    d.llm(1000, 0)
    d.iteration("n1", 0, compiled=True, speedup=3.0)
    d.evaluated("n1", compiled=True, speedup=3.0, best=0, iterations=1)

    # Interleave runs as a shared log would, keeping each run's own order.
    rng = random.Random(0)
    queues = [list(r.events) for r in (a, b, c, d)]
    merged: list[Event] = []
    while any(queues):
        q = rng.choice([q for q in queues if q])
        merged.append(q.pop(0))
    return merged


def test_metrics_on_a_hand_built_log() -> None:
    summary = Metrics.rebuild(_hand_built()).summary()
    assert summary["runs"] == 4
    sim = summary["by_measured_on"]["simulated"]
    assert sim["runs"] == 3
    assert sim["kernels"] == 7
    assert sim["compile_rate"] == pytest.approx(6 / 7)
    assert sim["correctness_rate"] == pytest.approx(4 / 7)
    assert sim["nodes"] == 4
    assert sim["node_compile_rate"] == 1.0
    assert sim["node_correctness_rate"] == pytest.approx(3 / 4)
    # A = 2.0, B has no correct kernel (1.0), C regressed to 0.5 (floored at 1.0).
    assert sim["geomean_speedup"] == pytest.approx(2 ** (1 / 3))
    assert sim["fast_p"] == {"0": pytest.approx(2 / 3), "0.5": pytest.approx(1 / 3),
                             "1": pytest.approx(1 / 3), "1.5": pytest.approx(1 / 3),
                             "2": 0.0, "3": 0.0, "4": 0.0}
    real = summary["by_measured_on"]["real"]
    assert (real["runs"], real["kernels"], real["compile_rate"], real["correctness_rate"]) == (
        1, 1, 1.0, 1.0)
    assert real["geomean_speedup"] == pytest.approx(3.0)  # in progress: best so far
    assert real["fast_p"]["2"] == 1.0 and real["fast_p"]["3"] == 0.0
    assert summary["tokens"] == {"total": 1375, "llm_calls": 3, "per_run": 1375 / 4,
                                 "per_correct_kernel": 1375 / 5}
    assert summary["phase_wall_s"]["plan"] == {"total": 5.0, "count": 2, "mean": 2.5}
    assert summary["phase_wall_s"]["test"] == {"total": 1.5, "count": 1, "mean": 1.5}
    assert summary["phase_wall_s"]["baseline"] == {"total": 0.25, "count": 4, "mean": 0.0625}


def test_simulated_and_real_figures_are_never_mixed() -> None:
    summary = Metrics.rebuild(_hand_built()).summary()
    sim, real = summary["by_measured_on"]["simulated"], summary["by_measured_on"]["real"]
    # Had they been pooled the geomean would be (2 * 1 * 1 * 3) ** (1/4).
    assert sim["geomean_speedup"] != pytest.approx(6 ** 0.25)
    assert real["geomean_speedup"] != pytest.approx(6 ** 0.25)


def test_a_real_speedup_reported_against_a_simulated_baseline_is_not_counted() -> None:
    run = _Run("X", 10e-6, label="simulated")
    run.node("n1", "root")
    run.events.append(NodeEvaluated.create(run_id="X", producer="t", node_id="n1", valid=True,
                                           compiled=True, speedup=9.0, measured_on="real"))
    summary = Metrics.rebuild(run.events).summary()
    assert summary["by_measured_on"]["simulated"]["geomean_speedup"] == 1.0


def test_search_graph_of_one_run() -> None:
    graph = SearchGraph.rebuild(_hand_built(), "A")
    assert [n.node_id for n in graph.nodes] == ["root", "n1", "n2"]
    assert graph.node("n2").depth == 2 and graph.node("n2").parent_id == "n1"
    assert graph.best is not None and graph.best.node_id == "n1"
    assert [n.node_id for n in graph.frontier] == ["n2"]
    assert {d: [n.node_id for n in ns] for d, ns in graph.by_depth().items()} == {
        0: ["root"], 1: ["n1"], 2: ["n2"]}
    assert [n.node_id for n in graph.path_to("n2")] == ["root", "n1", "n2"]
    assert graph.root is not None and graph.root.latency_s == 100e-6
    assert graph.state.stopped == "budget" and graph.state.finished == "completed"
    assert graph.node("n1").iterations_done == 2


def test_search_graph_binds_to_the_first_run_it_sees() -> None:
    events = _hand_built()
    graph = SearchGraph.rebuild(events)
    assert graph.run_id == events[0].run_id
    assert all(n.node_id in ("root", "n1", "n2") for n in graph.nodes)


def test_pending_and_invalid_nodes() -> None:
    b = SearchGraph.rebuild(_hand_built(), "B")
    assert b.node("n1").status == "invalid"
    assert b.best is None
    assert [n.node_id for n in b.frontier] == []  # root has a child, n1 is invalid
    run = _Run("P", 1e-6)
    run.node("n1", "root")
    graph = SearchGraph.rebuild(run.events)
    assert [n.node_id for n in graph.pending] == ["n1"]


def test_best_of_n_rolls_back_to_the_fastest_valid_iteration() -> None:
    history = BestOfN.rebuild(_hand_built())
    n2 = history.trajectory("n2", "A")
    assert [s.valid for s in n2.history] == [True, False]
    assert n2.target is not None and n2.target.iteration == 0  # the last iteration was invalid
    c = history.trajectory("n1", "C")
    assert c.target is not None and c.target.iteration == 1  # lower latency wins
    b = history.trajectory("n1", "B")
    assert b.target is None
    assert {t.evaluated_iteration for t in (n2, c)} == {0, 1}


# --- properties -------------------------------------------------------------------------------

_RUNS = ("r1", "r2")
_NODES = ("root", "n1", "n2", "n3", "n4")
_labels = st.sampled_from(["simulated", "real"])
_speedups = st.one_of(st.none(), st.floats(min_value=0.05, max_value=8.0))


@st.composite
def _events(draw: st.DrawFn) -> Event:
    run = draw(st.sampled_from(_RUNS))
    node = draw(st.sampled_from(_NODES))
    kind = draw(st.integers(0, 8))
    common = {"run_id": run, "producer": "p@1", "node_id": node}
    if kind == 0:
        return RunRequested.create(**{**common, "node_id": "root"}, task_name="t",
                                   task_sha256="h", policy="beam", target="sim", provider="offline")
    if kind == 1:
        return BaselineMeasured.create(**common, latency_s=draw(st.floats(1e-6, 1e-3)),
                                       measured_on=draw(_labels), target="sim",
                                       wall_s=draw(st.floats(0, 5)))
    if kind == 2:
        return ExpansionRequested.create(**common, parent_id=draw(st.sampled_from(_NODES)),
                                         policy="beam", strategy=draw(st.sampled_from("ab")))
    if kind == 3:
        speedup = draw(_speedups)
        return IterationFinished.create(**common, iteration=draw(st.integers(0, 3)),
                                        compiled=draw(st.booleans()) or speedup is not None,
                                        valid=speedup is not None, speedup=speedup,
                                        latency_s=None if speedup is None else 1e-4 / speedup,
                                        measured_on=draw(_labels))
    if kind == 4:
        speedup = draw(_speedups)
        return NodeEvaluated.create(**common, valid=speedup is not None, compiled=True,
                                    speedup=speedup, measured_on=draw(_labels),
                                    latency_s=None if speedup is None else 1e-4 / speedup,
                                    best_iteration=draw(st.none() | st.integers(0, 3)))
    if kind == 5:
        return RunFinished.create(**common, status="completed", speedup=draw(_speedups),
                                  measured_on=draw(_labels))
    if kind == 6:
        return LlmCalled.create(**common, agent="planner", provider="offline", model="m",
                                prompt_sha256="p", response_sha256="r",
                                tokens_in=draw(st.integers(0, 5000)),
                                tokens_out=draw(st.integers(0, 5000)), latency_ms=1.0)
    if kind == 7:
        return PlanProposed.create(**common, plan_sha256="p", wall_s=draw(st.floats(0, 10)))
    return SearchStopped.create(**common, policy="beam", reason="r")


_event_lists = st.lists(_events(), max_size=60)
_settings = settings(max_examples=150, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])


def _resumed(cls: type, events: list[Event], split: int, *args: object) -> object:
    """Fold the first part, snapshot, restore into a fresh projection, fold the rest."""
    first = cls(*args)
    first.apply_records(enumerate(events[:split], start=1))
    second = cls(*args).restore(first.snapshot())
    assert second.position == split
    second.apply_records(enumerate(events[split:], start=split + 1))
    return second


@_settings
@given(_event_lists, st.data())
def test_incremental_folding_with_a_snapshot_equals_a_rebuild(events: list[Event],
                                                             data: st.DataObject) -> None:
    split = data.draw(st.integers(0, len(events)))
    for cls, args in ((SearchGraph, ("r1",)), (BestOfN, ()), (Metrics, ())):
        rebuilt = cls.rebuild(events, *args)
        assert _resumed(cls, events, split, *args) == rebuilt
    # Metrics summaries agree too (NaN-free by construction).
    assert _resumed(Metrics, events, split).summary() == Metrics.rebuild(events).summary()


@_settings
@given(_event_lists)
def test_the_replay_fast_path_matches_each_projection(events: list[Event]) -> None:
    view = LogView().apply_records(enumerate(events, start=1))
    assert view.best_of_n == BestOfN.rebuild(events)
    assert view.metrics == Metrics.rebuild(events)
    for run_id, graph in view.graphs.items():
        assert graph == SearchGraph.rebuild(events, run_id)
    one = LogView("r2").apply_records(enumerate(events, start=1))
    assert one.metrics == Metrics.rebuild(events, "r2")
    assert set(one.graphs) <= {"r2"}


@_settings
@given(st.integers(0, 2**32 - 1), st.integers(1, 6), st.integers(1, 4))
def test_synthetic_runs_fold_consistently(seed: int, nodes: int, iterations: int) -> None:
    events = list(synthetic_run(random.Random(seed), run_id="s", nodes=nodes,
                                iterations=iterations))
    graph = SearchGraph.rebuild(events)
    evaluated = [e for e in events if isinstance(e, NodeEvaluated)]
    assert len(graph.nodes) == nodes + 1
    valid = [e.speedup for e in evaluated if e.valid]
    if valid:
        assert graph.best is not None and graph.best.speedup == max(valid)
    summary = Metrics.rebuild(events).summary()["by_measured_on"]["simulated"]
    finished = next(e for e in events if isinstance(e, RunFinished))
    expected = max(finished.speedup or 1.0, 1.0)
    assert summary["geomean_speedup"] == pytest.approx(expected)
    assert not math.isnan(summary["compile_rate"])
