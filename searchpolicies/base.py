"""The search policy interface: what the orchestrator asks, when, and what comes back.

Call order (the orchestrator's side of the contract):

1. The run starts: `RunRequested` (the root node) and `BaselineMeasured` are in the log.
2. The orchestrator folds the run's events into a `SearchGraph`, fills in a `Budget` and
   calls `policy.decide(graph, budget, decision)`, with `decision` counting the calls made
   in this run so far (0 for the first). It is recorded on every `ExpansionRequested`.
3. It publishes each `Expand` as an `ExpansionRequested` (a new node under `parent_id`,
   run as one trajectory of `iterations` iterations with `strategy` as its hint). A
   `Stop` ends the search: nothing more is asked and `SearchStopped` carries its reason.
4. After every `NodeEvaluated` it calls `decide` again with the grown graph and the next
   `decision`, until a `Stop`.

A policy is a pure function of (graph, budget, its parameters, seed, decision): the same
log gives the same decisions, which replay and resume rely on. It keeps no state between
calls; a policy that learns derives what it learned from the graph each time.
"""

from __future__ import annotations

import abc
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from projections.searchgraph import Node, SearchGraph
from searchpolicies.errors import PolicyError


@dataclass(frozen=True)
class Expand:
    """Run one new trajectory from `parent_id` with a strategy hint and an iteration budget."""

    parent_id: str
    strategy: str = ""
    iterations: int = 1


@dataclass(frozen=True)
class Stop:
    """End the search; `reason` goes into `SearchStopped`."""

    reason: str


Decision = Expand | Stop


@dataclass(frozen=True)
class Budget:
    """The limits of one search and what is used so far, as data the orchestrator fills in.

    `None` means no limit. `nodes_used` and `candidates_used` are counted from the graph
    when left `None` (non-root nodes; iterations finished by non-root nodes, less those whose
    plan wrote no kernel: such a plan costs no candidate); the
    orchestrator passes them when it knows more (iterations requested but not yet run).
    """

    max_nodes: int | None = 25
    """Trajectories (non-root nodes) the search may request."""
    max_candidates: int | None = None
    """Candidate kernels (inner iterations over all trajectories)."""
    max_depth: int | None = None
    target_speedup: float | None = None
    max_wall_s: float | None = None
    max_tokens: int | None = None
    nodes_used: int | None = None
    candidates_used: int | None = None
    wall_used_s: float = 0.0
    tokens_used: int = 0

    def nodes(self, graph: SearchGraph) -> int:
        if self.nodes_used is not None:
            return self.nodes_used
        return sum(1 for n in graph.nodes if n.parent_id is not None)

    def candidates(self, graph: SearchGraph) -> int:
        if self.candidates_used is not None:
            return self.candidates_used
        return sum(n.iterations_done - n.no_gain_plans for n in graph.nodes if n.parent_id is not None)

    def nodes_left(self, graph: SearchGraph) -> int | None:
        return None if self.max_nodes is None else max(0, self.max_nodes - self.nodes(graph))

    def candidates_left(self, graph: SearchGraph) -> int | None:
        if self.max_candidates is None:
            return None
        return max(0, self.max_candidates - self.candidates(graph))

    def allows_child_of(self, node: Node) -> bool:
        return self.max_depth is None or node.depth + 1 <= self.max_depth

    def stop_reason(self, graph: SearchGraph) -> str | None:
        """Why the search must stop now, or None."""
        best = graph.best
        if (self.target_speedup is not None and best is not None and best.speedup is not None
                and best.speedup >= self.target_speedup):
            return f"target speedup {self.target_speedup:g}x reached ({best.speedup:.3g}x)"
        if self.nodes_left(graph) == 0:
            return f"node budget spent ({self.max_nodes} nodes)"
        if self.candidates_left(graph) == 0:
            return f"candidate budget spent ({self.max_candidates} candidates)"
        if self.max_wall_s is not None and self.wall_used_s >= self.max_wall_s:
            return f"wall time spent ({self.max_wall_s:g} s)"
        if self.max_tokens is not None and self.tokens_used >= self.max_tokens:
            return f"token budget spent ({self.max_tokens} tokens)"
        return None


@dataclass(frozen=True)
class Param:
    """One keyword parameter of a policy: its type, default, bounds and what it does."""

    name: str
    type: type
    default: Any
    help: str
    min: float | None = None
    max: float | None = None
    choices: tuple[Any, ...] = ()

    def check(self, value: Any, policy: str) -> Any:
        if self.type is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if type(value) is not self.type:
            raise PolicyError(f"{policy}: parameter {self.name!r} must be "
                              f"{self.type.__name__}, got {value!r}")
        if self.min is not None and value < self.min:
            raise PolicyError(f"{policy}: parameter {self.name!r} must be >= {self.min:g}, "
                              f"got {value!r}")
        if self.max is not None and value > self.max:
            raise PolicyError(f"{policy}: parameter {self.name!r} must be <= {self.max:g}, "
                              f"got {value!r}")
        if self.choices and value not in self.choices:
            raise PolicyError(f"{policy}: parameter {self.name!r} must be one of "
                              f"{', '.join(map(str, self.choices))}, got {value!r}")
        return value

    def parse(self, text: str, policy: str) -> Any:
        """A `--param key=value` string as this parameter's type."""
        raw = text.strip()
        try:
            if self.type is bool:
                lowered = raw.lower()
                if lowered not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError(raw)
                value: Any = lowered in ("true", "1", "yes")
            else:
                value = self.type(raw)
        except ValueError:
            raise PolicyError(f"{policy}: parameter {self.name!r} expects "
                              f"{self.type.__name__}, got {text!r}") from None
        return self.check(value, policy)


