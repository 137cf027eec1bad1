"""The lever catalogue (`knowledge/levers.md`) and the strategy hints built from it.

A strategy hint is what a node was expanded with (`ExpansionRequested.strategy`, kept as
`Node.strategy`). Hints written by the shipped policies start with a tag the policies read
back, then the sentence meant for the planner:

    [lever=block_shape+grid_order class=matmul island=1] Resize the blocks: ...

`lever` names one lever or, for a crossover, several joined by `+`; `class` is the kernel
class the hint was chosen for (absent when the policy was not told the task's class); any
other `key=value` belongs to the policy that wrote it. A hint without a tag (written by a
person, or by an older run) has no lever and no class: the policies treat it as unknown.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from searchpolicies.errors import PolicyError

NOTES_PACKAGE = "knowledge"
CATALOGUE_NOTE = "levers.md"

KERNEL_CLASSES = ("elementwise", "rowwise", "matmul", "attention", "row_independent", "generic")
BOUNDS = ("compute", "memory", "overhead")
"""What bounds a kernel in a profile (`tools.performance.roofline`), and so what a lever relieves."""
CLASS_ALIASES = {"matmul_epilogue": "matmul", "rows_generic": "row_independent"}
"""The offline classifier's names for the notes' classes."""


@dataclass(frozen=True)
class Lever:
    """One thing a plan can change: an id, the classes it applies to, the planner's hint."""

    id: str
    title: str
    classes: tuple[str, ...]
    hint: str
    text: str = ""
    relieves: tuple[str, ...] = ()  # the bounds it can lower: compute, memory, overhead ('': unknown)

    def applies_to(self, kernel_class: str) -> bool:
        return not kernel_class or kernel_class in self.classes


def _notes_root() -> Any:
    """The installed `knowledge` package, else the checkout's folder (as tools.knowledge)."""
    try:
        return importlib.resources.files(NOTES_PACKAGE)
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[1] / NOTES_PACKAGE


def parse_catalogue(text: str) -> tuple[Lever, ...]:
    """Every `## id: title` section with its `classes:` and `hint:` lines."""
    body = re.sub(r"\A---[ \t]*\n.*?\n---[ \t]*\n", "", text, count=1, flags=re.S)
    pieces = re.split(r"^##[ \t]+(.+?)[ \t]*$", body, flags=re.M)
    levers: list[Lever] = []
    for heading, section in zip(pieces[1::2], pieces[2::2], strict=True):
        lever_id, _, title = heading.partition(":")
        lever_id = lever_id.strip()
        fields: dict[str, str] = {}
        rest: list[str] = []
        for line in section.strip().splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() in ("classes", "hint", "relieves") and key.strip() not in fields:
                fields[key.strip()] = value.strip()
            else:
                rest.append(line)
        classes = tuple(c.strip() for c in fields.get("classes", "").split(",") if c.strip())
        unknown = sorted(set(classes) - set(KERNEL_CLASSES))
        if not re.fullmatch(r"[a-z][a-z0-9_]*", lever_id) or not classes or "hint" not in fields:
            raise PolicyError(f"{CATALOGUE_NOTE}: section {heading!r} needs an id, "
                              "a 'classes:' line and a 'hint:' line")
        if unknown:
            raise PolicyError(f"{CATALOGUE_NOTE}: lever {lever_id!r} names unknown kernel "
                              f"classes {unknown}; known: {', '.join(KERNEL_CLASSES)}")
        if any(lv.id == lever_id for lv in levers):
            raise PolicyError(f"{CATALOGUE_NOTE}: lever {lever_id!r} appears twice")
        relieves = tuple(b.strip() for b in fields.get("relieves", "").split(",") if b.strip())
        if set(relieves) - set(BOUNDS):
            raise PolicyError(f"{CATALOGUE_NOTE}: lever {lever_id!r} relieves unknown bounds "
                              f"{sorted(set(relieves) - set(BOUNDS))}; known: {', '.join(BOUNDS)}")
        levers.append(Lever(lever_id, title.strip(), classes, fields["hint"],
                            "\n".join(rest).strip(), relieves))
    return tuple(levers)


@functools.cache
def catalogue() -> tuple[Lever, ...]:
    """The levers in the note's order (read once per process)."""
    return parse_catalogue((_notes_root() / CATALOGUE_NOTE).read_text(encoding="utf-8"))


def lever(lever_id: str) -> Lever:
    for lv in catalogue():
        if lv.id == lever_id:
            return lv
    raise PolicyError(f"unknown lever {lever_id!r}; known: {', '.join(lv.id for lv in catalogue())}")


def normalise_class(kernel_class: str) -> str:
    """A notes class name ('' for unknown) from a notes or offline-classifier name."""
    name = CLASS_ALIASES.get(kernel_class, kernel_class)
    if name and name not in KERNEL_CLASSES:
        raise PolicyError(f"unknown kernel class {kernel_class!r}; known: "
                          f"{', '.join([*KERNEL_CLASSES, *CLASS_ALIASES])}")
    return name


def levers_for(kernel_class: str = "") -> tuple[Lever, ...]:
    """The levers that apply to a class; every lever when the class is unknown ('')."""
    name = normalise_class(kernel_class)
    return tuple(lv for lv in catalogue() if lv.applies_to(name))


# --- strategy hints ---------------------------------------------------------------------

_TAG = re.compile(r"\A\[([^\]]*)\]\s*")


@dataclass(frozen=True)
class Strategy:
    """A parsed strategy hint: the levers, the kernel class, other tags, the free text."""

    levers: tuple[str, ...] = ()
    kernel_class: str = ""
    tags: Mapping[str, str] = field(default_factory=dict)
    text: str = ""

    @property
    def lever(self) -> str:
        """The primary lever ('' when unknown): the niche a node belongs to."""
        return self.levers[0] if self.levers else ""


def parse_strategy(strategy: str) -> Strategy:
    """Read a hint back; an untagged or malformed one has no lever and no class."""
    match = _TAG.match(strategy or "")
    if not match:
        return Strategy(text=strategy or "")
    tags: dict[str, str] = {}
    for item in match.group(1).split():
        key, sep, value = item.partition("=")
        if sep and key:
            tags[key] = value
    levers = tuple(v for v in tags.pop("lever", "").split("+") if v)
    return Strategy(levers, tags.pop("class", ""), tags, strategy[match.end():])


def format_strategy(levers: Iterable[str], *, kernel_class: str = "", text: str = "",
                    **tags: object) -> str:
    """`[lever=a+b class=c key=value] text`, with the levers' own hints when no text is given."""
    ids = list(levers)
    parts = [f"lever={'+'.join(ids)}"] if ids else []
    if kernel_class:
        parts.append(f"class={kernel_class}")
    parts += [f"{k}={v}" for k, v in tags.items()]
    body = text or " ".join(lever(i).hint for i in ids)
    return f"[{' '.join(parts)}] {body}".rstrip()
