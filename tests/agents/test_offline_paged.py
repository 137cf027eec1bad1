"""The paged-attention writer's knobs `pages_per_step` (P) and `seqs_per_step` (S): P pages of
S sequences folded per grid step, so an overhead-bound decode kernel takes 1/(P x S) of the
steps; every P and S (tails of pages and of the batch included) computes what the reference
does, and the planner moves them as it moves other blocks."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from offline_kernels import assert_matches_reference, implemented

from agents.llm.offline import paged, planner
from agents.llm.offline.author import candidate_source
from agents.llm.offline.classify import TaskFacts, classify_task

ROOT = Path(__file__).resolve().parents[2]
PAGED = ROOT / "tasks/paged_attention.py"
RAGGED = ROOT / "tests/evaltasks/paged_attention_ragged.py"  # (pages, page, kv_heads, depth), GQA, starts


@functools.cache
def _chip() -> dict[str, Any]:
    from tools.api import chip_figures

    return chip_figures("sim-tpu-v6e")


@functools.cache
def _facts(path: Path) -> TaskFacts:
    return classify_task(path)


def _source(path: Path, **knobs: int) -> str:
    return candidate_source(_facts(path), knobs, path.stem)


@pytest.mark.slow
@pytest.mark.parametrize("path", [PAGED, RAGGED], ids=["paged", "ragged"])
@pytest.mark.parametrize(("pages_per_step", "seqs_per_step"),  # batches 4, 3, 2 and 4, 3; pages 2, 3, 2
                         [(1, 1), (2, 1), (3, 1), (1, 3), (2, 2)])  # 3: a tail at most shapes
def test_the_kernel_equals_the_reference_at_every_block(path: Path, pages_per_step: int,
                                                        seqs_per_step: int) -> None:
    assert_matches_reference(path, _source(path), 0, pages_per_step=pages_per_step,
                             seqs_per_step=seqs_per_step)


@pytest.mark.parametrize("path", [PAGED, RAGGED], ids=["paged", "ragged"])
@pytest.mark.parametrize(("pages_per_step", "seqs_per_step"), [(1, 1), (3, 2)])
def test_the_page_major_table_computes_the_reference(path: Path, pages_per_step: int,
                                                     seqs_per_step: int) -> None:
    """The table passed whole as (pages, batch), tails of pages and of the batch included."""
    assert_matches_reference(path, _source(path), 0, pages_per_step=pages_per_step,
                             seqs_per_step=seqs_per_step, page_major_table=1)


@pytest.mark.parametrize("path", [PAGED, RAGGED], ids=["paged", "ragged"])
def test_the_class_default_is_one_page_of_one_sequence_and_tunables_list_it_first(path: Path) -> None:
    facts = _facts(path)
    assert planner.default_params(facts, _chip()) == {"pages_per_step": 1, "seqs_per_step": 1}
    batch, pages = facts.args[facts.detail["tables"]].shape
    assert planner.extents(facts) == {"pages_per_step": pages, "seqs_per_step": batch} == {
        "pages_per_step": 2, "seqs_per_step": 4}
    namespace: dict[str, Any] = {}
    exec(compile(_source(path, pages_per_step=2, seqs_per_step=4), str(path), "exec"), namespace)
    assert namespace["TUNABLES"] == {"pages_per_step": [2, 1], "seqs_per_step": [4, 2],  # no more than there are
                                     "page_major_table": [0, 1]}
    exec(compile(_source(path), str(path), "exec"), namespace)
    assert namespace["TUNABLES"] == {"pages_per_step": [1, 2], "seqs_per_step": [1, 2],
                                     "page_major_table": [0, 1]}


def test_many_small_pages_fold_at_once_and_the_tuner_may_take_a_step_of_them(
        tmp_path: Path) -> None:
    """Pages of 8 tokens, 16 per sequence: the TUNABLES offer the pages that hold
    TOKENS_PER_STEP keys (all 16 here) right after the default, and folding them at once,
    or 5 at a time with a tail, computes what the reference does (random lengths skip and
    mask pages)."""
    path = tmp_path / "paged_small_pages.py"
    path.write_text(PAGED.read_text().replace(
        "SHAPES = [(4, 2, 128, 32, 2), (3, 2, 128, 16, 3), (2, 4, 64, 32, 2)]",
        "SHAPES = [(3, 2, 64, 8, 16), (2, 2, 64, 8, 9)]"))
    namespace: dict[str, Any] = {}
    source = _source(path)
    exec(compile(source, str(path), "exec"), namespace)
    assert paged.TOKENS_PER_STEP // 8 >= 16
    assert namespace["TUNABLES"]["pages_per_step"] == [1, 16, 2]
    for pages_per_step, seqs_per_step in ((16, 1), (5, 2)):
        assert_matches_reference(path, source, 0, pages_per_step=pages_per_step,
                                 seqs_per_step=seqs_per_step)


def test_rendered_sources_are_lint_clean(tmp_path: Path) -> None:
    paths = []
    for path in (PAGED, RAGGED):
        for pages_per_step, seqs_per_step in ((1, 1), (2, 1), (3, 3)):
            out = tmp_path / f"{path.stem}_{pages_per_step}_{seqs_per_step}.py"
            out.write_text(_source(path, pages_per_step=pages_per_step, seqs_per_step=seqs_per_step))
            paths.append(str(out))
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--config",
                           str(ROOT / "pyproject.toml"), *paths], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]


@pytest.mark.parametrize("knob", ["pages_per_step", "seqs_per_step"])
def test_a_count_below_one_is_refused(knob: str) -> None:
    from tools.api import load_task

    namespace: dict[str, Any] = {"__name__": "candidate"}
    exec(compile(_source(PAGED), str(PAGED), "exec"), namespace)
    with pytest.raises(ValueError, match=f"{knob}=0"):
        namespace["build"](**{knob: 0})(*load_task(PAGED).make_inputs(0, 0))


def test_vmem_counts_the_pages_and_sequences_of_a_step() -> None:
    facts = _facts(PAGED)  # 2 heads, depth 128, pages of 32 tokens
    one, text = paged.vmem_bytes(facts, {"pages_per_step": 1, "seqs_per_step": 1})
    two, _ = paged.vmem_bytes(facts, {"pages_per_step": 2, "seqs_per_step": 1})
    assert two - one == 2 * 4 * 2 * 2 * 32 * 128  # double-buffered f32 k and v: one more page each
    assert text.endswith(f"= {one:,} B") and "2 x 1 x 2x32x128 k,v pages" in text
    assert paged.vmem_bytes(facts, {"pages_per_step": 2, "seqs_per_step": 3})[0] == 3 * two


def test_bigger_blocks_children_fold_more_pages_and_sequences_per_step_and_then_stop() -> None:
    """A search stopped after one kernel, the class had no knob: now the root writes one page
    of one sequence per step, children asked for bigger blocks (fewer steps) fold more of
    both, then one knob at a time (all sequences of a step, one page each: a kernel that
    doubling both never writes), and the run stops once every block move gives a kernel it
    already wrote."""
    facts = _facts(PAGED)
    root = planner.choose(facts, {"chip": _chip(), "seed": 1, "hint": "", "parent": None, "failures": []})
    assert root["params"] == {"pages_per_step": 1, "seqs_per_step": 1} and not root["no_gain"]
    written = [planner.plan_text(facts, root, {"chip": _chip()}, "paged_attention")]
    profile = {"bound": "overhead", "grid_steps": 8, "speedup": 3.16, "measured_on": "simulated"}
    parent, moves = {"plan": written[0], "config": root["params"], "profile": profile}, []
    for seed in range(2, 8):
        child = planner.choose(facts, {"chip": _chip(), "seed": seed, "hint": "[lever=block_shape]",
                                       "parent": parent, "failures": [], "written_plans": written})
        if child["no_gain"]:
            assert "already wrote" in child["stop"], child
            break
        moves.append((child["levers"][-1], child["params"]["pages_per_step"], child["params"]["seqs_per_step"]))
        written.append(planner.plan_text(facts, child, {"chip": _chip()}, "paged_attention"))
        parent = {"plan": written[-1], "config": child["params"], "profile": profile}
    else:
        pytest.fail(f"no stop after {moves}")
    assert moves[:2] == [("bigger_blocks", 2, 2), ("bigger_blocks", 2, 4)], moves
    assert "grid (cdiv(batch, 4), cdiv(pages_per_sequence, 2))" in written[2]
    assert ("double_seqs_per_step", 1, 4) in moves, moves
    assert len(set(moves)) == len(moves)


@pytest.mark.slow
def test_the_cost_model_prices_more_pages_and_sequences_per_step_soundly_in_fewer_steps(tmp_path: Path) -> None:
    from tools.api import estimate

    candidate = tmp_path / "paged_candidate.py"
    candidate.write_text(_source(PAGED))
    configs = [{"pages_per_step": 1, "seqs_per_step": 1}, {"pages_per_step": 2, "seqs_per_step": 1},
               {"pages_per_step": 2, "seqs_per_step": 4}]
    got = [estimate(PAGED, candidate, config=c) for c in configs]
    assert all(e.sound for e in got), [e.reasons for e in got]
    kernels = [e.breakdown[0] for e in got]
    assert [k.steps for k in kernels] == [8, 4, 1]  # batch 4 x 2 pages, 4 x 1, 1 x 1
    # One page per step fetches only the pages the sequences own (lengths 53, 22, 14, 63 of
    # 32-token pages: 6 of 8), each K and V page (2 kv heads x 32 x 128 f32) once, plus the
    # queries, the output and the SMEM table and lengths; two per step fetch a one-page
    # sequence's page into both slots, the same 8 in either grid.
    page, q_and_out, smem = 2 * 2 * 32 * 128 * 4, 2 * 4 * 2 * 128 * 4, (8 + 4) * 4
    assert kernels[0].bytes == 6 * page + q_and_out + smem
    assert kernels[1].bytes == kernels[2].bytes == 8 * page + q_and_out + smem
    assert got[0].latency_s > got[1].latency_s > got[2].latency_s


def test_a_block_move_keeps_the_table_layout_its_parent_was_tuned_to() -> None:
    """A child of a parent the tuner gave the page-major table keeps it as its default (the
    configuration the compile check prices against the parent), in its TUNABLES and build():
    before, every child went back to the flat table and was priced below its parent."""
    import inspect

    facts = _facts(PAGED)
    root = planner.choose(facts, {"chip": _chip(), "seed": 1, "hint": "", "parent": None, "failures": []})
    plan = planner.plan_text(facts, root, {"chip": _chip()}, "paged_attention")
    tuned = {**root["params"], "seqs_per_step": 2, "page_major_table": 1}
    child = planner.choose(facts, {"chip": _chip(), "seed": 2, "hint": "[lever=block_shape]",
                                   "parent": {"plan": plan, "config": tuned}, "failures": [],
                                   "written_plans": [plan]})
    assert child["params"] == {"pages_per_step": 2, "seqs_per_step": 4, "page_major_table": 1}
    namespace: dict[str, Any] = {}
    exec(compile(implemented(PAGED, child), str(PAGED), "exec"), namespace)
    assert namespace["TUNABLES"]["page_major_table"] == [1, 0]
    assert inspect.signature(namespace["build"]).parameters["page_major_table"].default == 1
