"""Strict reading of model answers: one whole candidate file, or a plan with its sections.

A malformed answer raises `MalformedAnswer` with a message the agent sends back to the
model once ("your answer could not be used because ...").
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

from agents.llm.base import PLAN_SECTIONS
from kernelgraph import pyast
from kernelgraph.errors import KernelgraphError

_FENCE = re.compile(r"^```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)


class MalformedAnswer(KernelgraphError, ValueError):
    """The answer cannot be used as it stands; the message says why, for the re-ask."""


def python_block(text: str, *, defines: str) -> str:
    """The single ```python block of an answer; it must parse and define `defines` at top level."""
    blocks = [body for lang, body in _FENCE.findall(text) if lang.lower() in ("python", "py")]
    if not blocks:
        raise MalformedAnswer("the answer has no ```python code block")
    if len(blocks) > 1:
        raise MalformedAnswer(f"the answer has {len(blocks)} ```python blocks; send exactly one "
                              "block holding the whole file")
    code = blocks[0]
    try:
        tree = pyast.parse(code)
    except SyntaxError as exc:
        raise MalformedAnswer(f"the code block does not parse: line {exc.lineno}: {exc.msg}") from None
    if not any(isinstance(node, ast.FunctionDef) and node.name == defines for node in tree.body):
        raise MalformedAnswer(f"the file defines no top-level `{defines}` function")
    return code if code.endswith("\n") else code + "\n"


def extract_code(text: str) -> str:
    """A whole candidate file: one ```python block defining `build`."""
    return python_block(text, defines="build")


def check_plan(text: str) -> str:
    """The plan itself, once every required `## ` section is present, in order."""
    headings = [h.strip() for h in re.findall(r"^##[ \t]+(.+?)[ \t]*$", text, re.M)]
    positions = []
    for section in PLAN_SECTIONS:
        found = [i for i, h in enumerate(headings) if h.lower().startswith(section.lower())]
        if not found:
            raise MalformedAnswer(f"the plan has no '## {section}' section; required, in order: "
                                  + ", ".join(PLAN_SECTIONS))
        positions.append(found[0])
    if positions != sorted(positions):
        raise MalformedAnswer("the plan's sections are out of order; required order: "
                              + ", ".join(PLAN_SECTIONS))
    return text.strip() + "\n"


NEXT_LEVERS_SECTION = "Next levers"
"""An optional last plan section: lever ids for the kernel the plan writes, best first."""


def next_levers(plan: str, known: Iterable[str]) -> list[str]:
    """The ids of `known` that the plan's `## Next levers` section names, in its order, with
    words joined by spaces or hyphens read as one id (an unknown id, or a plan without the
    section, gives nothing)."""
    match = re.search(rf"^##[ \t]+{NEXT_LEVERS_SECTION}[^\n]*\n(.*?)(?=^##[ \t]|\Z)", plan,
                      re.M | re.S | re.I)
    if not match:
        return []
    words = re.findall(r"[a-z0-9]+", match.group(1).lower())  # block_skipping, block skipping
    ids = sorted(((tuple(i.split("_")), i) for i in known), key=lambda p: -len(p[0]))
    found: list[str] = []
    at = 0
    while at < len(words):  # the longest id at each word: mxu_alignment is not alignment
        hit = next(((parts, i) for parts, i in ids if tuple(words[at:at + len(parts)]) == parts), None)
        if hit is not None and hit[1] not in found:
            found.append(hit[1])
        at += len(hit[0]) if hit else 1
    return found


def fix_summary(text: str) -> dict[str, str]:
    """The "Error: / Cause: / Fix:" lines a fixer writes above its code (empty if absent)."""
    summary: dict[str, str] = {}
    for key in ("error", "cause", "fix"):
        match = re.search(rf"^\**{key}\**\s*:\s*(.+)$", text, re.I | re.M)
        if match:
            summary[key] = match.group(1).strip()[:500]
    return summary
