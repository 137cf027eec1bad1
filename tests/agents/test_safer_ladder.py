"""The fixer's ladder of safer variants only ever shrinks a kernel's blocks."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from agents.llm.offline import planner
from agents.llm.offline.author import safer_ladder
from agents.llm.offline.classify import classify_task
from agents.llm.offline.common import knob_floor

ROOT = Path(__file__).resolve().parents[2]
TASKS = [ROOT / "tasks/grouped_matmul.py", ROOT / "tasks/paged_attention.py",
         ROOT / "tasks/linear_attention.py", ROOT / "tasks/matmul.py", ROOT / "tasks/rmsnorm.py",
         ROOT / "tests/evaltasks/conv2d_nchw_grouped.py"]


@functools.cache
def _chip() -> dict[str, Any]:
    from tools.api import chip_figures

    return chip_figures("sim-tpu-v6e")


@pytest.mark.parametrize("path", TASKS, ids=lambda p: p.stem)
def test_every_safer_step_keeps_each_knob_at_most_where_it_was(path: Path) -> None:
    """The ladder halved every knob to at least 8 and then set it to 128: a count of groups,
    pages or images per step (1 at a class default) became 8 or 128, the opposite of safer."""
    facts = classify_task(path)
    params = {k: v for k, v in planner.default_params(facts, _chip()).items() if isinstance(v, int)}
    for kernel_class, step, what in safer_ladder(facts, params, _chip()):
        if kernel_class != facts.kernel_class:
            continue
        for knob, value in params.items():
            assert step[knob] <= max(value, knob_floor(knob)), (knob, value, step[knob], what)
            assert step[knob] >= knob_floor(knob), (knob, step[knob], what)
