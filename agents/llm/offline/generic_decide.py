"""Which tasks the generic class takes, and whether it sums over a contracted axis.

`decide` takes a task no specific class did, `consider_summing` one a blocks-of-rows class
took whose rows each read a whole weight. Both read the independent axes from the jaxpr
(`generic_axes`), look for a contracted axis to sum over (`generic_summed`), and weigh the
two schedules by their price (`generic_price`); the VMEM rules are the class's own
(`generic`: its budget is read there at each call).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from agents.llm.offline import generic, generic_fold
from agents.llm.offline.classify import TaskFacts
from agents.llm.offline.generic_summed import with_reduction


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def _summed_detail(got: Any) -> dict[str, Any]:
    """The class detail for a `generic_axes.Tiling` (with or without a summed axis)."""
    return {"symbols": list(got.symbols), "units": list(got.units), "origins": list(got.origins),
            "in_axes": [list(a) for a in got.in_axes], "out_axes": [list(a) for a in got.out_axes],
            "arg_dims": [list(d) for d in got.arg_dims], "out_dims": [list(d) for d in got.out_dims],
            "body": got.body, "values": [(list(s), n, list(a), b, d) for s, n, a, b, d in got.values],
            "reduced": got.reduced, "partials": [(list(d), t) for d, t in got.partials],
            "dots": [(list(o), list(c), every) for o, c, every in got.dots],
            "fold": generic_fold.candidate(got.units, [*got.in_axes, *got.out_axes], got.reduced)}


def decide(facts: TaskFacts, trace: Any, flat: tuple[list[Any], list[Any], list[Any], dict[Any, Any]]) -> None:
    """Make `facts` (a task no specific class took) the generic class when an output axis is
    independent; else keep the single block, or refuse, saying why, when even the whole arrays
    do not fit a core's VMEM. A contracted axis is summed over, block by block, when one
    block of the independent axes cannot hold every weight, or when the sums are priced
    faster (`generic_price`)."""
    from agents.llm.offline import generic_axes

    got = generic_axes.find(trace, [a.dims for a in facts.args], [o[0] for o in facts.outs], flat,
                            facts.symbols, facts.dim_values, facts.pinned)
    if isinstance(got, str):
        facts.reasons.append(f"no axis of the output is independent ({got}): one block")
        if facts.io_bytes > generic.RAISED_VMEM_BYTES:  # the inputs and outputs alone, before any value
            facts.unsupported = (
                f"no axis of the reference's output can be computed block by block ({got}), and "
                f"one block holding the whole inputs and outputs needs {_mib(facts.io_bytes)} of "
                f"VMEM at this size before any intermediate, more than the "
                f"{_mib(generic.RAISED_VMEM_BYTES)} a TPU core gives one kernel; run it at a smaller size "
                "(for a JAXBench task, a smaller --scale)")
        return
    facts.kernel_class, facts.detail = "generic", _summed_detail(got)
    described = ", ".join(f"{o} ({facts.dim_values[o]})" for o in got.origins)
    least = generic.block_vmem(facts, generic.aligns(facts))
    facts.reasons.append(f"no specific class fits; axes {described} of the output are independent "
                         "(no op of the jaxpr mixes positions along them): a grid over them"
                         + (f"; not tiled: {'; '.join(got.rejected)}" if got.rejected else ""))
    summed = with_reduction(trace, got, facts.symbols, facts.dim_values, facts.pinned)
    if least <= generic.RAISED_VMEM_BYTES:
        if not isinstance(summed, str):
            _sum_where_faster(facts, summed)
        return
    if not isinstance(summed, str):
        trial = dataclasses.replace(facts, detail=_summed_detail(summed))
        if generic.block_vmem(trial, generic.aligns(trial)) <= generic.RAISED_VMEM_BYTES:
            facts.detail = trial.detail
            facts.reasons.append(
                f"one block of {described} holds every weight ({_mib(least)} of VMEM): the "
                f"contracted axis {summed.origins[-1]} is a last, summed grid axis instead, "
                "its weights streamed a block at a time")
            return
        why = "its blocks still do not fit"
    else:
        why = summed
    facts.reasons.append(f"no contracted axis to sum over block by block: {why}")
    facts.unsupported = (
        f"even one aligned block of the independent axes {described} needs about {_mib(least)} "
        f"of VMEM with the body's intermediates, more than the {_mib(generic.RAISED_VMEM_BYTES)} a TPU "
        "core gives one kernel; run it at a smaller size (for a JAXBench task, a smaller --scale)")


def consider_summing(facts: TaskFacts, trace: Any,
                     flat: tuple[list[Any], list[Any], list[Any], dict[Any, Any]]) -> None:
    """A task a blocks-of-rows class took, whose rows each read a whole weight: make it the
    generic class with the weight's contracted axis summed over, where that is priced faster
    than fetching every weight before the first block of rows (`generic_price`)."""
    from agents.llm.offline import generic_axes

    got = generic_axes.find(trace, [a.dims for a in facts.args], [o[0] for o in facts.outs], flat,
                            facts.symbols, facts.dim_values, facts.pinned)
    if isinstance(got, str):
        return
    summed = with_reduction(trace, got, facts.symbols, facts.dim_values, facts.pinned)
    if isinstance(summed, str):
        return
    was = facts.kernel_class
    if _sum_where_faster(facts, summed):
        facts.reasons.append(f"not the {was} class: its blocks of rows would each wait for every "
                             "weight, which the generic class's summed axis streams")


def _sum_where_faster(facts: TaskFacts, summed: Any) -> bool:
    """Make `facts` the generic class over `summed` when its priced schedule beats the same
    grid with the whole contracted axis in one block by `generic_price.GAIN`, saying so."""
    from agents.llm.offline import generic_price

    trial = dataclasses.replace(facts, kernel_class="generic", detail=_summed_detail(summed))
    found = generic_price.best_blocks(trial, None, generic.RAISED_VMEM_BYTES)
    if not generic_price.sums_faster(found):
        return False
    assert found is not None
    blocks, seconds, whole = found
    facts.kernel_class, facts.detail = "generic", trial.detail
    facts.reasons.append(
        f"the contracted axis {summed.origins[-1]} is a last, summed grid axis: blocks {blocks} "
        f"are priced at {seconds * 1e6:.2f} us against {whole * 1e6:.2f} us with every weight "
        "fetched before the first step (planning figures by the pipeline rules)")
    return True

