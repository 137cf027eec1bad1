"""Seeded synthetic runs with the shape and size of real ones.

Used by the event-store benchmark, the CLI's demo log and property tests: each run
goes through the whole flow of a run (docs/architecture.md: request, frozen suite, baseline, expansions,
plan -> implement -> compile/fix -> test -> tune -> profile iterations, best-of-N
evaluation, verification, finish) with LLM calls in between.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator

from eventstore.events import (
    PRICE_PHASE,
    BaselineMeasured,
    CompileChecked,
    Event,
    ExpansionRequested,
    FixAttempted,
    IterationFinished,
    KernelWritten,
    LlmCalled,
    MeasuredOn,
    NodeEvaluated,
    PlanProposed,
    ProfileCaptured,
    RunFinished,
    RunRequested,
    SearchStopped,
    TestsRun,
    TestSuiteFrozen,
    TuningSwept,
    WinnerVerified,
)

_STRATEGIES = ("tile-rows", "fuse-reduction", "vectorise-lanes", "double-buffer", "mxu-align")


def _sha(rng: random.Random) -> str:
    return hashlib.sha256(rng.randbytes(16)).hexdigest()


def synthetic_run(
    rng: random.Random,
    *,
    run_id: str,
    nodes: int = 8,
    iterations: int = 3,
    measured_on: MeasuredOn = "simulated",
    finish: bool = True,
    stopped_nodes: int = 0,
    priced_nodes: int = 0,
) -> Iterator[Event]:
    """One run's events in causal order. `stopped_nodes` more nodes follow the others, each
    ending on a plan that wrote no kernel (`no_gain`), then `priced_nodes` more whose one
    kernel compiled and was priced no faster than its parent (never tested); they draw
    nothing from `rng`, so the rest of the run is the same with or without them."""
    baseline_s = rng.uniform(20e-6, 400e-6)
    request = RunRequested.create(
        run_id=run_id, producer="cli@0.1.0", node_id="root", task_name=rng.choice(
            ["rmsnorm", "softmax", "matmul", "gelu", "layernorm"]),
        task_sha256=_sha(rng), policy="beam", target="sim-tpu-v6e", provider="offline",
        policy_params={"width": 2, "branches": 2}, budget={"nodes": nodes, "iterations": iterations},
        seed=rng.randrange(1 << 30),
    )
    yield request
    suite = _sha(rng)
    yield TestSuiteFrozen.create(
        run_id=run_id, producer="test_synth@0.1.0", causation_id=request.event_id,
        suite_sha256=suite, n_cases=12, seeds=[0, 1, 2], shapes=[{"x": [1024, 1024]}],
        tolerance={"atol": 1e-2, "rtol": 1e-2}, wall_s=rng.uniform(0.5, 3),
    )
    yield BaselineMeasured.create(
        run_id=run_id, producer="executor@0.1.0", node_id="root", latency_s=baseline_s,
        measured_on=measured_on, target="sim-tpu-v6e", method="xla-cost-analysis",
        wall_s=rng.uniform(0.1, 1),
    )
    valid_nodes = ["root"]
    best: tuple[float, str] | None = None
    for index in range(nodes):
        node_id = f"n{index + 1}"
        parent = rng.choice(valid_nodes)
        yield ExpansionRequested.create(
            run_id=run_id, producer="orchestrator@0.1.0", node_id=node_id, parent_id=parent,
            policy="beam", strategy=rng.choice(_STRATEGIES), iterations=iterations, decision=index,
        )
        best_iter: tuple[float, int, str] | None = None
        any_compiled = False
        for it in range(iterations):
            yield from _llm(rng, run_id, node_id, "planner", it)
            plan = _sha(rng)
            yield PlanProposed.create(run_id=run_id, producer="planner@0.1.0", node_id=node_id,
                                      iteration=it, plan_sha256=plan, wall_s=rng.uniform(1, 8),
                                      summary="tile rows by 256, accumulate in f32, one pass")
            yield from _llm(rng, run_id, node_id, "implementer", it)
            code = _sha(rng)
            yield KernelWritten.create(run_id=run_id, producer="implementer@0.1.0", node_id=node_id,
                                       iteration=it, code_sha256=code, wall_s=rng.uniform(2, 15),
                                       tunables={"block_rows": [256, 128, 512]})
            compiled = rng.random() < 0.8
            for attempt in range(2):
                yield CompileChecked.create(
                    run_id=run_id, producer="executor@0.1.0", node_id=node_id, iteration=it,
                    code_sha256=code, ok=compiled, attempt=attempt, wall_s=rng.uniform(0.2, 2),
                    diagnostics=[] if compiled else [{"message": "block shape (7, 100) is not "
                                                      "divisible by (8, 128)", "line": 12}],
                    vmem_bytes=rng.randrange(1 << 20, 16 << 20),
                )
                if compiled:
                    break
                yield from _llm(rng, run_id, node_id, "fixer", it)
                code = _sha(rng)
                yield FixAttempted.create(run_id=run_id, producer="fixer@0.1.0", node_id=node_id,
                                          iteration=it, attempt=attempt + 1, code_sha256=code,
                                          error="block shape not divisible", wall_s=rng.uniform(1, 6))
                compiled = rng.random() < 0.6
            any_compiled |= compiled
            valid = compiled and rng.random() < 0.75
            latency = speedup = None
            if compiled:
                yield TestsRun.create(
                    run_id=run_id, producer="executor@0.1.0", node_id=node_id, iteration=it,
                    code_sha256=code, suite_sha256=suite, passed=valid, n_cases=12,
                    n_failed=0 if valid else rng.randrange(1, 12), max_abs_err=rng.uniform(0, 1e-3),
                    mean_abs_err=rng.uniform(0, 1e-4), wall_s=rng.uniform(1, 10),
                    reasons=[] if valid else ["max-abs error 0.41 above 2x floor 0.0012"],
                )
            if valid:
                latency = baseline_s / rng.uniform(0.5, 3.5)
                speedup = baseline_s / latency
                yield TuningSwept.create(
                    run_id=run_id, producer="autotuner@0.1.0", node_id=node_id, iteration=it,
                    code_sha256=code, configs_tried=8, best_config={"block_rows": 256},
                    best_latency_s=latency, measured_on=measured_on, table_sha256=_sha(rng),
                    wall_s=rng.uniform(5, 30),
                )
                yield ProfileCaptured.create(
                    run_id=run_id, producer="profiler@0.1.0", node_id=node_id, iteration=it,
                    code_sha256=code, profile_sha256=_sha(rng), latency_s=latency,
                    measured_on=measured_on, bound=rng.choice(["memory", "compute", "overhead"]),
                    wall_s=rng.uniform(0.5, 3),
                )
                if best_iter is None or latency < best_iter[0]:
                    best_iter = (latency, it, code)
            yield IterationFinished.create(
                run_id=run_id, producer="orchestrator@0.1.0", node_id=node_id, iteration=it,
                valid=valid, compiled=compiled, code_sha256=code, plan_sha256=plan,
                latency_s=latency, speedup=speedup, measured_on=measured_on,
                tunables={"block_rows": 256} if valid else {},
                failed_phase=None if valid else ("compile" if not compiled else "test"),
            )
        if best_iter is not None:
            latency, it, code = best_iter
            valid_nodes.append(node_id)
            if best is None or baseline_s / latency > best[0]:
                best = (baseline_s / latency, node_id)
        yield NodeEvaluated.create(
            run_id=run_id, producer="orchestrator@0.1.0", node_id=node_id,
            valid=best_iter is not None, compiled=any_compiled,
            best_iteration=best_iter[1] if best_iter else None, iterations=iterations,
            code_sha256=best_iter[2] if best_iter else None,
            latency_s=best_iter[0] if best_iter else None,
            speedup=baseline_s / best_iter[0] if best_iter else None,
            measured_on=measured_on, tunables={"block_rows": 256} if best_iter else {},
        )
    yield from _stopped(run_id, nodes, stopped_nodes, measured_on)
    yield from _priced_out(run_id, nodes + stopped_nodes, priced_nodes, measured_on)
    if not finish:
        return
    yield SearchStopped.create(run_id=run_id, producer="orchestrator@0.1.0", policy="beam",
                               reason="node budget spent")
    receipt = _sha(rng) if best else None
    if best:
        yield WinnerVerified.create(run_id=run_id, producer="verifier@0.1.0", node_id=best[1],
                                    verdict="pass", receipt_sha256=receipt or "", speedup=best[0],
                                    measured_on=measured_on, wall_s=rng.uniform(2, 10))
    yield RunFinished.create(
        run_id=run_id, producer="orchestrator@0.1.0", status="completed",
        best_node_id=best[1] if best else None, speedup=best[0] if best else None,
        measured_on=measured_on, receipt_sha256=receipt,
    )


def _llm(rng: random.Random, run_id: str, node_id: str, agent: str, it: int) -> Iterator[Event]:
    yield LlmCalled.create(
        run_id=run_id, producer=f"{agent}@0.1.0", node_id=node_id, agent=agent, provider="offline",
        model="offline-templates", prompt_sha256=_sha(rng), response_sha256=_sha(rng),
        tokens_in=rng.randrange(800, 6000), tokens_out=rng.randrange(200, 2500),
        latency_ms=rng.uniform(5, 50), iteration=it,
    )


def synthetic_log(total_events: int, *, seed: int = 0) -> Iterator[Event]:
    """About `total_events` events over as many runs as it takes."""
    rng = random.Random(seed)
    produced, run = 0, 0
    while produced < total_events:
        run += 1
        label: MeasuredOn = "simulated" if run % 4 else "real"
        for event in synthetic_run(rng, run_id=f"run-{seed}-{run:05d}", measured_on=label):
            yield event
            produced += 1
            if produced >= total_events:
                return


def _one_iteration_node(run_id: str, node_id: str, index: int) -> ExpansionRequested:
    """A node of one iteration under the root, after the run's drawn ones."""
    return ExpansionRequested.create(
        run_id=run_id, producer="orchestrator@0.1.0", node_id=node_id, parent_id="root",
        policy="beam", strategy=_STRATEGIES[index % len(_STRATEGIES)], iterations=1,
        decision=index)


