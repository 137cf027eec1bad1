"""Every event of a kernelgraph run: immutable, past tense, with a stable type name.

Each event is a frozen msgspec Struct. The envelope (`Event`) carries identity and
provenance; subclasses carry the payload. The `type` tag is a stable string declared
per class, never the Python class path, so classes can move or be renamed without
breaking old logs. `v` is the schema version of the payload; when a payload changes
shape, bump `v` on the class and register an upcaster in `eventstore.upcasting`.

Large texts (kernel source, plan markdown, test suites, profiles) never travel inside
an event: they are artifacts stored once by sha256, and events carry the hash.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar, Literal, Self, Union

import msgspec

from eventstore.eventids import event_id_time as event_id_time  # re-exported: the ids' home
from eventstore.eventids import new_event_id

MeasuredOn = Literal["simulated", "real"]
"""Where a latency came from. Simulated and real figures are never averaged together."""

Json = dict[str, Any]
PRICE_PHASE = "price"  # IterationFinished.failed_phase of a kernel priced out: never tested



class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", gc=False):
    """The envelope shared by every event."""

    event_id: str
    run_id: str
    ts: float
    producer: str
    node_id: str | None = None
    causation_id: str | None = None
    v: int = 1

    phase: ClassVar[str | None] = None
    """For events that end an agent phase: the phase name used in wall-time metrics."""

    @classmethod
    def create(
        cls,
        *,
        run_id: str,
        producer: str,
        node_id: str | None = None,
        causation_id: str | None = None,
        **payload: Any,
    ) -> Self:
        """Stamp a new event with a fresh id and the current time."""
        return cls(
            event_id=new_event_id(),
            run_id=run_id,
            ts=time.time(),
            producer=producer,
            node_id=node_id,
            causation_id=causation_id,
            **payload,
        )

    @property
    def type_name(self) -> str:
        return type(self).__struct_config__.tag  # type: ignore[return-value]


# --- the kernel request and what is fixed before any kernel exists -------------------------


class RunRequested(Event, frozen=True, kw_only=True, tag="RunRequested"):
    """A user asked for a kernel: the run's root. The root node's id is `node_id`."""

    task_name: str
    task_sha256: str
    policy: str
    target: str
    provider: str
    policy_params: Json = {}
    budget: Json = {}
    seed: int = 0
    start_command: Json = {}
    """The command that starts the run (StartRun or StartSearch, as JSON), so `resume`
    can send it again with the same id."""
    price_margin: float = 0.0
    """On a simulated target, a compiled candidate is tested only when its estimate beats
    its node's parent by this fraction (0.0: strictly faster); see `IterationFinished`."""
    weak_sandbox: bool = False
    """The requester opted in (``--allow-weak-sandbox``) where the full sandbox could not be
    built, so the run's candidates ran in a weaker one (v2; every v1 run: False)."""
    v: int = 2


class TestSuiteFrozen(Event, frozen=True, kw_only=True, tag="TestSuiteFrozen"):
    """The frozen test suite: hashed, stored as an artifact, never changed again."""

    __test__: ClassVar[bool] = False  # not a pytest class

    suite_sha256: str
    n_cases: int
    seeds: list[int] = []
    shapes: list[Json] = []
    tolerance: Json = {}
    wall_s: float = 0.0
    recipe_sha256: str | None = None
    """The artifact from which any worker rebuilds this exact suite (checked by its hash)."""
    task_sha256: str | None = None
    """The task the suite was built from, when it differs from the request's (an input maker)."""
    notes: list[str] = []
    phase: ClassVar[str | None] = "test_synth"


class BaselineMeasured(Event, frozen=True, kw_only=True, tag="BaselineMeasured"):
    """The XLA reference on the run's target: the denominator of every speedup."""

    latency_s: float
    measured_on: MeasuredOn
    target: str
    method: str = ""
    wall_s: float = 0.0
    # simulated: the program priced ("simulated, priced from XLA:TPU's program" or "... from
    # the host program"; `method` says why a fallback); "" when timed, and in older logs
    priced_from: str = ""
    phase: ClassVar[str | None] = "baseline"


# --- search decisions ---------------------------------------------------------------------


