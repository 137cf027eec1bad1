"""How many times a while loop of an XLA:TPU program runs, read from the program alone.

A `lax.scan` or `fori_loop` becomes a `while` whose body the chip runs once per trip, so
the loop's price is its body's times its trip count, and a loop whose count the program
does not fix has no price (the baseline is then not priced from this program, never
priced as one trip). The count is taken, in this order, from:

1. the compiler's own `known_trip_count` in the loop's backend config, where it gives one;
2. the counter pattern every scan and fori_loop lowers to: the condition's result compares
   one element of the loop state with a constant (`i < 256`), the body's result sets that
   element to itself plus or minus a constant, and the loop starts it at a constant (all
   three read through copies, bitcasts and converts). The count is then the number of
   steps from the start until the comparison fails, with the comparison made before each
   trip, as `while` does.

Anything else (a count read from data, a counter the body sets otherwise, a comparison
that never fails) gives None, with no guess.
"""

from __future__ import annotations

import math
import re

from tools.performance.hlo_compute import Instr, Module

# Ops that pass a scalar on unchanged, for following a counter through the program.
_PASS = frozenset({"copy", "bitcast", "convert", "reshape"})
# The comparison with its operands swapped.
_SWAPPED = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE", "EQ": "EQ", "NE": "NE"}


def called(loop: Instr, role: str) -> str | None:
    """The name of the loop's ``condition`` or ``body`` computation."""
    m = re.search(rf"{role}=%?([\w.\-]+)", loop.rest)
    return m.group(1) if m else None


def is_scalar_op(ins: Instr, types: dict[str, str]) -> bool:
    """An op whose result and operands are single values (the loop counter's add and
    compare, a copy of it): the scalar unit's work, not a launched vector op."""
    if ins.opcode in ("fusion", "while", "custom-call", "copy-start", "call", "conditional"):
        return False
    return _rank0(ins.type_text) and all(_rank0(types.get(o, "?")) for o in ins.operands)


def trip_count(module: Module, loop: Instr, defs: dict[str, Instr]) -> int | None:
    """How many times ``loop`` runs its body (module doc); ``defs``: the instructions of
    the computation holding the loop, by name. None where the program does not fix it."""
    known = re.search(r'"known_trip_count":\{"n":"(\d+)"', loop.rest)
    if known:
        return int(known.group(1))
    cond_name, body_name = called(loop, "condition"), called(loop, "body")
    condition = module.computations.get(cond_name or "", [])
    body = module.computations.get(body_name or "", [])
    test = next((i for i in condition if i.root), None)
    result = next((i for i in body if i.root), None)
    if test is None or result is None or test.opcode != "compare" or len(test.operands) != 2:
        return None
    if result.opcode != "tuple" or len(loop.operands) != 1:
        return None
    direction = re.search(r"direction=(\w+)", test.rest)
    if direction is None or direction.group(1) not in _SWAPPED:
        return None
    in_condition = {i.name: i for i in condition}
    left, right = (_through(in_condition, o) for o in test.operands)
    slot, limit, op = _state_slot(left, in_condition), _constant(right), direction.group(1)
    if slot is None or limit is None:
        slot, limit, op = _state_slot(right, in_condition), _constant(left), _SWAPPED[op]
    if slot is None or limit is None or slot >= len(result.operands):
        return None
    step = _step(result.operands[slot], slot, {i.name: i for i in body})
    start_state = defs.get(loop.operands[0])
    if step is None or start_state is None or start_state.opcode != "tuple" \
            or slot >= len(start_state.operands):
        return None
    start = _constant(_through(defs, start_state.operands[slot]))
    if start is None:
        return None
    return _trips(start, step, limit, op)


def _rank0(type_text: str) -> bool:
    return re.fullmatch(r"\w+\[\](?:\{[^}]*\})?", type_text.strip()) is not None


def _through(defs: dict[str, Instr], name: str) -> Instr | None:
    """The instruction that makes ``name``'s value, past ops that only pass it on."""
    ins = defs.get(name)
    for _ in range(64):
        if ins is None or ins.opcode not in _PASS or len(ins.operands) != 1:
            return ins
        ins = defs.get(ins.operands[0])
    return None


def _constant(ins: Instr | None) -> int | None:
    """A scalar integer constant's value."""
    if ins is None or ins.opcode != "constant" or not _rank0(ins.type_text):
        return None
    try:
        return int(ins.literal)
    except ValueError:  # a float or a predicate: no counter
        return None


def _state_slot(ins: Instr | None, defs: dict[str, Instr]) -> int | None:
    """Which element of the loop state ``ins`` reads (a get-tuple-element of the loop's
    parameter), or None."""
    if ins is None or ins.opcode != "get-tuple-element" or len(ins.operands) != 1:
        return None
    state = defs.get(ins.operands[0])
    if state is None or state.opcode != "parameter":
        return None
    index = re.search(r"index=(\d+)", ins.rest)
    return int(index.group(1)) if index else None


def _step(name: str, slot: int, defs: dict[str, Instr]) -> int | None:
    """What the body adds to state element ``slot`` each trip (its next value being that
    element plus or minus a constant), or None."""
    update = _through(defs, name)
    if update is None or update.opcode not in ("add", "subtract") or len(update.operands) != 2:
        return None
    first, second = (_through(defs, o) for o in update.operands)
    if _state_slot(first, defs) == slot and _constant(second) is not None:
        amount = _constant(second)
    elif update.opcode == "add" and _state_slot(second, defs) == slot \
            and _constant(first) is not None:
        amount = _constant(first)
    else:
        return None
    assert amount is not None
    return amount if update.opcode == "add" else -amount


def _trips(start: int, step: int, limit: int, op: str) -> int | None:
    """Trips of ``for (v = start; v <op> limit; v += step)``; None where it never ends."""
    if op == "LE":
        op, limit = "LT", limit + 1
    elif op == "GE":
        op, limit = "GT", limit - 1
    if op == "LT":
        if start >= limit:
            return 0
        return math.ceil((limit - start) / step) if step > 0 else None
    if op == "GT":
        if start <= limit:
            return 0
        return math.ceil((start - limit) / -step) if step < 0 else None
    if op == "NE":
        if start == limit:
            return 0
        if step == 0 or (limit - start) % step or (limit - start) // step < 0:
            return None
        return (limit - start) // step
    return None  # EQ: runs while the counter stays put; no counting pattern


__all__ = ["called", "is_scalar_op", "trip_count"]
