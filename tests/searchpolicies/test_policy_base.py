"""The base, the budget, the registry and the lever catalogue."""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import pytest

from projections.searchgraph import SearchGraph
from searchpolicies import (
    Budget,
    Decision,
    Expand,
    Param,
    PolicyError,
    SearchPolicy,
    Stop,
    UnknownPolicyError,
    get_policy,
    parse_param_args,
    policy_class,
    policy_names,
)
from searchpolicies.levers import (
    KERNEL_CLASSES,
    catalogue,
    format_strategy,
    levers_for,
    normalise_class,
    parse_catalogue,
    parse_strategy,
)
from searchpolicies.registry import BUILTIN, GROUP
from searchpolicies.testing import GraphBuilder

ROOT = Path(__file__).resolve().parents[2]


class FixedPolicy(SearchPolicy):
    """Proposes whatever it is given, to test what `decide` adds."""

    name: ClassVar[str] = "fixed"
    parameters: ClassVar[tuple[Param, ...]] = (
        Param("n", int, 2, "how many", min=1, max=9),
        Param("rate", float, 0.5, "a rate"),
        Param("flag", bool, False, "a flag"),
        Param("mode", str, "a", "a mode", choices=("a", "b")),
    )

    def __init__(self, proposal: Sequence[Decision] = (), **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.proposal = list(proposal)

    def propose(self, graph: SearchGraph, budget: Budget, decision: int) -> Sequence[Decision]:
        return self.proposal


def test_from_params_parses_and_refuses() -> None:
    p = FixedPolicy.from_params({"n": "3", "rate": "1", "flag": "yes", "mode": "b"}, seed=4)
    assert p.param_values() == {"n": 3, "rate": 1.0, "flag": True, "mode": "b"} and p.seed == 4
    for raw, message in [({"n": "x"}, "expects int"), ({"n": "0"}, ">= 1"), ({"n": "10"}, "<= 9"),
                         ({"flag": "maybe"}, "expects bool"), ({"mode": "c"}, "one of a, b"),
                         ({"m": "1"}, "unknown parameter 'm'; known: n, rate, flag, mode")]:
        with pytest.raises(PolicyError, match=message):
            FixedPolicy.from_params(raw)
    with pytest.raises(PolicyError, match="must be int"):
        FixedPolicy(n=True)


def test_rng_is_a_function_of_name_seed_and_decision() -> None:
    assert FixedPolicy(seed=1).rng(2).random() == FixedPolicy(seed=1).rng(2).random()
    assert FixedPolicy(seed=1).rng(2).random() != FixedPolicy(seed=1).rng(3).random()


def test_budget_stop_reasons() -> None:
    g = GraphBuilder().expand("a").evaluate("a", 1.5, iterations=3).graph
    assert Budget().stop_reason(g) is None
    assert Budget(max_nodes=1).stop_reason(g) == "node budget spent (1 nodes)"
    assert Budget(max_candidates=3).stop_reason(g) == "candidate budget spent (3 candidates)"
    assert Budget(max_candidates=4).candidates_left(g) == 1
    assert "target speedup 1.5x" in (Budget(target_speedup=1.5).stop_reason(g) or "")
    assert "wall time" in (Budget(max_wall_s=10, wall_used_s=10).stop_reason(g) or "")
    assert "token" in (Budget(max_tokens=5, tokens_used=9).stop_reason(g) or "")
    assert Budget(max_nodes=5, nodes_used=5).stop_reason(g) == "node budget spent (5 nodes)"


def test_decide_trims_to_the_budget_and_never_stalls() -> None:
    g = GraphBuilder().expand("a").evaluate("a", 1.2)
    many = [Expand("root", "", 4), Expand("a", "", 4), Expand("a", "", 4)]
    assert FixedPolicy(many).decide(g.graph, Budget(max_nodes=3), 1) == many[:2]
    assert FixedPolicy(many).decide(g.graph, Budget(max_candidates=7), 1) == [
        Expand("root", "", 4), Expand("a", "", 2)]
    assert FixedPolicy(many).decide(g.graph, Budget(max_depth=1), 1) == many[:1]
    assert FixedPolicy([Expand("a")]).decide(g.graph, Budget(max_depth=1), 1) == [
        Stop("fixed: no expansion fits the budget (depth 1)")]
    assert FixedPolicy([]).decide(g.graph, Budget(), 1) == [Stop("fixed: nothing left to expand")]
    g.expand("b")  # pending: an empty answer is a wait, and a spent budget waits too
    assert FixedPolicy([]).decide(g.graph, Budget(), 2) == []
    assert FixedPolicy(many).decide(g.graph, Budget(max_nodes=2), 2) == []


def test_decide_refuses_broken_answers() -> None:
    g = GraphBuilder().expand("a").evaluate("a", None)
    for bad, message in [([Expand("zz")], "not in the graph"), ([Expand("a")], "invalid"),
                         ([Expand("root", "", 0)], "fewer than one"),
                         ([Stop("x"), Expand("root")], "Stop must be the last")]:
        with pytest.raises(PolicyError, match=message):
            FixedPolicy(bad).decide(g.graph, Budget(), 1)


def test_registry_finds_every_builtin_and_refuses_unknown_names() -> None:
    assert set(BUILTIN) <= set(policy_names())
    for name in BUILTIN:
        cls = policy_class(name)
        assert cls.name == name and cls.__name__ == f"{name.capitalize()}Policy"
    assert get_policy("beam", {"width": "4"}, seed=3).param_values()["width"] == 4
    assert policy_class("searchpolicies.greedy:GreedyPolicy").name == "greedy"
    with pytest.raises(UnknownPolicyError, match="known: adaptive, beam, evolutionary"):
        get_policy("nope")
    with pytest.raises(PolicyError, match="not a SearchPolicy"):
        policy_class("searchpolicies.levers:Lever")
    assert parse_param_args(["a=1", "b = x=y"]) == {"a": "1", "b": " x=y"}
    for bad in (["a"], ["=1"], ["a=1", "a=2"]):
        with pytest.raises(PolicyError):
            parse_param_args(bad)


def test_pyproject_declares_the_builtins_as_entry_points() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"][GROUP] == BUILTIN


def test_catalogue_has_at_least_25_levers_tagged_with_classes() -> None:
    levers = catalogue()
    assert len(levers) >= 25 and len({lv.id for lv in levers}) == len(levers)
    assert all(lv.classes and set(lv.classes) <= set(KERNEL_CLASSES) and lv.hint for lv in levers)
    for kernel_class in KERNEL_CLASSES:
        assert len(levers_for(kernel_class)) >= 10
    assert levers_for("matmul_epilogue") == levers_for("matmul")
    assert levers_for("") == levers
    with pytest.raises(PolicyError, match="unknown kernel class"):
        normalise_class("sorting")
    front = (ROOT / "knowledge" / "levers.md").read_text().split("---")[1]
    assert all(lv.id in front for lv in levers)  # the note's front matter names every lever


def test_catalogue_parse_errors() -> None:
    with pytest.raises(PolicyError, match="needs an id"):
        parse_catalogue("## x: y\nclasses: matmul\n")
    with pytest.raises(PolicyError, match="unknown kernel classes"):
        parse_catalogue("## x: y\nclasses: sorting\nhint: h\n")


def test_strategy_tags_round_trip() -> None:
    text = format_strategy(["block_shape", "masking"], kernel_class="matmul", island=2)
    s = parse_strategy(text)
    assert (s.levers, s.lever, s.kernel_class, dict(s.tags)) == (
        ("block_shape", "masking"), "block_shape", "matmul", {"island": "2"})
    assert s.text.startswith("Resize the blocks")
    assert parse_strategy("tile rows by 256") == parse_strategy("tile rows by 256")
    assert parse_strategy("tile rows by 256").lever == ""