def _stopped(run_id: str, first: int, count: int, measured_on: MeasuredOn) -> Iterator[Event]:
    """Nodes whose one iteration's plan concluded that no kernel will pay off."""
    for index in range(first, first + count):
        node_id = f"n{index + 1}"
        yield _one_iteration_node(run_id, node_id, index)
        plan = hashlib.sha256(f"{run_id}/{node_id}".encode()).hexdigest()
        yield PlanProposed.create(run_id=run_id, producer="planner@0.1.0", node_id=node_id,
                                  iteration=0, plan_sha256=plan, wall_s=0.5, no_gain=True,
                                  summary="Stop, writing no candidate: the space is exhausted")
        yield IterationFinished.create(
            run_id=run_id, producer="orchestrator@0.1.0", node_id=node_id, iteration=0,
            valid=False, compiled=False, plan_sha256=plan, measured_on=measured_on,
            no_gain=True, error="the planner concluded that no kernel will pay off")
        yield NodeEvaluated.create(
            run_id=run_id, producer="orchestrator@0.1.0", node_id=node_id, valid=False,
            compiled=False, iterations=1, no_gain_plans=1, measured_on=measured_on)


def _priced_out(run_id: str, first: int, count: int, measured_on: MeasuredOn) -> Iterator[Event]:
    """Nodes whose one kernel compiled and was priced no faster than its parent."""
    for index in range(first, first + count):
        node_id = f"n{index + 1}"
        yield _one_iteration_node(run_id, node_id, index)
        code = hashlib.sha256(f"{run_id}/{node_id}/kernel".encode()).hexdigest()
        checked = CompileChecked.create(
            run_id=run_id, producer="executor@0.1.0", node_id=node_id, iteration=0,
            code_sha256=code, ok=True, attempt=0, wall_s=0.5, estimate_speedup=0.5)
        yield checked
        yield IterationFinished.create(
            run_id=run_id, producer="orchestrator@0.1.0", node_id=node_id, iteration=0,
            valid=False, compiled=True, code_sha256=code, measured_on=measured_on,
            failed_phase=PRICE_PHASE, cites_event_id=checked.event_id, estimate_speedup=0.5,
            error="priced no faster than its parent")
        yield NodeEvaluated.create(
            run_id=run_id, producer="orchestrator@0.1.0", node_id=node_id, valid=False,
            compiled=True, iterations=1, measured_on=measured_on)
