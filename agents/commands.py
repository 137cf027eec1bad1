"""The commands of the kernel loop: one per agent kind, imperative, tagged with stable names.

Large inputs travel as artifact hashes (task source, plan, kernel source, suite recipe,
verdict); the agent fetches them by hash. `node_id` is the trajectory's node;
`iteration` the Auto iteration a command belongs to (0 for run preparation). The executor's
commands route by `target_name` (`kg.cmd.executor.<target>`), so each goes only to an
executor that serves its target.
"""

from __future__ import annotations

from typing import Any, ClassVar

from bus.commands import Command

Json = dict[str, Any]


class StartRun(Command, frozen=True, kw_only=True, tag="StartRun"):
    """Run one Auto trajectory for a kernel request (the RunRequested event precedes it)."""

    target: ClassVar[str | None] = "auto"

    task_sha256: str
    task_file: str
    """The task's file name (a task's default NAME is its file name)."""
    task_name: str
    target_name: str
    provider: str
    provider_options: Json = {}
    iterations: int = 5
    fix_rounds: int = 4
    seed: int = 0
    tune_budget: int | None = 8
    hint: str = ""
    knowledge_cutoff_ts: float | None = None
    """Lessons recorded after this time are not retrieved, so a replayed run sees what the
    original saw."""
    price_margin: float = 0.0
    """On a simulated target, a compiled candidate whose estimate does not beat its node's
    parent by this fraction is recorded as not faster and not tested (`RunRequested` has it)."""


class StartSearch(StartRun, frozen=True, kw_only=True, tag="StartSearch"):
    """Run a search: the policy expands nodes, each one Auto trajectory (`ExpandNode`).

    `iterations` is the default inner budget of an expansion; the budget fields are the
    stop criteria (None: no limit); `concurrency` is how many trajectories run at once.
    """

    target: ClassVar[str | None] = "search"

    policy: str
    policy_params: Json = {}
    max_nodes: int | None = 6
    max_candidates: int | None = None
    max_depth: int | None = None
    target_speedup: float | None = None
    max_wall_s: float | None = None
    max_tokens: int | None = None
    concurrency: int = 2


class ExpandNode(StartRun, frozen=True, kw_only=True, tag="ExpandNode"):
    """One trajectory of a search, node `node_id` under `parent_id`, in its own session.

    The run's suite and baseline already exist; `parent` is what the child sees of its
    parent ({code_sha256, plan_sha256, profile_sha256, config, speedup, plan_summary,
    tuning_summary}; the profile travels as its artifact), `failures` the failures on its path. The trajectory
    ends with `NodeEvaluated`; the search orchestrator verifies and finishes the run.
    """

    parent_id: str
    parent: Json | None = None
    failures: list[Json] = []
    recipe_sha256: str
    baseline_s: float | None = None


class AuditRun(Command, frozen=True, kw_only=True, tag="AuditRun"):
    """Recompute the run's claims from the log; `final` audits gate `RunFinished`."""

    target: ClassVar[str | None] = "auditor"

    final: bool = False


class _TaskCommand(Command, frozen=True, kw_only=True):
    task_sha256: str
    task_file: str
    target_name: str
    iteration: int = 0


class _LlmCommand(_TaskCommand, frozen=True, kw_only=True):
    provider: str
    provider_options: Json = {}
    seed: int = 0
    knowledge_cutoff_ts: float | None = None


class FreezeSuite(_LlmCommand, frozen=True, kw_only=True, tag="FreezeSuite"):
    target: ClassVar[str | None] = "test_synth"


class MeasureBaseline(_TaskCommand, frozen=True, kw_only=True, tag="MeasureBaseline"):
    target: ClassVar[str | None] = "baseline"


class ProposePlan(_LlmCommand, frozen=True, kw_only=True, tag="ProposePlan"):
    target: ClassVar[str | None] = "planner"

    parent: Json | None = None
    """None, or {code_sha256, plan_sha256, profile_sha256, config, speedup}."""
    failures: list[Json] = []
    hint: str = ""
    feedback: str = ""
    baseline_s: float | None = None
    written_plans: list[str] = []
    """The plan sha256s of the kernels other nodes of the run wrote before this plan: an author
    that can tell its choices apart avoids writing one of them again."""
    unseen_siblings: int = 0
    """Expansions of the run requested before this node that have not ended: their next
    choices are not in `written_plans` yet (a parallel search's siblings plan at once), so an
    author steps past as many of its best choices as they may be taking."""


class WriteKernel(_LlmCommand, frozen=True, kw_only=True, tag="WriteKernel"):
    target: ClassVar[str | None] = "implementer"

    plan_sha256: str
    parent: Json | None = None
    failures: list[Json] = []
    feedback: str = ""


class FixKernel(_LlmCommand, frozen=True, kw_only=True, tag="FixKernel"):
    target: ClassVar[str | None] = "fixer"

    code_sha256: str
    diagnostics: list[Json] = []
    history: list[Json] = []
    round: int = 1


class _KernelCommand(_TaskCommand, frozen=True, kw_only=True):
    code_sha256: str
    recipe_sha256: str
    """The frozen suite's recipe (the suite is rebuilt and its hash checked)."""
    config: Json = {}


class CheckCompile(_KernelCommand, frozen=True, kw_only=True, tag="CheckCompile"):
    target: ClassVar[str | None] = "executor"
    route_field: ClassVar[str | None] = "target_name"

    attempt: int = 0


class RunTests(_KernelCommand, frozen=True, kw_only=True, tag="RunTests"):
    target: ClassVar[str | None] = "executor"
    route_field: ClassVar[str | None] = "target_name"


class MeasureConfig(_KernelCommand, frozen=True, kw_only=True, tag="MeasureConfig"):
    target: ClassVar[str | None] = "executor"
    route_field: ClassVar[str | None] = "target_name"


class TuneKernel(_KernelCommand, frozen=True, kw_only=True, tag="TuneKernel"):
    target: ClassVar[str | None] = "autotuner"

    budget: int | None = 8
    verdict_sha256: str | None = None
    """The default configuration's verdict, of its test run or (a sweep before any test) of
    its compile check: its profile narrows the grid."""
    beat_latency_s: float | None = None
    """On a simulated target, test only configurations priced below this: the latency that
    beats the node's parent, when the default configuration was priced too slow to test."""
    tested_at_most: int | None = None
    """On a simulated target, test at most this many of the configurations priced fastest
    (None: `agents.autotuner.TESTED_AFTER_PRICING`). A sweep before the default's test tests
    one: if it fails, the default is tested next, so a kernel that is wrong in every
    configuration runs the suite twice, not three times."""
    default_latency_s: float | None = None
    default_program_sha256: str | None = None
    """On a simulated target without a verdict, the default configuration's price and the
    sha256 of the program priced, from its compile check: the sweep takes them instead of
    lowering the default again. None (both): the sweep prices the default itself."""


class ProfileKernel(_TaskCommand, frozen=True, kw_only=True, tag="ProfileKernel"):
    target: ClassVar[str | None] = "profiler"

    code_sha256: str
    verdict_sha256: str


class VerifyWinner(_KernelCommand, frozen=True, kw_only=True, tag="VerifyWinner"):
    target: ClassVar[str | None] = "verifier"


AGENT_COMMANDS: tuple[type[Command], ...] = (
    StartRun, StartSearch, ExpandNode, AuditRun, FreezeSuite, MeasureBaseline, ProposePlan, WriteKernel, FixKernel, CheckCompile,
    RunTests, MeasureConfig, TuneKernel, ProfileKernel, VerifyWinner,
)