class ExpansionRequested(Event, frozen=True, kw_only=True, tag="ExpansionRequested"):
    """The policy asked for one new trajectory (node `node_id`) under `parent_id`."""

    parent_id: str
    policy: str
    strategy: str = ""
    iterations: int = 1
    decision: int = 0


class SearchStopped(Event, frozen=True, kw_only=True, tag="SearchStopped"):
    """The policy said Stop."""

    policy: str
    reason: str


class PolicyDecided(Event, frozen=True, kw_only=True, tag="PolicyDecided"):
    """One answer of the search policy, recorded before any of its expansions is requested.

    `seen_events` is how many of the run's events (in log order) the policy's graph was
    folded from; `expansions` are {node_id, parent_id, strategy, iterations}; `stop` is the
    Stop reason, if any.
    """

    policy: str
    decision: int
    seen_events: int
    expansions: list[Json] = []
    stop: str | None = None
    budget: Json = {}
    """The `Budget` the policy was given (limits and what was used), so that, with the
    graph folded from the first `seen_events` events, the decision can be recomputed."""


# --- one iteration of a trajectory ----------------------------------------------------------


class _IterationEvent(Event, frozen=True, kw_only=True):
    iteration: int = 0
    wall_s: float = 0.0


class PlanProposed(_IterationEvent, frozen=True, kw_only=True, tag="PlanProposed"):
    plan_sha256: str
    summary: str = ""
    no_gain: bool = False
    """The planner concluded, with evidence in the plan, that no kernel will pay off."""
    next_levers: list[str] = []
    """Catalogue levers the plan's `## Next levers` names for the kernel it writes, most
    promising first (empty when the plan names none): what a policy may try on it next."""
    phase: ClassVar[str | None] = "plan"


class KernelWritten(_IterationEvent, frozen=True, kw_only=True, tag="KernelWritten"):
    code_sha256: str
    tunables: Json = {}
    phase: ClassVar[str | None] = "implement"


class CompileChecked(_IterationEvent, frozen=True, kw_only=True, tag="CompileChecked"):
    code_sha256: str
    ok: bool
    attempt: int = 0
    diagnostics: list[Json] = []
    vmem_bytes: int | None = None
    estimate_s: float | None = None
    """The simulated latency of the default configuration at the tuning point, priced by
    the compile check itself (simulated targets only; None when the check could not price
    it): what the price gate reads before any test runs."""
    estimate_speedup: float | None = None
    program_sha256: str | None = None
    """The sha256 of the program `estimate_s` priced (the tuning point's lowered text), so
    the autotuner takes that price for the default configuration instead of lowering it
    again; None where `estimate_s` is, and in logs written before it was recorded."""
    verdict_sha256: str | None = None
    """The compile check's verdict record (no case ran: no pass) where it priced the kernel:
    its profile narrows a sweep run before any test (`agents.judging`); None where
    `estimate_s` is, and in logs written before it was recorded."""
    phase: ClassVar[str | None] = "compile"


class FixAttempted(_IterationEvent, frozen=True, kw_only=True, tag="FixAttempted"):
    attempt: int
    code_sha256: str
    error: str = ""
    cause: str = ""
    fix: str = ""
    parent_code_sha256: str | None = None
    phase: ClassVar[str | None] = "fix"


class TestsRun(_IterationEvent, frozen=True, kw_only=True, tag="TestsRun"):
    __test__: ClassVar[bool] = False

    code_sha256: str
    suite_sha256: str
    passed: bool
    n_cases: int
    n_failed: int = 0
    max_abs_err: float | None = None
    mean_abs_err: float | None = None
    reasons: list[str] = []
    latency_s: float | None = None
    speedup: float | None = None
    measured_on: MeasuredOn | None = None
    verdict_sha256: str | None = None
    """The verifier's summary and measurement (an artifact) the profiler reads."""
    config: Json = {}
    phase: ClassVar[str | None] = "test"


