"""Seeded variety over kernel specs: which schedule an expansion writes, decided on specs.

An expansion's space is an ordered list of distinct specs, none equal to the parent's:
with a catalogue lever in the hint, that lever's variants, then each of them combined with
one more lever; without one, the profile's choice, then every lever's variants. The seed
picks a position (`pick_index`): in a search, the first spec no node of the run wrote, past
one for each sibling planning at the same time; in a direct call, the seed's position. So
children with different seeds or hints get different specs until the space is exhausted,
and the plan says when it is. The run's
first step from the root (`levers.first_step`) writes the class default instead, whatever
its hint and seed, unless the run already wrote it: every lever is then measured against
it, and the hint moves the next kernel written from it. A hinted lever that does not apply
ends the expansion with its reason instead of a duplicate kernel. Specs other nodes of the
run already wrote kernels from are left out too (a sibling whose hinted lever does not
apply, or two paths to one combination of levers, would write them again).

The order then follows the evidence: variants none of whose levers can relieve what bounds
the parent (the profile's compute, memory or per-step overhead; the catalogue's `relieves:`)
go after those that can, and variants made only of the changes of a kernel this trajectory
priced no faster than its parent go last.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from agents.llm.offline import (  # noqa: F401  (registers the levers)
    attention,
    attention_levers,
    generic,
    generic_levers,
    matmul,
    matmul_levers,
    rows,
    rows_levers,
)
from agents.llm.offline.classify import TaskFacts
from agents.llm.offline.levers import (
    REGISTRY,
    LeverContext,
    NotApplicable,
    first_step,
    seed_index,
    seed_ordinal,
    spec_from,
    variants,
)
from searchpolicies.levers import BOUNDS, catalogue
from tools.performance.profile import OUTSIDE_SHARE

WRITERS: dict[str, Any] = {"matmul_epilogue": matmul, "attention": attention, "elementwise": rows,
                           "rowwise": rows, "rows_generic": rows, "generic": generic}
SPEC_TYPES: dict[str, type] = {"matmul_epilogue": matmul.MatmulSpec, "attention": attention.AttentionSpec,
                               "elementwise": rows.RowsSpec, "rowwise": rows.RowsSpec,
                               "rows_generic": rows.RowsSpec, "generic": generic.GenericSpec}
PREFERRED = {"bigger_blocks": "block_shape", "smaller_blocks": "block_shape", "full_k": "reduction_in_one_block",
             "mxu_aligned_tiles": "mxu_alignment", "whole_kv_row": "reduction_in_one_block"}
"""The profile's block-size levers -> the catalogue lever tried first after them."""
LAYOUT_LEVERS = ("lane_dense_layout",)
"""Levers that change how arrays cross the kernel boundary: first where XLA's ops around the
kernels (its relayout copies) are a large share of the parent's time."""


WORK_FIRST = ("block_skipping", "head_packing", "reduction_layout", "lane_dense_layout",
              "block_shape", "reduction_in_one_block", "mxu_alignment", "precision",
              "transcendentals", "hoisting")
"""The order a plan names its next levers in: those that remove work (blocks the mask
zeroes, padded lanes and MXU passes, per-step overhead, wider dtypes, EUP ops) before those
that move it; the class's other levers follow in the registry's order."""


@dataclass(frozen=True)
class Choice:
    spec: Any
    lever: str  # the catalogue id (or profile lever) that made it; "" for the class default
    notes: list[str] = field(default_factory=list)
    not_applicable: dict[str, str] = field(default_factory=dict)
    stop: str = ""  # non-empty: write nothing, with this reason


def first_default_note(hinted: Sequence[str]) -> str:
    """Why a run's first expansion writes its class's default, whatever the hint and seed."""
    later = (f"; the hinted {', '.join(hinted)} is left to the next kernel written from it"
             if hinted else "")
    return ("the first kernel of a run is the class's default, so every lever is measured "
            f"against it{later}")


def has_spec(kernel_class: str) -> bool:
    return kernel_class in SPEC_TYPES


def default_spec(facts: TaskFacts, params: dict[str, Any], chip: dict[str, Any] | None) -> Any:
    writer = WRITERS[facts.kernel_class]
    return writer.default_spec(facts, params, None if writer is rows else chip)


