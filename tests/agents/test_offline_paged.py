"""The paged-attention writer's knob `pages_per_step`: P pages of a sequence folded per grid
step, so an overhead-bound decode kernel takes 1/P of the steps; every P (a tail included)
computes what the reference does, and the planner moves it as it moves other blocks."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from offline_kernels import assert_matches_reference

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


def _source(path: Path, pages_per_step: int | None = None) -> str:
    params = {} if pages_per_step is None else {"pages_per_step": pages_per_step}
    return candidate_source(_facts(path), params, path.stem)


@pytest.mark.slow
@pytest.mark.parametrize("path", [PAGED, RAGGED], ids=["paged", "ragged"])
@pytest.mark.parametrize("pages_per_step", [1, 2, 3])  # 3: a tail step at every shape
def test_the_kernel_equals_the_reference_at_every_pages_per_step(path: Path, pages_per_step: int) -> None:
    assert_matches_reference(path, _source(path), 0, pages_per_step=pages_per_step)


@pytest.mark.parametrize("path", [PAGED, RAGGED], ids=["paged", "ragged"])
def test_the_class_default_is_one_page_per_step_and_tunables_list_it_first(path: Path) -> None:
    facts = _facts(path)
    assert planner.default_params(facts, _chip()) == {"pages_per_step": 1}
    assert planner.extents(facts) == {"pages_per_step": facts.args[facts.detail["tables"]].shape[1]}
    namespace: dict[str, Any] = {}
    exec(compile(_source(path, 2), str(path), "exec"), namespace)
    assert namespace["TUNABLES"] == {"pages_per_step": [2, 1]}  # 4 would pass a 2-page table
    exec(compile(_source(path), str(path), "exec"), namespace)
    assert namespace["TUNABLES"] == {"pages_per_step": [1, 2]}


def test_rendered_sources_are_lint_clean(tmp_path: Path) -> None:
    paths = []
    for path in (PAGED, RAGGED):
        for pages_per_step in (1, 2, 3):
            out = tmp_path / f"{path.stem}_{pages_per_step}.py"
            out.write_text(_source(path, pages_per_step))
            paths.append(str(out))
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--config",
                           str(ROOT / "pyproject.toml"), *paths], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]


def test_a_page_count_below_one_is_refused() -> None:
    from tools.api import load_task

    namespace: dict[str, Any] = {"__name__": "candidate"}
    exec(compile(_source(PAGED), str(PAGED), "exec"), namespace)
    with pytest.raises(ValueError, match="pages_per_step=0"):
        namespace["build"](pages_per_step=0)(*load_task(PAGED).make_inputs(0, 0))


def test_vmem_counts_the_pages_of_a_step() -> None:
    facts = _facts(PAGED)  # 2 heads, depth 128, pages of 32 tokens
    one, text = paged.vmem_bytes(facts, {"pages_per_step": 1})
    two, _ = paged.vmem_bytes(facts, {"pages_per_step": 2})
    assert two - one == 2 * 4 * 2 * 2 * 32 * 128  # double-buffered f32 k and v: one more page each
    assert text.endswith(f"= {one:,} B") and "2 x 1 x 2x32x128 k,v pages" in text


def test_a_bigger_blocks_child_folds_more_pages_per_step_and_then_stops() -> None:
    """A search stopped after one kernel, the class had no knob: now the root writes one page
    per step, a child asked for bigger blocks (or fewer steps) two, and the next stops."""
    facts = _facts(PAGED)
    root = planner.choose(facts, {"chip": _chip(), "seed": 1, "hint": "", "parent": None, "failures": []})
    assert root["params"] == {"pages_per_step": 1} and not root["no_gain"]
    written = [planner.plan_text(facts, root, {"chip": _chip()}, "paged_attention")]
    profile = {"bound": "overhead", "grid_steps": 8, "speedup": 3.16, "measured_on": "simulated"}
    parent = {"plan": written[0], "config": root["params"], "profile": profile}
    child = planner.choose(facts, {"chip": _chip(), "seed": 2, "hint": "[lever=block_shape] fewer steps",
                                   "parent": parent, "failures": [], "written_plans": written})
    assert child["params"] == {"pages_per_step": 2}, child["evidence"]
    assert "bigger_blocks" in child["levers"]
    plan = planner.plan_text(facts, child, {"chip": _chip()}, "paged_attention")
    assert "grid (batch, cdiv(pages_per_sequence, 2))" in plan
    written.append(plan)
    parent = {"plan": plan, "config": child["params"], "profile": {**profile, "grid_steps": 4}}
    last = planner.choose(facts, {"chip": _chip(), "seed": 3, "hint": "[lever=block_shape]",
                                  "parent": parent, "failures": [], "written_plans": written})
    assert last["no_gain"] and "already wrote" in last["stop"], last


@pytest.mark.slow
def test_the_cost_model_prices_more_pages_per_step_soundly_in_fewer_steps(tmp_path: Path) -> None:
    from tools.api import estimate

    candidate = tmp_path / "paged_candidate.py"
    candidate.write_text(_source(PAGED))
    one, two = (estimate(PAGED, candidate, config={"pages_per_step": p}) for p in (1, 2))
    assert one.sound and two.sound, (one.reasons, two.reasons)
    (k1,), (k2,) = one.breakdown, two.breakdown
    assert (k1.steps, k2.steps) == (8, 4)  # batch 4 x 2 pages, then x 1 step of 2 pages
    assert k2.bytes == k1.bytes and two.latency_s < one.latency_s
