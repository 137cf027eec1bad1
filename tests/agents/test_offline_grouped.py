"""The grouped-matmul kernel's groups per step (G): several groups' rhs in one grid step, a
tail step past the last group that reads no size and adds nothing, an inf or NaN that stays on
its own group's rows, and the planner's block moves that climb the rows and G together."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from offline_kernels import assert_matches_reference, first_kernel

from agents.llm.offline import grouped, planner
from agents.llm.offline.classify import TaskFacts, classify_task

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "tasks" / "grouped_matmul.py"


@functools.cache
def _chip() -> dict[str, Any]:
    from tools.api import chip_figures

    return chip_figures("sim-tpu-v6e")


@functools.cache
def _facts() -> TaskFacts:
    return classify_task(TASK)


@functools.cache
def _namespace() -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "candidate"}
    exec(compile(first_kernel(TASK), str(TASK), "exec"), namespace)
    return namespace


@pytest.mark.slow
@pytest.mark.parametrize("groups_per_step", [1, 2, 3])
def test_the_kernel_computes_the_reference_at_every_groups_per_step(groups_per_step: int) -> None:
    """At the tuning point (16 groups: G = 3 leaves a tail step of one group and two slots past
    the last) and the unseen shapes (3 groups, 100 rows; 8 groups), in TPU interpret mode."""
    assert_matches_reference(TASK, first_kernel(TASK), seed=5, groups_per_step=groups_per_step)


def _ragged(lhs: np.ndarray, rhs: np.ndarray, sizes: list[int]) -> np.ndarray:
    out = np.zeros((lhs.shape[0], rhs.shape[2]), np.float64)
    start = 0
    for g, size in enumerate(sizes):
        out[start:start + size] = lhs[start:start + size].astype(np.float64) @ rhs[g]
        start += size
    return out


@pytest.mark.slow
@pytest.mark.parametrize("groups_per_step", [2, 3])
def test_a_non_finite_rhs_and_empty_groups_stay_on_their_own_rows(groups_per_step: int) -> None:
    """Five groups, two of them empty, rows past the last group, 16-row blocks that straddle
    groups: group 2's rhs holds an inf and a NaN, and every other group's rows are exact, the
    rows in no group exactly 0, whether group 2 shares its step with others or not."""
    import jax
    from jax.experimental.pallas import tpu as pltpu

    rng = np.random.default_rng(7)
    sizes = [10, 0, 20, 0, 14]  # 44 of 64 rows; groups 1 and 3 empty
    lhs = rng.standard_normal((64, 128)).astype(np.float32)
    rhs = (rng.standard_normal((5, 128, 128)) / 8).astype(np.float32)
    rhs[2, 3, 5], rhs[2, 7, 9] = np.inf, np.nan
    kernel = _namespace()["build"](block_m=16, block_n=128, groups_per_step=groups_per_step)
    with pltpu.force_tpu_interpret_mode():
        # and a trailing Python scalar, as a JAXBench task passes its group capacity
        got = np.asarray(jax.block_until_ready(kernel(lhs, rhs, np.asarray(sizes, np.int32), 16)))
    want = _ragged(lhs, rhs, sizes)
    finite_rows = np.r_[0:10, 30:44]
    np.testing.assert_allclose(got[finite_rows], want[finite_rows], rtol=1e-4, atol=1e-4)
    assert np.all(got[44:] == 0.0)
    assert not np.all(np.isfinite(got[10:30]))  # the inf and NaN did reach their own rows


def test_groups_per_step_is_checked() -> None:
    build = _namespace()["build"]
    lhs, rhs, sizes = np.ones((8, 128), np.float32), np.ones((2, 128, 128), np.float32), np.ones(2, np.int32)
    with pytest.raises(ValueError, match="groups_per_step=0"):
        build(groups_per_step=0)(lhs, rhs, sizes)


def test_the_default_is_one_group_per_step_and_the_tunables_climb_to_the_groups() -> None:
    """The class default (a run's first kernel) stays the one-group kernel; TUNABLES holds the
    default first, then its neighbours, none past the number of groups (the same kernel)."""
    facts = _facts()
    default = planner.default_params(facts, _chip())
    assert default == {"block_m": 256, "block_n": 256, "groups_per_step": 1}
    assert planner.extents(facts)["groups_per_step"] == 16
    assert "'groups_per_step': [1, 2]" in first_kernel(TASK)
    at_all = planner.default_params(facts, _chip()) | {"groups_per_step": 16}
    source = grouped.grouped_source(facts, at_all, "grouped_matmul", _chip())
    assert "'groups_per_step': [16, 8]" in source and "groups_per_step: int = 16" in source


def test_the_rendered_kernels_are_lint_clean(tmp_path: Path) -> None:
    from agents.llm.offline.author import candidate_source

    facts = _facts()
    paths = []
    for g in (1, 2, 4):
        path = tmp_path / f"grouped_{g}.py"
        params = planner.default_params(facts, _chip()) | {"groups_per_step": g}
        path.write_text(candidate_source(facts, params, "grouped_matmul", _chip()))
        paths.append(str(path))
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--config",
                           str(ROOT / "pyproject.toml"), *paths], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]


def test_vmem_counts_every_groups_rhs_of_a_step() -> None:
    facts = _facts()
    one, text_one = planner.vmem_bytes(facts, {"block_m": 256, "block_n": 256, "groups_per_step": 1})
    four, text_four = planner.vmem_bytes(facts, {"block_m": 256, "block_n": 256, "groups_per_step": 4})
    assert four - one == 2 * 4 * 3 * 512 * 256  # three more double-buffered f32 rhs blocks (K 512)
    assert "4x512x256 rhs" in text_four and f"{four:,} B" in text_four and "1x512x256" in text_one


def _child(parent_params: dict[str, int], hint: str, written: list[str]) -> dict[str, Any]:
    facts = _facts()
    parent_decision = {"no_gain": False, "kernel_class": "grouped_matmul",
                       "levers": list(grouped.LEVERS), "params": parent_params, "evidence": []}
    plan = planner.plan_text(facts, parent_decision, {"chip": _chip()}, "grouped_matmul")
    ctx = {"chip": _chip(), "seed": 1002, "hint": hint, "failures": [],
           "parent": {"plan": plan, "config": parent_params}, "written_plans": [plan, *written]}
    return planner.choose(facts, ctx)


def test_bigger_blocks_climbs_the_rows_and_groups_per_step_until_vmem_stops_it() -> None:
    """The tile already holds every column at the tuning point, so a bigger-blocks child
    doubles the rows and G together (256 x 1 -> 512 x 2 -> 1024 x 4; G is a count, no
    alignment to 8), its plan's grid has fewer steps, and past that the blocks would take
    more than half the scoped VMEM, so the move has nowhere to go."""
    facts = _facts()
    params = planner.default_params(facts, _chip())
    climbed = []
    for _ in range(2):
        child = _child(params, "[lever=block_shape] bigger blocks", [])
        assert not child["no_gain"] and child["levers"][-1] == "bigger_blocks", child["evidence"][-2:]
        params = child["params"]
        climbed.append((params["block_m"], params["groups_per_step"]))
        assert params["block_n"] == 256
    assert climbed == [(512, 2), (1024, 4)]
    text = planner.plan_text(facts, child, {"chip": _chip()}, "grouped_matmul")
    assert "cdiv(groups, 4)" in text and "About 16 grid steps" in text
    assert planner._apply(facts, "bigger_blocks", params, _chip()) == params


def test_once_every_block_moved_together_was_written_one_knob_moves_alone() -> None:
    """Where the climb stalled: from 512 rows and 8 groups per step, doubling every block
    (1024 rows, 16 groups) and halving them (256, 4) were written, and the planner had no
    other move. Now each knob moves alone, one new kernel per child, among them G doubled
    alone (512 rows, 16 groups), until every such move is written too."""
    facts = _facts()
    best = {"block_m": 512, "block_n": 256, "groups_per_step": 8}
    tried = [dict(best, block_m=1024, groups_per_step=16), dict(best, block_m=256, block_n=128,
                                                               groups_per_step=4)]

    def plan(params: dict[str, int]) -> str:
        decision = {"no_gain": False, "kernel_class": "grouped_matmul",
                    "levers": list(grouped.LEVERS), "params": params, "evidence": []}
        return planner.plan_text(facts, decision, {"chip": _chip()}, "grouped_matmul")

    written, moves = [plan(p) for p in tried], []
    for _ in range(8):
        child = _child(best, "[lever=lane_dense_layout]", written)
        if child["no_gain"]:
            assert "already wrote" in child["stop"]
            break
        moves.append((child["levers"][-1], child["params"]))
        written.append(plan(child["params"]))
    else:
        pytest.fail(f"no stop after {moves}")
    assert ("double_groups_per_step", dict(best, groups_per_step=16)) in moves, moves
    assert ("halve_block_m", dict(best, block_m=256)) in moves, moves
    assert all(lever.startswith(("double_", "halve_")) for lever, _ in moves), moves
    assert len({json.dumps(p, sort_keys=True) for _, p in moves}) == len(moves) == 5, moves
    assert planner._apply(facts, "double_block_n", best, _chip()) == best  # N is 256: no move


def test_a_hinted_lever_the_class_lacks_is_said_and_the_move_is_named() -> None:
    """A policy's hint names a catalogue lever (masking) the grouped kernel has no variant of:
    the plan says so, names the block move it made instead, and its Strategy starts with
    that move, which the progress line shows (before, the hint was passed over in silence)."""
    facts = _facts()
    child = _child(planner.default_params(facts, _chip()), "[lever=masking] Handle the ragged "
                   "last block with an iota mask.", [])
    move = child["levers"][-1]
    assert not child["no_gain"] and child["lever"] == move and move not in grouped.LEVERS
    said = [e for e in child["evidence"] if "masking" in e]
    assert said and "no such variant" in said[0] and f"({move})" in said[0], child["evidence"]
    text = planner.plan_text(facts, child, {"chip": _chip()}, "grouped_matmul")
    assert f"## Strategy\nLever {move}: " in text
    plain = _child(planner.default_params(facts, _chip()), "[lever=block_shape] bigger", [])
    assert not [e for e in plain["evidence"] if "no such variant" in e]


def test_an_overhead_bound_parent_gets_more_groups_per_step() -> None:
    """The profile, not only a hint: a parent bound by per-step overhead gets G doubled."""
    facts = _facts()
    params = planner.default_params(facts, _chip())
    parent = {"plan": "", "config": params, "profile": {
        "bound": "overhead", "grid_steps": 4, "achieved_bandwidth_fraction": 0.3, "speedup": 2.32,
        "measured_on": "simulated"}}
    decision = planner.choose(facts, {"chip": _chip(), "seed": 1002, "hint": "", "failures": [],
                                      "parent": parent, "written_plans": []})
    assert decision["params"]["groups_per_step"] == 2 and decision["levers"][-1] == "bigger_blocks"


@pytest.mark.slow
def test_the_cost_model_prices_more_groups_per_step_soundly_with_fewer_steps(tmp_path: Path) -> None:
    """The estimate (simulated) of G = 1, 2, 4 is sound and counts 256, 128, 64 grid steps.
    Every skip is priced as it runs: each rhs block is fetched once in all (a step outside a
    row block's groups repeats its neighbour's index), and the MXU work is that of the row
    blocks' own groups, not every group on every block."""
    from tools import api

    candidate = tmp_path / "grouped_candidate.py"
    candidate.write_text(first_kernel(TASK, "grouped_matmul"))
    rows, k, n, groups = 4096, 512, 256, 16
    steps = []
    for g in (1, 2, 4):
        result = api.estimate(TASK, candidate, config={"groups_per_step": g})
        assert result.sound, result.reasons
        steps.append(sum(kernel.steps for kernel in result.breakdown))
        (kernel,) = result.breakdown
        assert not [c for c in kernel.caveats if "could not be evaluated" in c], kernel.caveats
        assert kernel.bytes == 4 * (rows * k + groups * k * n + rows * n + groups)
        assert kernel.flops < 2 * rows * k * n * groups / 4  # dense over the groups: 16x the work
    assert steps == [256, 128, 64]  # 16 row blocks x 16, 8, 4 group steps
