"""The paper's metrics, folded from the log.

Definitions (each figure is kept per `measured_on` label; simulated and real figures
are never averaged together):

- A *kernel* is one candidate written in one iteration (`IterationFinished`); an iteration
  whose plan wrote none (`no_gain`: the planner found nothing worth writing) is no kernel,
  neither compiled nor failed. A kernel priced no faster than its parent (`failed_phase`
  "price") compiled but was never tested: it is neither correct nor wrong. compile_rate =
  compiled kernels / kernels; correctness_rate = correct kernels / tested kernels (kernels
  less those priced out). node_compile_rate / node_correctness_rate are the same over
  trajectories (`NodeEvaluated`: a trajectory compiled or was correct if any iteration was),
  counting only those that wrote a kernel, and for correctness only those that tested one.
- A run's speedup is the verified winner's (`RunFinished.speedup`) once the run has
  finished, otherwise the best valid trajectory's so far. A run with no correct kernel
  falls back to the baseline: speedup 1.0.
- geomean_speedup is the geometric mean over runs of max(speedup, 1.0): a regression
  is floored at 1.0, because a user would keep the XLA baseline.
- fast_p is the fraction of runs whose result is correct and whose speedup is strictly
  greater than p, for p in FAST_P.
- Tokens are LLM tokens in + out; per_correct_kernel divides by correct kernels.
- Phase wall time sums `wall_s` of the events that end each agent phase. An LLM call's
  tokens belong to the phase of the first phase event its command caused after it; a
  call whose command ended no phase (its agent gave up) counts under the agent's name.
- by_policy repeats the run figures (runs, correct runs, best and floored geometric-mean
  speedup, fast_p) per search policy and label, with the search's efficiency:
  - candidates: the run's iterations that wrote a kernel (what a candidate budget counts; a
    plan that wrote none, `IterationFinished.no_gain`, costs none);
  - judged: the kernels among them the run judged itself (tested, or priced and refused), not citing an
    earlier judgment of the same kernel;
  - distinct_kernels: distinct code among the candidates (distinct_per_candidate, their
    ratio: 1.0 when no candidate repeats another);
  - tested_twice: test runs of a kernel the run had already tested (waste; goal 0);
  - candidates_to_best: the candidate (1-based, in log order) that first reached the run's
    best valid speedup (the mean over runs);
  - best_over_first: the run's best valid speedup over its first valid candidate's (the
    geometric mean over runs), and climbed: runs whose ratio is at least CLIMBED (1.10).

`eventstore/views.py` computes the same figures in SQL; a test holds the two to agreement.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from eventstore.events import (
    EVENT_TYPES,
    PRICE_PHASE,
    BaselineMeasured,
    Event,
    IterationFinished,
    LlmCalled,
    NodeEvaluated,
    RunFinished,
    RunRequested,
    TestsRun,
)
from projections.base import Projection, handles
from projections.searchgraph import priced_out, tested_no_kernel, wrote_no_kernel

FAST_P: tuple[float, ...] = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0)
CLIMBED = 1.10
"""A run climbed when its best is at least this many times its first valid candidate."""


class Counts(msgspec.Struct, kw_only=True):
    kernels: int = 0
    compiled: int = 0
    correct: int = 0
    untested: int = 0
    """Of `kernels`, those priced out (never tested): not in correctness's denominator."""

    @property
    def tested(self) -> int:
        return self.kernels - self.untested


class Efficiency(msgspec.Struct, kw_only=True):
    """How a run spent its candidates (see the module docstring)."""

    candidates: int = 0
    judged: int = 0
    codes: set[str] = msgspec.field(default_factory=set)
    tested: set[str] = msgspec.field(default_factory=set)
    tested_twice: int = 0
    first_valid: float | None = None
    best_valid: float | None = None
    best_at: int | None = None

    @property
    def best_over_first(self) -> float | None:
        if self.first_valid is None or self.best_valid is None or self.first_valid <= 0:
            return None
        return self.best_valid / self.first_valid

    def figures(self) -> dict[str, Any]:
        return {"candidates": self.candidates, "judged": self.judged,
                "distinct_kernels": len(self.codes), "tested_twice": self.tested_twice,
                "candidates_to_best": self.best_at, "best_over_first": self.best_over_first}