def spec_of(facts: TaskFacts, given: dict[str, Any] | None, params: dict[str, Any],
            chip: dict[str, Any] | None) -> Any:
    """The spec a plan (or a parent's plan and tuned config) describes, on the class default."""
    spec = spec_from(SPEC_TYPES[facts.kernel_class], default_spec(facts, params, chip), given)
    knobs = {k: v for k, v in params.items() if isinstance(v, int) and not isinstance(v, bool) and v > 0}
    return spec_from(SPEC_TYPES[facts.kernel_class], spec, knobs)


def hinted_levers(kernel_class: str, hint: str) -> list[str]:
    """Catalogue ids named by the hint's `[lever=a+b ...]` tag, or written out in its text."""
    known = REGISTRY.get(kernel_class, {})
    tag = re.match(r"\s*\[lever=([\w+]+)", hint or "")
    ids = [i for i in (tag.group(1).split("+") if tag else []) if i in known]
    text = (hint or "").lower()
    ids += [i for i in known if not tag and re.search(rf"\b{i}\b", text)]
    return list(dict.fromkeys(ids))


def _vmem(facts: TaskFacts, spec: Any, ctx: LeverContext) -> int:
    if isinstance(spec, rows.RowsSpec):
        return rows_levers._vmem(spec, ctx)
    if isinstance(spec, generic.GenericSpec):
        return generic.spec_vmem(facts, spec)
    return WRITERS[facts.kernel_class].vmem_bytes(facts, spec)


def _label(spec: Any, *ids: str) -> Any:
    return replace(spec, levers=tuple(dict.fromkeys((*spec.levers, *[i for i in ids if i]))))


