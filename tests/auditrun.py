"""A clean run built by hand, with its artifacts, for the audit's tests.

`clean_run("beam")`: a policy search; the root is expanded into n1 (valid, 1.25x after
tuning) and n2 (a wrong answer), then n1 into n3 (valid, 2x), then Stop; n3 is re-verified
with a real signed receipt (the session's test key), audited and finished.
`clean_run("auto")`: one trajectory under the root, as Auto runs it (`"hitl"`: the same
node, as a HITL session records it, with no policy decision).

Every figure is what the evaluator would record: a verdict record per judgement (summary
and measurement, speedup = baseline / latency) and a receipt sealed by `tools`' own `seal`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np
from nats.aio.client import Client as NATS

from bus import subjects
from bus.artifacts import publish_artifacts
from bus.codec import encode
from eventstore.events import (
    BaselineMeasured,
    CompileChecked,
    ConfigMeasured,
    Event,
    ExpansionRequested,
    IterationFinished,
    KernelWritten,
    NodeEvaluated,
    PlanProposed,
    PolicyDecided,
    ProfileCaptured,
    RunAudited,
    RunFinished,
    RunRequested,
    SearchStopped,
    TestsRun,
    TestSuiteFrozen,
    TuningSwept,
    WinnerVerified,
    new_event_id,
)
from projections.audit import AuditReport, ChainStatus, audit_run
from tools import api
from tools.correctness.compare import FLOOR_FACTOR, compare_case
from tools.correctness.testsuite import SuiteCase
from tools.inputs.tasks import DEFAULT_TOLERANCE
from tools.sandbox.wire import WireArray
from tools.verification.receipts import RECEIPT_KIND, Checks, seal

BASELINE_S = 1e-5
TARGET = "sim-tpu-v6e"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def passing_checks() -> Checks:
    """The checks of a receipt whose one case passes (no sandbox, no JAX)."""
    oracle = np.linspace(-1, 1, 256).reshape(2, 128)
    case = SuiteCase(
        case_id="c", shape_index=0, seed=0, kind="seed", inputs=(), inputs_sha256="",
        oracle=(WireArray.of(oracle),), out_dtypes=("float32",), out_shapes=(oracle.shape,),
        floor_max_abs=(1e-6,), floor_mean_abs=(1e-7,), ceiling_applies=(True,))
    return Checks(candidate_loaded=True, sandbox_ok=True, compile_ok=True, audit_ok=True,
                  tampering=(), inputs_unmodified=True, inputs_as_sent=True, races_in=(),
                  consistency_problems=(), timing_valid=True, floor_factor=FLOOR_FACTOR,
                  tolerance=dict(DEFAULT_TOLERANCE),
                  cases=(compare_case(case, [oracle.astype(np.float32)], DEFAULT_TOLERANCE),))


@dataclass
class RunBuilder:
    policy: str
    run_id: str = field(default_factory=new_event_id)
    events: list[Event] = field(default_factory=list)
    artifacts: dict[str, bytes] = field(default_factory=dict)
    root: str = "root"
    task_sha256: str = ""
    suite_sha256: str = ""

    def put(self, data: bytes) -> str:
        self.artifacts[sha(data)] = data
        return sha(data)

    def emit(self, cls: type[Event], node_id: str | None = None, **payload: Any) -> Any:
        event = cls(event_id=new_event_id(), run_id=self.run_id, ts=1.0, producer="test@1",
                    node_id=node_id, **payload)
        self.events.append(event)
        return event

    def verdict(self, latency_s: float, *, passed: bool = True, config: Any = None) -> str:
        """A verdict record as the executor stores it (a failing one has no measurement)."""
        speedup = BASELINE_S / latency_s
        measurement = {"target": TARGET, "measured_on": "simulated", "latency_s": latency_s,
                       "baseline_s": BASELINE_S, "speedup": speedup, "valid": True}
        record = {"verdict": "pass" if passed else "fail", "reasons": [] if passed else ["wrong"],
                  "speedup": speedup if passed else None, "measured_on": "simulated",
                  "suite_sha256": self.suite_sha256, "config": config or {}, "target": TARGET,
                  "measurement": measurement if passed else None}
        return self.put(json.dumps(record).encode())

    def receipt(self, code: str, latency_s: float, config: dict[str, Any]) -> str:
        body = {"kind": RECEIPT_KIND, "version": 2, "verdict": "pass", "reasons": [],
                "task": {"sha256": self.task_sha256}, "target": TARGET,
                "candidate": {"sha256": code, "config": config},
                "suite": {"sha256": self.suite_sha256}, "checks": passing_checks(),
                "measurement": {"measured_on": "simulated", "speedup": BASELINE_S / latency_s,
                                "latency_s": latency_s, "baseline_s": BASELINE_S, "valid": True}}
        return self.put(api.receipt_json(seal(body)).encode())

    def node(self, node: str, latencies: list[float | None]) -> NodeEvaluated:
        """A trajectory: each iteration valid at that latency, or a wrong answer (None)."""
        finished: list[IterationFinished] = []
        for it, latency in enumerate(latencies, start=1):
            plan = self.put(f"plan {node} {it}".encode())
            code = self.put(f"def build(block_rows=8): ...  # {node} {it}".encode())
            self.emit(PlanProposed, node, iteration=it, plan_sha256=plan)
            self.emit(KernelWritten, node, iteration=it, code_sha256=code,
                      tunables={"block_rows": [8, 16]})
            self.emit(CompileChecked, node, iteration=it, code_sha256=code, ok=True)
            if latency is None:
                self.emit(TestsRun, node, iteration=it, code_sha256=code,
                          suite_sha256=self.suite_sha256, passed=False, n_cases=4, n_failed=1,
                          verdict_sha256=self.verdict(1e-5, passed=False))
                finished.append(self.emit(IterationFinished, node, iteration=it, valid=False,
                                          compiled=True, code_sha256=code, plan_sha256=plan,
                                          failed_phase="test", error="wrong"))
                continue
            slow = latency * 1.25
            first = self.verdict(slow, config={"block_rows": 8})
            self.emit(TestsRun, node, iteration=it, code_sha256=code, suite_sha256=self.suite_sha256,
                      passed=True, n_cases=4, latency_s=slow, speedup=BASELINE_S / slow,
                      measured_on="simulated", verdict_sha256=first, config={"block_rows": 8})
            best = self.verdict(latency, config={"block_rows": 16})
            for config, lat, verdict in (({"block_rows": 8}, slow, first),
                                         ({"block_rows": 16}, latency, best)):
                self.emit(ConfigMeasured, node, iteration=it, code_sha256=code, config=config,
                          passed=True, latency_s=lat, speedup=BASELINE_S / lat,
                          measured_on="simulated", verdict_sha256=verdict)
            swept = self.emit(TuningSwept, node, iteration=it, code_sha256=code, configs_tried=2,
                              best_config={"block_rows": 16}, best_latency_s=latency,
                              best_speedup=BASELINE_S / latency, verdict_sha256=best)
            self.emit(ProfileCaptured, node, iteration=it, code_sha256=code,
                      profile_sha256=self.put(b"profile"), latency_s=latency, measured_on="simulated")
            finished.append(self.emit(
                IterationFinished, node, iteration=it, valid=True, compiled=True, code_sha256=code,
                plan_sha256=plan, latency_s=latency, speedup=BASELINE_S / latency,
                tunables={"block_rows": 16}, verdict_sha256=best, proof_event_id=swept.event_id))
        parent = self.expansion(node).parent_id
        valid = [f for f in finished if f.valid]
        if not valid:
            return self.emit(NodeEvaluated, node, valid=False, compiled=True,
                             iterations=len(finished), parent_id=parent)
        top = min(valid, key=lambda f: (f.latency_s, f.iteration))
        return self.emit(NodeEvaluated, node, valid=True, compiled=True,
                         best_iteration=top.iteration, iterations=len(finished),
                         code_sha256=top.code_sha256, plan_sha256=top.plan_sha256,
                         latency_s=top.latency_s, speedup=top.speedup, tunables=dict(top.tunables),
                         verdict_sha256=top.verdict_sha256, parent_id=parent)

    def expansion(self, node: str) -> ExpansionRequested:
        return next(e for e in self.events if isinstance(e, ExpansionRequested) and e.node_id == node)

    def decide(self, decision: int, nodes: list[tuple[str, str]], stop: str | None = None) -> None:
        specs = [{"node_id": n, "parent_id": p, "strategy": "", "iterations": 1} for n, p in nodes]
        self.emit(PolicyDecided, self.root, policy=self.policy, decision=decision,
                  seen_events=len(self.events), expansions=specs, stop=stop)
        for node, parent in nodes:
            self.emit(ExpansionRequested, node, parent_id=parent, policy=self.policy,
                      decision=decision)

    def finish(self, winner: NodeEvaluated) -> None:
        assert winner.code_sha256 and winner.latency_s
        receipt = self.receipt(winner.code_sha256, winner.latency_s, dict(winner.tunables))
        verified = self.emit(WinnerVerified, winner.node_id, verdict="pass", receipt_sha256=receipt,
                             speedup=winner.speedup)
        self.emit(RunAudited, winner.node_id, clean=True, final=True)
        self.emit(RunFinished, self.root, status="completed", best_node_id=winner.node_id,
                  speedup=verified.speedup, receipt_sha256=receipt)


def clean_run(policy: str = "beam") -> RunBuilder:
    run = RunBuilder(policy)
    run.task_sha256 = run.put(b"def reference(x): return x\n")
    recipe = {"task_sha256": run.task_sha256, "seeds": [0, 1, 2], "suite_sha256": "", "n_cases": 4}
    run.suite_sha256 = sha(b"the frozen suite")
    recipe["suite_sha256"] = run.suite_sha256
    run.emit(RunRequested, run.root, task_name="copy", task_sha256=run.task_sha256,
             policy=policy, target=TARGET, provider="offline")
    run.emit(TestSuiteFrozen, run.root, suite_sha256=run.suite_sha256, n_cases=4,
             recipe_sha256=run.put(json.dumps(recipe).encode()))
    run.emit(BaselineMeasured, run.root, latency_s=BASELINE_S, measured_on="simulated",
             target=TARGET)
    if policy in ("auto", "hitl"):
        run.emit(ExpansionRequested, "n1", parent_id=run.root, policy=policy, iterations=2)
        run.finish(run.node("n1", [None, 8e-6]))
        return run
    run.decide(0, [("n1", run.root), ("n2", run.root)])
    run.node("n1", [8e-6])
    run.node("n2", [None])
    run.decide(1, [("n3", "n1")])
    n3 = run.node("n3", [6e-6, 5e-6])
    run.decide(2, [], stop="budget spent")
    run.emit(SearchStopped, run.root, policy=policy, reason="budget spent")
    run.finish(n3)
    return run


def audit(run: RunBuilder, *, chain: ChainStatus | None = None, final: bool = True) -> AuditReport:
    return audit_run(run.events, fetch=run.artifacts.get, chain=chain or ChainStatus(ok=True),
                     receipt_problems=api.receipt_problems, final=final)


def replace(run: RunBuilder, event: Event, **changes: Any) -> Event:
    """Edit one event in place (a tampered log), keeping its id and position."""
    index = run.events.index(event)
    run.events[index] = msgspec.structs.replace(event, **changes)
    return run.events[index]


def first(run: RunBuilder, cls: type[Event], node: str | None = None) -> Any:
    return next(e for e in run.events if isinstance(e, cls) and (node is None or e.node_id == node))


async def publish(nc: NATS, run: RunBuilder) -> None:
    """The run on the bus as its agents would have published it: artifacts, then events."""
    js = nc.jetstream()
    await publish_artifacts(js, [(data, "test") for data in run.artifacts.values()],
                            max_payload=nc.max_payload)
    for event in run.events:
        await js.publish(subjects.event_subject(event.run_id, event.type_name), encode(event),
                         headers={subjects.MSG_ID_HEADER: event.event_id})