class RunStats(msgspec.Struct, kw_only=True):
    run_id: str
    task_name: str | None = None
    policy: str | None = None
    label: str | None = None
    nodes: Counts = msgspec.field(default_factory=Counts)
    best_speedup: float | None = None
    finished: bool = False
    final_speedup: float | None = None
    efficiency: Efficiency = msgspec.field(default_factory=Efficiency)
    priced_out: dict[str, int] = {}
    """Kernels priced out, by node id (a node that tested none is no node for correctness)."""

    @property
    def result(self) -> float | None:
        """The run's speedup if it has a correct kernel, else None."""
        return self.final_speedup if self.finished else self.best_speedup

    @property
    def counted(self) -> bool:
        return self.label is not None and (self.finished or self.nodes.kernels > 0)


class PhaseWall(msgspec.Struct, kw_only=True):
    total_s: float = 0.0
    count: int = 0


class PhaseTokens(msgspec.Struct, kw_only=True):
    agent: str = ""
    llm_calls: int = 0
    tokens: int = 0


class MetricsState(msgspec.Struct, kw_only=True):
    runs: dict[str, RunStats] = {}
    kernels: dict[str, Counts] = {}
    tokens: int = 0
    llm_calls: int = 0
    phases: dict[str, PhaseWall] = {}
    phase_tokens: dict[str, PhaseTokens] = {}
    unattributed: dict[str, PhaseTokens] = {}
    """LLM calls waiting for their command's phase event, by "run_id/causation_id"."""