def choose_spec(facts: TaskFacts, parent_spec: Any, profile_spec: Any | None, profile_lever: str,
                ctx: dict[str, Any], *, root: bool, vmem_failed: bool,
                written_spec: Any | None = None,
                written_elsewhere: Sequence[Any] = (),
                priced_no_faster: Sequence[Any] = (),
                failed_tests: Sequence[Any] = ()) -> Choice:
    """The spec this expansion writes (see the module docstring). `written_spec` is the spec
    the parent's code was written from (before its tuned configuration): a variant equal to
    it would write the parent's code again, so it is no variant either; nor is any of
    `written_elsewhere`, the specs other nodes of the run wrote. A variant made only of changes
    that a spec of `priced_no_faster` (this trajectory's kernels priced no faster than their
    parent) already made comes last: the judge saw those changes together and they did not pay.
    So does a variant that makes every change of a spec of `failed_tests` (this trajectory's
    kernels that gave a wrong answer): the change that broke it would break it again."""
    c = facts.kernel_class
    lctx = LeverContext(facts, dict(ctx.get("chip") or {}))
    seed = int(ctx.get("seed") or 0)
    index = pick_index(seed, ctx)
    hinted = hinted_levers(c, str(ctx.get("hint") or ""))
    outside = outside_share((ctx.get("parent") or {}).get("profile") or {})
    if root and first_step(seed) and parent_spec not in written_elsewhere:
        return Choice(parent_spec, "", [first_default_note(hinted)])
    na: dict[str, str] = {}
    notes: list[str] = []
    all_ids = list(REGISTRY.get(c, {}))
    space: list[tuple[Any, str]] = []

    unwritable: list[str] = []

    def each(spec: Any, ids: list[str]) -> list[tuple[Any, str]]:
        out = []
        for lid in ids:
            got = variants(c, spec, lid, lctx)
            if not isinstance(got, NotApplicable):  # a plan never names a kernel it cannot write
                kept = [s for s in got if writable(facts, s, ctx)]
                unwritable.extend(lid for s in got if s not in kept)
                got = kept or NotApplicable(f"{lid}: the author has no code for it on this kernel")
            if isinstance(got, NotApplicable):
                if spec == parent_spec:
                    na[lid] = got.reason
                continue
            out += [(_label(s, lid), lid) for s in got]
        return out

    first: list[tuple[Any, str]] = []
    if hinted:
        first = each(parent_spec, hinted[:1])
        for extra in hinted[1:]:  # a crossover: the levers together first, then the first alone
            first = [(both, f"{lid}+{x}") for one, lid in first for both, x in each(one, [extra])] + first
        if not first:  # the hint costs no candidate: the seed picks among the levers that apply
            reasons = "; ".join(f"{i}: {na.get(i, 'no variant')}" for i in hinted)
            notes.append(f"the hinted lever does not apply here ({reasons}); the seed picks among "
                         "the levers that do")
            hinted = []
    if hinted:
        # then each variant with one lever more, only levers after the hinted one: a pair is
        # reached from one hint, and never a spec one lever makes alone (that is its hint's)
        later = [i for i in all_ids[all_ids.index(hinted[0]) + 1:] if i not in hinted]
        alone = {s for s, _ in each(parent_spec, [i for i in all_ids if i not in hinted])}
        space = first + [(both, f"{lid}+{extra}") for one, lid in first for both, extra in each(one, later)
                         if both not in alone]
    else:
        order = [PREFERRED[profile_lever]] if profile_lever in PREFERRED else []
        order += [i for i in all_ids if i not in order]
        if outside:  # before the profile's block move, which leaves those ops as they are
            layout = [i for i in LAYOUT_LEVERS if i in all_ids]
            space += each(parent_spec, layout)
            order = [i for i in order if i not in layout]
            notes.append(f"XLA's ops around the parent's kernels take {outside:.0%} of its time: "
                         "the layout levers first")
        if profile_spec is not None and profile_spec != parent_spec:
            space.append((_label(profile_spec, profile_lever), profile_lever))
        space += each(parent_spec, order)
    if vmem_failed:
        limit = _vmem(facts, parent_spec, lctx)
        space = [(s, lid) for s, lid in space if _vmem(facts, s, lctx) <= limit]
        notes.append("a failure mentions VMEM: only specs that need no more VMEM than the parent")
    if unwritable:
        notes.append(f"{len(unwritable)} variant(s) left out: the author cannot write their "
                     f"kernel ({', '.join(dict.fromkeys(unwritable))})")
    taken = [parent_spec, written_spec, *written_elsewhere]  # specs compare by knobs, not names
    unique: dict[Any, str] = {}
    for s, lid in space:
        if s not in taken:
            unique.setdefault(s, lid)
    ordered = list(unique.items())
    bound = str(((ctx.get("parent") or {}).get("profile") or {}).get("bound") or "")
    idle = [(s, lid) for s, lid in ordered if lid and not _relieves(lid, bound)
            and not (outside and set(lid.split("+")) & set(LAYOUT_LEVERS))]
    if idle and len(idle) < len(ordered):
        ordered = [o for o in ordered if o not in idle] + idle
        notes.append(f"{len(idle)} variant(s) moved later: none of their levers relieves the "
                     f"parent's {bound} bound")
    wrong = [(s, lid) for s, lid in ordered if any(_carries(s, parent_spec, f) for f in failed_tests)]
    if wrong:
        ordered = [o for o in ordered if o not in wrong] + wrong
        notes.append(f"{len(wrong)} variant(s) moved last: each makes every change of a kernel "
                     "this trajectory saw give a wrong answer")
    spent = [(s, lid) for s, lid in ordered if any(_within(s, parent_spec, f) for f in priced_no_faster)]
    if spent:
        ordered = [o for o in ordered if o not in spent] + spent
        notes.append(f"{len(spent)} variant(s) moved last: each only repeats changes of a kernel "
                     "this trajectory priced no faster than its parent")
    if root and not hinted and parent_spec not in written_elsewhere:
        ordered = [(parent_spec, ""), *ordered]  # a root's first variant is the class default
    skipped = sum(1 for s in dict.fromkeys(s for s, _ in space) if s in written_elsewhere)
    if skipped:
        notes.append(f"{skipped} variant(s) left out: other nodes of this run wrote them already")
    if not ordered:
        return Choice(parent_spec, "", notes, na, stop="every lever of this class is exhausted for "
                      "this kernel: no spec differs from the parent's and from those the run wrote")
    position = index % len(ordered)
    if index >= len(ordered):
        notes.append(f"seed {seed} (variant index {index}) is past the {len(ordered)} distinct specs "
                     f"this {'hint' if hinted else 'parent'} allows: the space is exhausted, so this "
                     f"child repeats variant {position}")
    spec, lid = ordered[position]
    why = (f"{index} sibling(s) planning at once" if seed_ordinal(seed) > 0 else f"seed {seed}")
    notes.append(f"variant {position} of {len(ordered)} distinct specs ({why})"
                 + (f": {lid}" if lid else ": the class default"))
    return Choice(spec, lid, notes, na)


