"""The fixer's answer to a scoped-VMEM overflow the TPU compiler counted: the kernel's limit
raised to that count where it fits the chip (blocks kept), the ladder otherwise."""

from __future__ import annotations

import ast
import asyncio
import math
import re
from pathlib import Path
from typing import Any

import pytest

from agents.llm.base import LlmRequest
from agents.llm.offline import OfflineProvider
from agents.llm.offline.vmemfix import FIX_PREFIX, asked_bytes, with_compiler_limit
from agents.llm.parsing import check_plan, extract_code, fix_summary
from tools.api import chip_figures

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "tasks" / "rmsnorm.py"  # its kernel keeps the scoped default
MIB = 1 << 20
SCOPED = ("TPU compiler (v6e): Scoped allocation with size 61.08M and limit 32.00M "
          "(JaxRuntimeError: RESOURCE_EXHAUSTED: E1001: CompileTimeScopedVmemOom)")
WHOLE = "TPU compiler (v6e): Ran out of memory in memory space vmem. Used 139.82M of 127.94M vmem"


def _ctx(**extra: Any) -> dict[str, Any]:
    return {"task_path": str(TASK), "task_name": TASK.stem, "target": "sim-tpu-v6e",
            "chip": chip_figures("sim-tpu-v6e"), "iteration": 0, "seed": 0, "parent": None,
            "failures": [], "hint": "", "knowledge": [], "baseline_s": None, "feedback": "",
            **extra}


def _ask(purpose: str, context: dict[str, Any]) -> str:
    request = LlmRequest(agent="test", purpose=purpose, prompt="", context=context, seed=0)
    return asyncio.run(OfflineProvider(seed=0).complete(request)).text


@pytest.fixture(scope="module")
def kernel() -> str:
    plan = check_plan(_ask("plan", _ctx()))
    code = extract_code(_ask("implement", _ctx(plan=plan)))
    assert re.search(r"^VMEM_LIMIT_BYTES = None$", code, re.M), code[:400]
    return code


def _limit(code: str) -> str:
    found = re.search(r"^VMEM_LIMIT_BYTES = (.*)$", code, re.M)
    assert found, code[:400]
    return found.group(1)


def test_the_compilers_count_is_read_only_where_it_passes_the_limit() -> None:
    assert asked_bytes(SCOPED) == math.ceil(61.08 * MIB)
    assert asked_bytes("Scoped allocation with size 12.00M and limit 32.00M") is None
    assert asked_bytes(WHOLE) is None  # the whole VMEM: no limit can make room
    assert asked_bytes("Mosaic lowering failed: unsupported shape") is None


def test_the_limit_follows_the_count_and_the_file_says_why(kernel: str) -> None:
    fixed, change = with_compiler_limit(kernel, SCOPED, chip_figures("sim-tpu-v6e")) or ("", "")
    assert change.startswith(FIX_PREFIX)
    limit = int(_limit(fixed))
    assert 61.08 * MIB < limit <= 61.08 * MIB * 1.125 + MIB and limit % MIB == 0
    # the rest of the kernel is the same: its blocks are kept
    assert [line for line in fixed.splitlines() if not line.startswith("VMEM_LIMIT_BYTES")] \
        [:5] == kernel.splitlines()[:5]
    assert ast.get_docstring(ast.parse(fixed)).endswith(f"VMEM limit: {change}.")
    body = lambda text: text[text.index('"""', 3):]  # noqa: E731  (after the docstring)
    assert body(fixed).replace(f"VMEM_LIMIT_BYTES = {limit}", "") == \
        body(kernel).replace(f"VMEM_LIMIT_BYTES = {_limit(kernel)}", "")


def test_a_count_past_the_chips_room_or_already_granted_is_not_this_rungs(kernel: str) -> None:
    chip = chip_figures("sim-tpu-v6e")
    assert with_compiler_limit(kernel, SCOPED.replace("61.08M", "120.00M"), chip) is None
    assert with_compiler_limit(kernel, WHOLE, chip) is None
    raised, _ = with_compiler_limit(kernel, SCOPED, chip) or ("", "")
    assert with_compiler_limit(raised, SCOPED, chip) is None  # the limit already holds it
    assert with_compiler_limit("def build():\n    pass\n", SCOPED, chip) is None  # no limit to raise


def test_the_fixer_raises_the_limit_first_and_the_ladder_starts_after_it(kernel: str) -> None:
    first = _ask("fix", _ctx(code=kernel, diagnostics=[{"message": SCOPED}], history=[], round=1))
    summary = fix_summary(first)
    assert summary["fix"].startswith(FIX_PREFIX), summary
    raised = extract_code(first)
    assert int(_limit(raised)) > 61 * MIB
    # the raised kernel overflows the whole VMEM: the ladder's first rung, as in round one
    history = [{"round": 1, **summary}]
    second = fix_summary(_ask("fix", _ctx(code=raised, diagnostics=[{"message": WHOLE}],
                                          history=history, round=2)))
    plain = fix_summary(_ask("fix", _ctx(code=kernel, diagnostics=[{"message": WHOLE}],
                                         history=[], round=1)))
    assert second["fix"] == plain["fix"] and not plain["fix"].startswith(FIX_PREFIX)