class Metrics(Projection[MetricsState]):
    """Over every run in the stream, or one run with `Metrics(run_id)`."""

    state_type = MetricsState

    def __init__(self, run_id: str | None = None) -> None:
        super().__init__()
        self._run_id = run_id

    def accepts(self, event: Event) -> bool:
        return self._run_id is None or event.run_id == self._run_id

    @handles(*(t for t in EVENT_TYPES if t.phase is not None and t is not BaselineMeasured))
    def _wall(self, e: Event) -> None:
        phase: str = e.phase  # type: ignore[assignment]
        wall = self.state.phases.get(phase)
        if wall is None:
            wall = self.state.phases[phase] = PhaseWall()
        wall.total_s += e.wall_s  # type: ignore[attr-defined]
        wall.count += 1
        if isinstance(e, TestsRun) and e.n_cases:  # a refused test run judged nothing
            eff = self._run(e.run_id).efficiency
            eff.tested_twice += e.code_sha256 in eff.tested
            eff.tested.add(e.code_sha256)
        if e.causation_id is not None:
            waiting = self.state.unattributed.pop(f"{e.run_id}/{e.causation_id}", None)
            if waiting is not None:
                _add_tokens(self.state.phase_tokens, phase, waiting.llm_calls, waiting.tokens)

    def _run(self, run_id: str) -> RunStats:
        stats = self.state.runs.get(run_id)
        if stats is None:
            stats = self.state.runs[run_id] = RunStats(run_id=run_id)
        return stats

    @handles(RunRequested)
    def _requested(self, e: RunRequested) -> None:
        run = self._run(e.run_id)
        run.task_name, run.policy = e.task_name, e.policy

    @handles(BaselineMeasured)
    def _baseline(self, e: BaselineMeasured) -> None:
        self._run(e.run_id).label = e.measured_on
        self._wall(e)

    @handles(IterationFinished)
    def _iteration(self, e: IterationFinished) -> None:
        if e.no_gain:  # a plan that wrote nothing: no kernel, and it costs no candidate
            self._run(e.run_id)
            return
        counts = self.state.kernels.get(e.measured_on)
        if counts is None:
            counts = self.state.kernels[e.measured_on] = Counts()
        counts.kernels += 1
        counts.compiled += e.compiled
        counts.correct += e.valid
        run = self._run(e.run_id)
        if priced_out(e):
            counts.untested += 1
            if e.node_id is not None:
                run.priced_out[e.node_id] = run.priced_out.get(e.node_id, 0) + 1
        eff = run.efficiency
        eff.candidates += 1  # what a candidate budget counts
        if e.code_sha256 is None:
            return
        eff.judged += e.cites_event_id is None or e.failed_phase == PRICE_PHASE
        eff.codes.add(e.code_sha256)
        if e.valid and e.speedup is not None:
            if eff.first_valid is None:
                eff.first_valid = e.speedup
            if eff.best_valid is None or e.speedup > eff.best_valid:
                eff.best_valid, eff.best_at = e.speedup, eff.candidates

    @handles(NodeEvaluated)
    def _evaluated(self, e: NodeEvaluated) -> None:
        run = self._run(e.run_id)
        if run.label is None:
            run.label = e.measured_on
        if not wrote_no_kernel(e.iterations, e.no_gain_plans):
            run.nodes.kernels += 1
            run.nodes.compiled += e.compiled
            run.nodes.correct += e.valid
            if e.node_id is not None and tested_no_kernel(
                    e.iterations, e.no_gain_plans, run.priced_out.get(e.node_id, 0)):
                run.nodes.untested += 1
        if e.valid and e.speedup is not None and e.measured_on == run.label and (
            run.best_speedup is None or e.speedup > run.best_speedup
        ):
            run.best_speedup = e.speedup

    @handles(RunFinished)
    def _finished(self, e: RunFinished) -> None:
        run = self._run(e.run_id)
        run.finished = True
        if run.label is None:
            run.label = e.measured_on
        run.final_speedup = e.speedup if e.measured_on == run.label else None

    @handles(LlmCalled)
    def _llm(self, e: LlmCalled) -> None:
        tokens = e.tokens_in + e.tokens_out
        self.state.tokens += tokens
        self.state.llm_calls += 1
        key = f"{e.run_id}/{e.causation_id}" if e.causation_id is not None else e.event_id
        waiting = self.state.unattributed.get(key)
        if waiting is None:
            waiting = self.state.unattributed[key] = PhaseTokens(agent=e.agent)
        waiting.llm_calls += 1
        waiting.tokens += tokens

    # --- figures ----------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        """Every figure, grouped by measured_on label; JSON-ready."""
        labels = sorted(
            {r.label for r in self.state.runs.values() if r.label} | set(self.state.kernels)
        )
        by_label = {label: self._label_summary(label) for label in labels}
        correct_kernels = sum(c.correct for c in self.state.kernels.values())
        n_runs = len(self.state.runs)
        return {
            "runs": n_runs,
            "by_measured_on": by_label,
            "tokens": {
                "total": self.state.tokens,
                "llm_calls": self.state.llm_calls,
                "per_run": self.state.tokens / n_runs if n_runs else None,
                "per_correct_kernel": self.state.tokens / correct_kernels if correct_kernels else None,
            },
            "phase_wall_s": {
                phase: {"total": w.total_s, "count": w.count,
                        "mean": w.total_s / w.count if w.count else None}
                for phase, w in sorted(self.state.phases.items())
            },
            "phase_tokens": self.phase_tokens(),
            "by_policy": self.by_policy(),
        }

    def phase_tokens(self) -> dict[str, dict[str, int]]:
        """{phase (or agent, for calls no phase followed): {llm_calls, tokens}}."""
        totals = {k: PhaseTokens(llm_calls=v.llm_calls, tokens=v.tokens)
                  for k, v in self.state.phase_tokens.items()}
        for waiting in self.state.unattributed.values():
            _add_tokens(totals, waiting.agent, waiting.llm_calls, waiting.tokens)
        return {k: {"llm_calls": v.llm_calls, "tokens": v.tokens} for k, v in sorted(totals.items())}

    def by_policy(self) -> dict[str, dict[str, dict[str, Any]]]:
        """{policy: {label: {runs, correct_runs, best_speedup, geomean_speedup, fast_p,
        efficiency}}}."""
        groups: dict[str, dict[str, list[RunStats]]] = {}
        for run in self.state.runs.values():
            if run.counted:
                groups.setdefault(run.policy or "unknown", {}).setdefault(
                    run.label, []).append(run)  # type: ignore[arg-type]
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for policy, labels in sorted(groups.items()):
            out[policy] = {}
            for label, runs in sorted(labels.items()):
                results = [r.result for r in runs]
                correct = [s for s in results if s is not None]
                out[policy][label] = {
                    "runs": len(results),
                    "correct_runs": len(correct),
                    "best_speedup": max(correct) if correct else None,
                    "geomean_speedup": geomean_floored(results),
                    "fast_p": {_p_key(p): fast_p(results, p) for p in FAST_P},
                    "efficiency": efficiency_of([r.efficiency for r in runs]),
                }
        return out

    def results(self) -> dict[str, RunStats]:
        """The runs that count towards the figures, by run id (`RunStats.result` is the speedup)."""
        return {k: r for k, r in self.state.runs.items() if r.counted}

    def _label_summary(self, label: str) -> dict[str, Any]:
        runs = [r for r in self.state.runs.values() if r.label == label and r.counted]
        kernels = self.state.kernels.get(label, Counts())
        nodes = Counts()
        for r in runs:
            nodes.kernels += r.nodes.kernels
            nodes.compiled += r.nodes.compiled
            nodes.correct += r.nodes.correct
            nodes.untested += r.nodes.untested
        results = [r.result for r in runs]
        return {
            "runs": len(runs),
            "kernels": kernels.kernels,
            "compile_rate": _ratio(kernels.compiled, kernels.kernels),
            "correctness_rate": _ratio(kernels.correct, kernels.tested),
            "nodes": nodes.kernels,
            "node_compile_rate": _ratio(nodes.compiled, nodes.kernels),
            "node_correctness_rate": _ratio(nodes.correct, nodes.tested),
            "geomean_speedup": geomean_floored(results) if runs else None,
            "fast_p": {_p_key(p): fast_p(results, p) if runs else None for p in FAST_P},
        }


