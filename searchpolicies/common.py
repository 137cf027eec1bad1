"""What the shipped policies share: reading nodes' levers back and choosing new ones."""

from __future__ import annotations

import random
from collections.abc import Iterable

from projections.searchgraph import Node, SearchGraph
from searchpolicies.base import Param
from searchpolicies.levers import (
    CLASS_ALIASES,
    KERNEL_CLASSES,
    format_strategy,
    levers_for,
    normalise_class,
    parse_strategy,
)

KERNEL_CLASS = Param(
    "kernel_class", str, "",
    "the task's kernel class, to draw only levers that apply to it ('' = any lever; search and "
    "bench fill it from the task's class as the offline author reads it)",
    choices=("", *KERNEL_CLASSES, *CLASS_ALIASES))


def speedup(node: Node) -> float:
    return node.speedup if node.speedup is not None else 0.0


def ranked(graph: SearchGraph, *, include_root: bool = True) -> list[Node]:
    """Valid nodes, fastest first (the earliest wins a tie), then the root.

    The root stands for XLA's program at 1.0x, but it is no kernel to improve: a climb goes on
    from the best kernel it has, even one slower than XLA, and writes afresh from the request
    only where no kernel can be expanded."""
    order = {n.node_id: i for i, n in enumerate(graph.nodes)}
    valid = sorted((n for n in graph.nodes if n.status == "valid"),
                   key=lambda n: (-speedup(n), order[n.node_id]))
    return valid + ([n for n in graph.nodes if n.status == "root"] if include_root else [])


def lever_of(node: Node) -> str:
    """A node's primary lever, from the hint it was expanded with ('' when unknown)."""
    return parse_strategy(node.strategy).lever


def levers_of(node: Node) -> tuple[str, ...]:
    return parse_strategy(node.strategy).levers


def path_levers(graph: SearchGraph, node_id: str) -> set[str]:
    """Every lever applied on the way from the root to this node."""
    return {lv for n in graph.path_to(node_id) for lv in levers_of(n)}


def child_levers(graph: SearchGraph, node_id: str) -> set[str]:
    return {lv for c in graph.children(node_id) for lv in levers_of(c)}


def pick_levers(rng: random.Random, kernel_class: str, k: int,
                avoid: Iterable[str] = (), prefer: Iterable[str] = ()) -> list[str]:
    """k distinct levers for the class: those of `prefer` in its order (a node's
    `next_levers`), then the rest in a seeded order, those in `avoid` last."""
    avoided = set(avoid)
    ids = [lv.id for lv in levers_for(kernel_class)]
    rng.shuffle(ids)  # drawn whatever `prefer` holds, so the seed's stream does not shift
    first = [i for i in dict.fromkeys(prefer) if i in ids and i not in avoided]
    ordered = first + [i for i in ids if i not in avoided and i not in first] + [
        i for i in ids if i in avoided]
    return ordered[:k]


def hint(levers: Iterable[str], kernel_class: str, text: str = "", **tags: object) -> str:
    return format_strategy(levers, kernel_class=normalise_class(kernel_class), text=text, **tags)
