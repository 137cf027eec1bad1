"""Candidate files from a class and parameters, plus the fixer's ladder of safer variants."""

from __future__ import annotations

import json
import re
from typing import Any

from agents.llm.offline import attention, conv, generic, grouped, matmul, paged, rows, scan, variety
from agents.llm.offline.classify import TaskFacts
from agents.llm.offline.common import (
    LANE_KNOBS,
    LANES,
    SUBLANE_KNOBS,
    SUBLANES,
    drop_unused_imports,
    knob_floor,
)
from agents.llm.offline.ragged import ragged_source

FALLBACK_VMEM_LIMIT = 48 * 1024 * 1024  # below the VMEM of every chip the targets model
_JSON_BLOCK = re.compile(r"^```json[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)


def plan_spec(plan: str) -> dict[str, Any]:
    """The json decisions of a plan's Strategy section; {} when it has none (or bad json)."""
    for body in _JSON_BLOCK.findall(plan or ""):
        try:
            spec = json.loads(body)
        except ValueError:
            continue
        if isinstance(spec, dict):
            return spec
    return {}


def candidate_source(facts: TaskFacts, params: dict[str, Any], task_name: str,
                     chip: dict[str, Any] | None = None, kernel_class: str | None = None,
                     spec: dict[str, Any] | None = None) -> str:
    """The candidate file for `kernel_class` (the task's own by default): from `spec`, the
    plan's schedule, where the class keeps one, else from block `params`."""
    return drop_unused_imports(_source(facts, params, task_name, chip, kernel_class, spec))


def _source(facts: TaskFacts, params: dict[str, Any], task_name: str, chip: dict[str, Any] | None,
            kernel_class: str | None, spec: dict[str, Any] | None) -> str:
    c = kernel_class or facts.kernel_class
    if c == facts.kernel_class and variety.has_spec(c):
        schedule = variety.spec_of(facts, spec, params, chip)
        return variety.WRITERS[c].render(facts, schedule, task_name, params.get("tunables"))
    if c == "single_block" or facts.kernel_class == "single_block":
        return rows.single_source(facts, task_name, params.get("vmem_limit_bytes"))
    if c == "matmul_epilogue":
        return matmul.matmul_source(facts, params, task_name, chip)
    if c == "attention":
        return attention.attention_source(facts, params, task_name, chip)
    if c == "paged_attention":
        return paged.paged_source(facts, params, task_name, chip)
    if c == "ragged_paged_attention":
        return ragged_source(facts, params, task_name, chip)
    if c == "linear_attention":
        return scan.scan_source(facts, params, task_name, chip)
    if c == "grouped_matmul":
        return grouped.grouped_source(facts, params, task_name, chip)
    if c == "convolution":
        return conv.conv_source(facts, params, task_name, chip)
    return rows.rows_source(facts, params, task_name)


def safer_ladder(facts: TaskFacts, params: dict[str, int],
                 chip: dict[str, Any] | None = None) -> list[tuple[str, dict[str, Any], str]]:
    """(kernel_class, params, what changed) from the least to the most conservative."""
    c = facts.kernel_class
    steps: list[tuple[str, dict[str, Any], str]] = []
    if c == "generic":
        steps += [(c, p, what) for p, what in generic.safer_steps(facts, chip)]
    if params:
        # a count knob (images, groups, pages per step) shrinks to one unit, never to a tile
        half = {k: max(knob_floor(k), v // 2) for k, v in params.items()}
        steps.append((c, {**half, "tunables": {k: [v] for k, v in half.items()}},
                      "halved every block and kept one configuration"))
        small = {k: (LANES if k in LANE_KNOBS else 2 * SUBLANES if k == "block_rows"
                     else LANES if k in SUBLANE_KNOBS else 1) for k in params}
        steps.append((c, {**small, "tunables": {k: [v] for k, v in small.items()}},
                      "minimal aligned blocks (8 sublanes / 128 lanes, one unit of a count)"))
        tiny = {k: LANES if k in LANE_KNOBS else 2 * SUBLANES if k in SUBLANE_KNOBS else 1
                for k in params}
        if tiny != small:  # row-side blocks down to one 16-row tile (writers align to the dtype)
            steps.append((c, {**tiny, "tunables": {k: [v] for k, v in tiny.items()}},
                          "row-side blocks of one 16-row tile"))
    if facts.body_source:
        steps.append(("single_block", {}, "fell back to the single-block kernel (whole arrays, one step)"))
        vmem = (chip or {}).get("vmem_bytes")
        raised = int(vmem) * 3 // 4 if isinstance(vmem, int | float) and vmem > 0 else FALLBACK_VMEM_LIMIT
        steps.append(("single_block", {"vmem_limit_bytes": raised},
                      f"single block with vmem_limit_bytes raised to {raised:,}"))
    return steps