def writable(facts: TaskFacts, spec: Any, ctx: dict[str, Any]) -> bool:
    """Does the class's writer turn `spec` into a kernel that compiles as Python and reads
    only names it defines? A combination of levers it has no code for must cost a plan
    nothing, not refuse the task."""
    from agents.llm.offline.check import checked_source

    memo = facts.__dict__.setdefault("_writable_specs", {})  # a plan asks of tens of specs, again and again
    key = (spec, str(ctx.get("task_name") or "task"))
    if key not in memo:
        try:
            checked_source(WRITERS[facts.kernel_class].render(facts, spec, key[1]))
            memo[key] = True
        except Exception:  # the refusal, or the writer failing on a combination it has no code for
            memo[key] = False
    return memo[key]


def next_levers(facts: TaskFacts, spec: Any, ctx: dict[str, Any]) -> list[str]:
    """The class's levers that change `spec` into a kernel the author can write, in
    `WORK_FIRST`'s order: what a policy may try next on the kernel written from `spec`."""
    c = facts.kernel_class
    ids = list(REGISTRY.get(c, {}))
    ids = [i for i in WORK_FIRST if i in ids] + [i for i in ids if i not in WORK_FIRST]
    lctx = LeverContext(facts, dict(ctx.get("chip") or {}))

    def changes(lid: str) -> bool:
        got = variants(c, spec, lid, lctx)
        return not isinstance(got, NotApplicable) and any(writable(facts, s, ctx) for s in got)

    return [i for i in ids if changes(i)]


def pick_index(seed: int, ctx: dict[str, Any]) -> int:
    """Which position of the ordered space an expansion takes. A search's step (its seed
    names an expansion: `levers.seed_ordinal`) takes the first, past one for each sibling
    planning at once (`unseen_siblings`): the specs the run wrote are already left out, so
    the first left is the evidence's best that nobody wrote, and an offset from the seed
    would skip it. A direct call, with no run around it, takes the seed's position."""
    if seed_ordinal(seed) > 0:
        return int(ctx.get("unseen_siblings") or 0)
    return seed_index(seed)


def outside_share(profile: dict[str, Any]) -> float:
    """The share of the parent's time its profile puts on XLA's ops around the kernels, when
    at least `OUTSIDE_SHARE` (else 0): the relayout copies only the layout levers remove."""
    latency = float(profile.get("latency_s") or 0.0)
    share = float(profile.get("outside_ops_s") or 0.0) / latency if latency > 0 else 0.0
    return share if share >= OUTSIDE_SHARE else 0.0


def _relieves(lid: str, bound: str) -> bool:
    """Can one of the levers `lid` names ("a+b") lower `bound`? Yes for an unknown bound or a
    lever the catalogue does not tag (the profile's block moves)."""
    if bound not in BOUNDS:
        return True
    tags = _relief_tags()
    return any(not tags.get(i) or bound in tags[i] for i in lid.split("+"))


@functools.cache
def _relief_tags() -> dict[str, tuple[str, ...]]:
    """Each catalogue lever's `relieves:` bounds (built once, not per variant)."""
    return {lv.id: lv.relieves for lv in catalogue()}


def _carries(spec: Any, parent: Any, failed: Any) -> bool:
    """Does `spec` make every change `failed` made to `parent` (and at least one)?"""
    if type(spec) is not type(parent) or type(failed) is not type(parent):
        return False
    knobs = [f.name for f in fields(spec) if f.name not in ("levers", "vmem_limit_bytes")]
    changes = [k for k in knobs if getattr(failed, k) != getattr(parent, k)]
    return bool(changes) and all(getattr(spec, k) == getattr(failed, k) for k in changes)


def _within(spec: Any, parent: Any, failed: Any) -> bool:
    """Is every knob of `spec` the parent's or the failed spec's (its changes a subset)?"""
    if type(spec) is not type(parent) or type(failed) is not type(parent):
        return False
    knobs = [f.name for f in fields(spec) if f.name != "levers"]
    return all(getattr(spec, k) in (getattr(parent, k), getattr(failed, k)) for k in knobs)


def spec_dict_of(spec: Any) -> dict[str, Any]:
    """A spec as the plan's json holds it (tuples as lists)."""
    from dataclasses import asdict

    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(spec).items()}