class TuningSwept(_IterationEvent, frozen=True, kw_only=True, tag="TuningSwept"):
    code_sha256: str
    configs_tried: int
    configs_skipped: int = 0
    """Configurations not timed because they lowered to a program already priced in the
    sweep (the same lowered module text, hashed)."""
    configs_priced: int = 0
    """On a simulated target, the configurations other than the default priced from their
    own lowering in the sweep before any was tested, less those skipped as repeats
    (`configs_skipped`); only the fastest priced were tested (`configs_tried`). The default's
    price, the test run's or the compile check's where known, else lowered in the sweep too,
    is never counted (the tuning table says where it came from)."""
    configs_floored: int = 0
    """Of `configs_priced`, those whose kernels alone were priced at or above the price to
    beat: whatever the ops around them cost they cannot win, so they were not compiled for
    the chip (the tuning table gives each one's floor)."""
    best_config: Json = {}
    best_latency_s: float | None = None
    measured_on: MeasuredOn = "simulated"
    table_sha256: str | None = None
    best_speedup: float | None = None
    verdict_sha256: str | None = None
    """The best configuration's verdict summary and measurement, for the profiler."""
    phase: ClassVar[str | None] = "autotune"


class ProfileCaptured(_IterationEvent, frozen=True, kw_only=True, tag="ProfileCaptured"):
    code_sha256: str
    profile_sha256: str
    latency_s: float
    measured_on: MeasuredOn
    bound: str = ""
    speedup: float | None = None
    top_lever: str = ""
    worth_more: bool = True
    """False when the profile says more iterations will not pay (at the roofline)."""
    phase: ClassVar[str | None] = "profile"


class ConfigMeasured(_IterationEvent, frozen=True, kw_only=True, tag="ConfigMeasured"):
    """One configuration of an autotuning sweep, fully evaluated by an executor."""

    code_sha256: str
    config: Json
    passed: bool
    latency_s: float | None = None
    speedup: float | None = None
    measured_on: MeasuredOn | None = None
    verdict_sha256: str | None = None
    reasons: list[str] = []


class IterationFinished(_IterationEvent, frozen=True, kw_only=True, tag="IterationFinished"):
    """One plan -> implement -> compile -> test -> tune -> profile pass ended."""

    valid: bool
    compiled: bool
    code_sha256: str | None = None
    plan_sha256: str | None = None
    latency_s: float | None = None
    speedup: float | None = None
    measured_on: MeasuredOn = "simulated"
    tunables: Json = {}
    failed_phase: str | None = None
    error: str = ""
    verdict_sha256: str | None = None
    """The verdict that backs `speedup` (a TestsRun's or the tuning sweep's best)."""
    proof_event_id: str | None = None
    """The TestsRun or TuningSwept event that reported that verdict."""
    cites_event_id: str | None = None
    """Set when this iteration judged nothing itself. Either the kernel (its code, on the run's
    suite, target and tuning grid) was judged before in this run: the earlier IterationFinished
    that judged it, whose outcome and figures this one repeats; or (`failed_phase` PRICE_PHASE)
    the CompileChecked whose estimate could not beat the node's parent by the run's price
    margin, so the kernel was not tested: it is neither correct nor wrong."""
    estimate_speedup: float | None = None
    """For `failed_phase` PRICE_PHASE: the estimate that could not beat the parent."""
    no_gain: bool = False
    """The plan wrote no kernel: the planner concluded none pays off, or the author's space
    from this parent is exhausted. It is no candidate: a candidate budget does not count it."""


class NodeEvaluated(Event, frozen=True, kw_only=True, tag="NodeEvaluated"):
    """A trajectory ended on its best valid iteration (best-of-N rollback), or on none."""

    valid: bool
    compiled: bool
    best_iteration: int | None = None
    iterations: int = 0
    code_sha256: str | None = None
    plan_sha256: str | None = None
    latency_s: float | None = None
    speedup: float | None = None
    measured_on: MeasuredOn = "simulated"
    tunables: Json = {}
    strategy: str = ""
    verdict_sha256: str | None = None
    """The best iteration's verdict, which backs `speedup`."""
    parent_id: str | None = None
    no_gain_plans: int = 0
    """Of `iterations`, those whose plan wrote no kernel (`IterationFinished.no_gain`): they
    cost no candidate. A node whose every iteration is one wrote nothing at all."""


# --- the end of a run ---------------------------------------------------------------------


class WinnerVerified(Event, frozen=True, kw_only=True, tag="WinnerVerified"):
    """The verifier re-checked the winner in a fresh process; the receipt is an artifact."""

    verdict: Literal["pass", "fail"]
    receipt_sha256: str
    speedup: float | None = None
    measured_on: MeasuredOn = "simulated"
    reasons: list[str] = []
    wall_s: float = 0.0
    phase: ClassVar[str | None] = "verify"


