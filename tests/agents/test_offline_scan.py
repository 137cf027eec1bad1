"""The chunked linear-attention writer: both layouts of its chunks (sequence on the rows, or
on the lanes with `seq_on_lanes`) compute what the reference's step-by-step scan does, at
every chunk size it lists, sequence tails included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from offline_kernels import assert_matches_reference, implemented

from agents.llm.offline import planner
from agents.llm.offline.author import candidate_source
from agents.llm.offline.classify import classify_task

LINEAR = Path(__file__).resolve().parents[2] / "tasks/linear_attention.py"


def _source() -> str:
    return candidate_source(classify_task(LINEAR), {}, LINEAR.stem)


@pytest.mark.parametrize(("block_seq", "seq_on_lanes", "block_groups"),
                         [(128, 0, 1), (128, 1, 1), (64, 1, 1), (256, 1, 1), (64, 0, 4), (256, 1, 8)])
def test_both_layouts_compute_the_reference(block_seq: int, seq_on_lanes: int,
                                            block_groups: int) -> None:
    """At the tuning point (8 groups) the blocks hold 1, 4 or 8 of them; the unseen shapes
    (2 and 4 groups) take the largest whole number of groups the knob allows."""
    assert_matches_reference(LINEAR, _source(), 0, block_seq=block_seq,
                             seq_on_lanes=seq_on_lanes, block_groups=block_groups)


def test_the_layout_is_a_knob_the_tuner_reaches() -> None:
    namespace: dict[str, Any] = {}
    exec(compile(_source(), str(LINEAR), "exec"), namespace)
    assert namespace["TUNABLES"]["seq_on_lanes"] == [0, 1]  # as written first
    assert namespace["TUNABLES"]["block_groups"] == [1, 2]


def test_a_block_move_keeps_the_layout_its_parent_was_tuned_to() -> None:
    """A child of a parent the tuner moved onto the lanes is written on the lanes (its
    TUNABLES' default, the one the compile check prices against the parent): before, every
    block move went back to the rows and was priced at a third of its parent, so a search
    stopped at its second kernel. The blocks still move; the layout is no move itself."""
    import inspect

    facts = classify_task(LINEAR)
    chip = {"vmem_bytes": 128 * 2**20}
    root = planner.choose(facts, {"chip": chip, "seed": 1, "hint": "", "parent": None, "failures": []})
    plan = planner.plan_text(facts, root, {"chip": chip}, "linear_attention")
    tuned = {**root["params"], "block_groups": 2, "seq_on_lanes": 1}
    child = planner.choose(facts, {"chip": chip, "seed": 2, "hint": "[lever=block_shape]",
                                   "failures": [], "parent": {"plan": plan, "config": tuned},
                                   "written_plans": [plan]})
    assert child["params"]["seq_on_lanes"] == 1 and child["levers"][-1] == "bigger_blocks"
    assert child["params"]["block_groups"] == 4
    namespace: dict[str, Any] = {}
    exec(compile(implemented(LINEAR, child), str(LINEAR), "exec"), namespace)
    assert namespace["TUNABLES"]["seq_on_lanes"] == [1, 0]
    assert inspect.signature(namespace["build"]).parameters["seq_on_lanes"].default == 1
    # the same blocks with the layout carried are the same move: no second kernel of them
    again = planner.choose(facts, {"chip": chip, "seed": 3, "hint": "[lever=block_shape]",
                                   "failures": [], "parent": {"plan": plan, "config": tuned},
                                   "written_plans": [plan, planner.plan_text(
                                       facts, child, {"chip": chip}, "linear_attention")]})
    assert again["no_gain"] or {k: again["params"][k] for k in ("block_seq", "block_groups")} != {
        k: child["params"][k] for k in ("block_seq", "block_groups")}