def efficiency_of(runs: list[Efficiency]) -> dict[str, Any]:
    """The search-efficiency figures over runs (see the module docstring)."""
    candidates = sum(r.candidates for r in runs)
    distinct = sum(len(r.codes) for r in runs)
    to_best = [r.best_at for r in runs if r.best_at is not None]
    ratios = [r.best_over_first for r in runs if r.best_over_first is not None]
    return {
        "candidates": candidates,
        "judged": sum(r.judged for r in runs),
        "distinct_kernels": distinct,
        "distinct_per_candidate": _ratio(distinct, candidates),
        "tested_twice": sum(r.tested_twice for r in runs),
        "mean_candidates_to_best": sum(to_best) / len(to_best) if to_best else None,
        "best_over_first": (math.exp(sum(math.log(x) for x in ratios) / len(ratios))
                            if ratios else None),
        "climbed": sum(1 for x in ratios if x >= CLIMBED * (1 - 1e-9)),
    }


def _add_tokens(totals: dict[str, PhaseTokens], key: str, calls: int, tokens: int) -> None:
    entry = totals.get(key)
    if entry is None:
        entry = totals[key] = PhaseTokens()
    entry.llm_calls += calls
    entry.tokens += tokens


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def _p_key(p: float) -> str:
    return f"{p:g}"


def geomean_floored(results: list[float | None]) -> float:
    """Geometric mean of max(speedup, 1.0); a run with no correct kernel counts as 1.0."""
    logs = [math.log(max(s, 1.0)) if s is not None else 0.0 for s in results]
    return math.exp(sum(logs) / len(logs))


def fast_p(results: list[float | None], p: float) -> float:
    """Fraction of runs that are correct with speedup strictly above p."""
    return sum(1 for s in results if s is not None and s > p) / len(results)