class RunFinished(Event, frozen=True, kw_only=True, tag="RunFinished"):
    status: Literal["completed", "stopped", "failed"]
    best_node_id: str | None = None
    speedup: float | None = None
    measured_on: MeasuredOn = "simulated"
    receipt_sha256: str | None = None
    reason: str = ""


# --- cross-cutting ------------------------------------------------------------------------


class RunAudited(Event, frozen=True, kw_only=True, tag="RunAudited"):
    """The auditor recomputed the run's claims from the log alone.

    `final` audits gate `RunFinished`: a run is marked finished only after a clean one.
    Each finding is {check, message, event_id}.
    """

    clean: bool
    final: bool = False
    chain_ok: bool = True
    events_checked: int = 0
    findings: list[Json] = []


class AgentFailed(Event, frozen=True, kw_only=True, tag="AgentFailed"):
    """An agent gave up on a command after its last delivery."""

    agent: str
    command_type: str
    error: str
    deliveries: int = 1
    command_id: str | None = None


class MessageDeadLettered(Event, frozen=True, kw_only=True, tag="MessageDeadLettered"):
    """A message nobody could decode; its raw bytes are kept for inspection."""

    subject: str
    error: str
    raw: bytes = b""


class HumanFeedbackGiven(Event, frozen=True, kw_only=True, tag="HumanFeedbackGiven"):
    """A user's step in a HITL session: `goto` names the next phase in `phase_name`."""

    phase_name: str
    action: Literal["approve", "edit", "feedback", "reject", "goto"]
    text: str = ""
    artifact_sha256: str | None = None


class LlmCalled(Event, frozen=True, kw_only=True, tag="LlmCalled"):
    agent: str
    provider: str
    model: str
    prompt_sha256: str
    response_sha256: str
    tokens_in: int
    tokens_out: int
    latency_ms: float
    iteration: int | None = None
    seed: int | None = None
    """The seed the provider drew this answer with (per expansion and step; None: none)."""
    temperature: float | None = None
    """The sampling temperature the provider used (None: its default, or no sampling)."""


class KnowledgeUnavailable(Event, frozen=True, kw_only=True, tag="KnowledgeUnavailable"):
    """The knowledge store could not be used: a prompt went without retrieval, or lessons
    were not kept. Knowledge is an aid, so the run goes on, but never without this record."""

    operation: Literal["retrieve", "lessons"]
    reason: str
    store: str = ""
    """The folder or server URL that could not be used."""
    lost: int = 0
    """For "lessons": how many were not written."""


class PingAnswered(Event, frozen=True, kw_only=True, tag="PingAnswered"):
    """The echo agent answered a Ping: the bus's health check and load generator."""

    agent: str
    seq: int = 0
    index: int = 0
    echo: str = ""


EVENT_TYPES: tuple[type[Event], ...] = (
    RunRequested,
    TestSuiteFrozen,
    BaselineMeasured,
    ExpansionRequested,
    SearchStopped,
    PolicyDecided,
    PlanProposed,
    KernelWritten,
    CompileChecked,
    FixAttempted,
    TestsRun,
    TuningSwept,
    ConfigMeasured,
    ProfileCaptured,
    IterationFinished,
    NodeEvaluated,
    WinnerVerified,
    RunFinished,
    RunAudited,
    AgentFailed,
    MessageDeadLettered,
    HumanFeedbackGiven,
    LlmCalled,
    KnowledgeUnavailable,
    PingAnswered,
)

AnyEvent = Union[EVENT_TYPES]  # noqa: UP007 (built from the tuple, so the two never drift)
"""The tagged union every decoder uses; add a new event type to EVENT_TYPES only."""

EVENT_TYPES_BY_NAME: dict[str, type[Event]] = {
    cls.__struct_config__.tag: cls  # type: ignore[misc]
    for cls in EVENT_TYPES
}


def current_version(type_name: str) -> int:
    """The schema version this code writes for an event type."""
    return _CURRENT_VERSIONS[type_name]


_CURRENT_VERSIONS: dict[str, int] = {
    name: next(f.default for f in msgspec.structs.fields(cls) if f.name == "v")
    for name, cls in EVENT_TYPES_BY_NAME.items()
}