class SearchPolicy(abc.ABC):
    """Decides which nodes of the search graph to expand next, and when to stop.

    Called after the baseline and after each evaluated node (see the module docstring);
    returns a sequence of `Expand` followed by at most one `Stop`, or an empty sequence
    to wait while nodes are pending. Subclasses set `name` (the `--policy` name; the class
    is `<Name>Policy`), declare `parameters`, and implement `propose`. `decide` wraps
    `propose` with what every policy shares: the budget's stop reasons, trimming the
    proposal to the budget, checking it, and a `Stop` instead of a stall.
    """

    name: ClassVar[str]
    parameters: ClassVar[tuple[Param, ...]] = ()

    def __init__(self, *, seed: int = 0, **params: Any) -> None:
        known = {p.name: p for p in self.parameters}
        unknown = sorted(set(params) - set(known))
        if unknown:
            raise PolicyError(f"{self.name}: unknown parameter {', '.join(map(repr, unknown))}; "
                              f"known: {', '.join(known) or 'none'}")
        self.seed = int(seed)
        self._values = {n: p.check(params.get(n, p.default), self.name) for n, p in known.items()}
        for key, value in self._values.items():
            setattr(self, key, value)

    # --- parameters -------------------------------------------------------------------------

    @classmethod
    def params(cls) -> tuple[Param, ...]:
        """The parameters this policy accepts, with defaults and help."""
        return cls.parameters

    @classmethod
    def from_params(cls, raw: Mapping[str, str], *, seed: int = 0) -> SearchPolicy:
        """Build from `--param key=value` strings; unknown keys and bad values are refused."""
        known = {p.name: p for p in cls.parameters}
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise PolicyError(f"{cls.name}: unknown parameter {', '.join(map(repr, unknown))}; "
                              f"known: {', '.join(known) or 'none'}")
        return cls(seed=seed, **{k: known[k].parse(v, cls.name) for k, v in raw.items()})

    def param_values(self) -> dict[str, Any]:
        """Every parameter's value (for `RunRequested.policy_params`)."""
        return dict(self._values)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"{type(self).__name__}(seed={self.seed}{', ' if args else ''}{args})"

    # --- deciding ---------------------------------------------------------------------------

    def rng(self, decision: int) -> random.Random:
        """The randomness of one decision: the same for the same policy, seed and decision."""
        return random.Random(f"{self.name}:{self.seed}:{decision}")

    @abc.abstractmethod
    def propose(self, graph: SearchGraph, budget: Budget, decision: int) -> Sequence[Decision]:
        """What this policy wants now; `decide` trims it to the budget. Must not mutate `graph`."""

    def decide(self, graph: SearchGraph, budget: Budget, decision: int) -> list[Decision]:
        """The answer to the orchestrator: expansions, then at most one Stop; [] to wait."""
        pending = bool(graph.pending)
        reason = budget.stop_reason(graph)
        if reason is not None:
            return [] if pending else [Stop(reason)]
        proposed = list(self.propose(graph, budget, decision))
        for i, d in enumerate(proposed):
            if isinstance(d, Stop) and i != len(proposed) - 1:
                raise PolicyError(f"{self.name}: a Stop must be the last decision, got {proposed}")
            if not isinstance(d, Expand | Stop):
                raise PolicyError(f"{self.name}: {d!r} is neither an Expand nor a Stop")
        stop = [d for d in proposed if isinstance(d, Stop)]
        expands = self._within_budget(graph, budget, [d for d in proposed if isinstance(d, Expand)])
        if expands or stop or pending:
            return [*expands, *stop]
        if any(isinstance(d, Expand) for d in proposed):
            return [Stop(f"{self.name}: no expansion fits the budget (depth {budget.max_depth})")]
        return [Stop(f"{self.name}: nothing left to expand")]

    def _within_budget(self, graph: SearchGraph, budget: Budget,
                       expands: list[Expand]) -> list[Expand]:
        nodes_left = budget.nodes_left(graph)
        candidates_left = budget.candidates_left(graph)
        kept: list[Expand] = []
        for e in expands:
            parent = graph.state.nodes.get(e.parent_id)
            if parent is None:
                raise PolicyError(f"{self.name}: expands {e.parent_id!r}, which is not in the graph")
            if parent.status not in ("root", "valid"):
                raise PolicyError(f"{self.name}: expands {e.parent_id!r}, which is {parent.status}")
            if e.iterations < 1:
                raise PolicyError(f"{self.name}: {e!r} asks for fewer than one iteration")
            if not budget.allows_child_of(parent):
                continue
            if nodes_left is not None and len(kept) >= nodes_left:
                break
            if candidates_left is not None:
                if candidates_left < 1:
                    break
                if e.iterations > candidates_left:
                    e = Expand(e.parent_id, e.strategy, candidates_left)
                candidates_left -= e.iterations
            kept.append(e)
        return kept
