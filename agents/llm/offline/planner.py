"""The offline planner: picks a kernel class's parameters and levers from the evidence.

Evidence, in order of weight: the parent's profile (what bounds it, steps, bandwidth
fraction, suggestions), failures so far (a lever that failed is not repeated; a VMEM
failure forbids growing blocks), the strategy hint, then the seed (which of the equally
good variants to try). The decisions travel in a ```json block inside Strategy, which the
implementer reads back.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from agents.llm.base import NO_GAIN_MARKER
from agents.llm.offline import (
    attention,
    conv,
    generic,
    grouped,
    matmul,
    paged,
    ragged,
    rows,
    scan,
    variety,
)
from agents.llm.offline.author import plan_spec
from agents.llm.offline.classify import TaskFacts
from agents.llm.offline.common import LANES, SUBLANES, knob_floor, scoped_vmem
from agents.llm.offline.levers import first_step
from agents.llm.parsing import NEXT_LEVERS_SECTION

BLOCK_KNOBS = {
    "elementwise": ("block_rows",), "rowwise": ("block_rows",), "rows_generic": ("block_rows",),
    "matmul_epilogue": ("block_m", "block_n", "block_k"), "attention": ("block_q", "block_kv"),
    "paged_attention": ("pages_per_step", "seqs_per_step"),
    "ragged_paged_attention": ("block_q", "pages_per_block"), "linear_attention": ("block_seq", "block_groups"),
    "grouped_matmul": ("block_m", "block_n", "groups_per_step"), "convolution": ("block_images",), "single_block": (),
    "generic": (),  # its blocks live in the spec (one per tiled axis), moved by its levers
}
FIXED_LEVERS = {
    "elementwise": ["row_blocks_parallel", "f32_in_vmem"],
    "rowwise": ["whole_rows_in_vmem", "row_blocks_parallel", "f32_reductions"],
    "rows_generic": ["reference_jaxpr_in_kernel", "row_blocks_parallel"],
    "matmul_epilogue": ["fuse_epilogue", "f32_accumulator", "k_axis_arbitrary_innermost"],
    "attention": ["online_softmax", "f32_accumulator", "kv_axis_arbitrary"],
    "paged_attention": paged.LEVERS, "ragged_paged_attention": ragged.LEVERS,
    "linear_attention": scan.LEVERS, "grouped_matmul": grouped.LEVERS, "convolution": conv.LEVERS, "generic": generic.LEVERS,
    "single_block": ["single_block"],
}
# classes whose module gives the defaults and extents of their BLOCK_KNOBS
KNOB_WRITERS: dict[str, Any] = {"paged_attention": paged, "ragged_paged_attention": ragged,
                                "linear_attention": scan, "grouped_matmul": grouped,
                                "convolution": conv}
WRITERS: dict[str, Any] = {**KNOB_WRITERS, "generic": generic}  # classes whose writer sizes its blocks
ONE_KNOB_VMEM_SHARE = 0.75
"""How much of the scoped VMEM a one-knob move may fill (moves of every knob keep to half):
one knob of a kernel that compiled grows its blocks less, and the compile check, whose VMEM
failure stops every later growth, has the last word."""
TUNING_LEVERS = ("bigger_blocks", "smaller_blocks", "full_k", "mxu_aligned_tiles", "whole_kv_row")


def default_params(facts: TaskFacts, chip: dict[str, Any] | None) -> dict[str, int]:
    c = facts.kernel_class
    if c in ("elementwise", "rowwise", "rows_generic"):
        return {"block_rows": rows.default_block_rows(facts, chip)}
    if c == "matmul_epilogue":
        return matmul.default_blocks(facts, chip)
    if c == "attention":
        return attention.default_blocks(facts, chip)
    return KNOB_WRITERS[c].default_blocks(facts, chip) if c in KNOB_WRITERS else {}


def extents(facts: TaskFacts) -> dict[str, int]:
    """The largest useful value of each knob at the tuning point."""
    c, d, v = facts.kernel_class, facts.detail, facts.dim_values
    if c in ("elementwise", "rowwise", "rows_generic"):
        return {"block_rows": v[d["row"]]}
    if c == "matmul_epilogue":
        return {"block_m": v[d["m"]], "block_n": v[d["n"]], "block_k": v[d["k"]]}
    if c == "attention":
        q, k = attention.bhsd(facts, "q"), attention.bhsd(facts, "k")
        return {"block_q": q[-2], "block_kv": k[-2]}
    return KNOB_WRITERS[c].extents(facts) if c in KNOB_WRITERS else {}


def vmem_bytes(facts: TaskFacts, params: dict[str, int]) -> tuple[int, str]:
    """Double-buffered blocks plus scratch, with the arithmetic written out."""
    c, d = facts.kernel_class, facts.detail
    if c in ("elementwise", "rowwise", "rows_generic"):
        br, per_row = params["block_rows"], rows.row_bytes(facts)
        fixed = sum(a.nbytes for a, r in zip(facts.args, d["row_inputs"], strict=True) if not r)
        total = 2 * br * per_row + 2 * fixed
        return total, f"2 buffers x {br} rows x {per_row} B/row + 2 x {fixed} B of whole inputs = {total:,} B"
    if c == "matmul_epilogue":
        bm, bn, bk = params["block_m"], params["block_n"], params["block_k"]
        total = 2 * 4 * (bm * bk + bk * bn) + 2 * 4 * bm * bn + 4 * bm * bn + 2 * 4 * bn
        return total, (f"2 x 4 B x ({bm}x{bk} + {bk}x{bn}) operands + 2 x 4 B x {bm}x{bn} out "
                       f"+ 4 B x {bm}x{bn} f32 accumulator (+ bias) = {total:,} B")
    if c == "attention":
        bq, bkv = params["block_q"], params["block_kv"]
        depth = facts.args[d["q"]].shape[-1]
        total = 2 * 4 * (bq * depth + 2 * bkv * depth) + 2 * 4 * bq * depth + 4 * (bq * depth + 2 * bq * LANES)
        return total, (f"2 x 4 B x ({bq}x{depth} q + 2 x {bkv}x{depth} k,v) + 2 x 4 B x {bq}x{depth} out "
                       f"+ scratch 4 B x ({bq}x{depth} acc + 2 x {bq}x{LANES} padded m,l) = {total:,} B")
    writer = WRITERS.get(c)
    if writer is not None:
        return writer.vmem_bytes(facts, params)
    total = facts.io_bytes * 2
    return total, f"2 x {facts.io_bytes:,} B of whole inputs and outputs = {total:,} B"


def _align(knob: str, value: int) -> int:
    floor = knob_floor(knob)
    return max(floor, value // floor * floor)


def _failed_levers(failures: list[dict[str, Any]]) -> tuple[set[str], bool]:
    failed: set[str] = set()
    vmem = False
    for f in failures or []:
        text = json.dumps({k: v for k, v in f.items() if k != "plan"} if isinstance(f, dict) else f,
                          default=str).lower()  # the failed kernel's plan is no failure text
        failed |= {lever for lever in TUNING_LEVERS if lever in text}
        vmem = vmem or "vmem" in text
    return failed, vmem


CATALOGUE_LEVERS = {
    "block_shape": "bigger_blocks", "flatten_leading_axes": "bigger_blocks",
    "lane_dense_layout": "bigger_blocks", "head_packing": "bigger_blocks",
    "buffering": "smaller_blocks", "manual_dma": "smaller_blocks", "inner_loop": "smaller_blocks",
    "dimension_semantics": "smaller_blocks", "vmem_budget": "smaller_blocks",
    "mxu_alignment": "mxu_aligned_tiles", "alignment": "mxu_aligned_tiles",
    "reduction_in_one_block": "full_k", "resident_operands": "full_k",
    "online_reduction": "whole_kv_row", "block_skipping": "whole_kv_row",
}
"""The catalogue's levers (a search policy's `[lever=...]` hint) this author can act on."""


def _tagged_levers(hint: str) -> list[str]:
    """The catalogue lever ids a hint's `[lever=a+b]` tag names (none without a tag)."""
    tag = re.match(r"\[lever=([\w+]+)", (hint or "").lower())
    return tag.group(1).split("+") if tag else []


def _hint_levers(hint: str) -> list[str]:
    text = (hint or "").lower()
    wanted = [CATALOGUE_LEVERS[i] for i in _tagged_levers(hint) if i in CATALOGUE_LEVERS]
    wanted += [lever for lever in TUNING_LEVERS if lever in text or lever.replace("_", " ") in text]
    if re.search(r"\b(larger|bigger|fewer steps|per-step overhead)\b", text):
        wanted.append("bigger_blocks")
    if re.search(r"\b(smaller|pipelin|overlap)\b", text):
        wanted.append("smaller_blocks")
    return list(dict.fromkeys(wanted))


def choose(facts: TaskFacts, ctx: dict[str, Any]) -> dict[str, Any]:
    """The plan's decisions: class, levers, params, evidence lines, or a no-gain verdict."""
    chip = ctx.get("chip") or {}
    parent = ctx.get("parent") or None
    failures = list(ctx.get("failures") or [])
    seed = int(ctx.get("seed") or 0)
    c = facts.kernel_class
    knobs = BLOCK_KNOBS[c]
    evidence: list[str] = []
    params = default_params(facts, chip)
    base_config = dict((parent or {}).get("config") or {})
    for k in knobs:
        if isinstance(base_config.get(k), int):
            params[k] = base_config[k]
    base_params = dict(params)
    failed, vmem_failed = _failed_levers(failures)
    candidates: list[str] = []
    profile = (parent or {}).get("profile") or {}
    if profile:
        bound = profile.get("bound", "")
        steps = int(profile.get("grid_steps") or 0)
        bw = float(profile.get("achieved_bandwidth_fraction") or 0.0)
        speedup = float(profile.get("speedup") or (parent or {}).get("speedup") or 0.0)
        evidence.append(f"parent profile: bound {bound}, {steps} grid steps, {bw:.0%} of peak HBM "
                        f"bandwidth, speedup {speedup:.2f}x (simulated)" if profile.get(
                            "measured_on") == "simulated" else
                        f"parent profile: bound {bound}, {steps} grid steps, {bw:.0%} of peak HBM "
                        f"bandwidth, speedup {speedup:.2f}x")
        suggestions = " ".join(profile.get("suggestions") or []).lower()
        if bound == "memory" and bw > 0.9 and 0.9 <= speedup <= 1.1:
            evidence.append(f"memory-bound at {bw:.0%} of peak bandwidth and {speedup:.2f}x: the "
                            "XLA baseline already moves the minimum bytes at nearly full bandwidth")
            return {"no_gain": True, "evidence": evidence, "kernel_class": c}
        if bound == "overhead" or "larger blocks" in suggestions or (bound == "memory" and steps > 4):
            candidates.append("bigger_blocks")
            evidence.append("many short steps: the fixed per-step cost is a large share -> bigger blocks")
        if "re-fetched" in suggestions and c == "matmul_epilogue":
            candidates.append("full_k")
        if "mxu" in suggestions and c == "matmul_epilogue":
            candidates.append("mxu_aligned_tiles")
        if bound in ("memory", "compute") and steps <= 2:
            candidates.append("smaller_blocks")
            evidence.append(f"only {steps} steps: the first fetch and last write-back are not "
                            "overlapped -> smaller blocks pipeline better")
        if c == "attention":
            candidates.append("whole_kv_row")
    hinted = _hint_levers(ctx.get("hint", ""))
    if hinted:
        evidence.append(f"hint asks for: {', '.join(hinted)}")
    ordered = list(dict.fromkeys(hinted + candidates + (["bigger_blocks", "smaller_blocks"] if parent else [])
                                 + (_knob_moves(knobs) if parent and not variety.has_spec(c) else [])))
    usable = [lv for lv in ordered if lv not in failed and not (vmem_failed and lv == "bigger_blocks")]
    if failed:
        evidence.append(f"not repeating failed levers: {', '.join(sorted(failed))}")
    if vmem_failed:
        evidence.append("a failure mentions VMEM: no bigger blocks")
    levers = list(FIXED_LEVERS[c])
    if variety.has_spec(c):
        return _choose_spec(facts, ctx, parent, base_params, base_config, usable, evidence, vmem_failed)
    written = _written_params(facts, ctx, parent)
    if knobs and not parent and first_step(seed) and params not in written:
        evidence.append(variety.first_default_note(hinted))  # as `variety.choose_spec` does
    elif knobs and usable:
        start = seed % len(usable) if not hinted and not candidates else 0
        moves = [(lv, _apply(facts, lv, params, chip)) for lv in usable[start:] + usable[:start]]
        lever, params = next(((lv, moved) for lv, moved in moves  # a move that moves nothing is no move
                              if moved != params and moved not in written), moves[0])
        levers.append(lever)
    elif knobs and seed and not parent:
        params = _seed_variant(facts, params, seed)
        levers.append("seeded_block_variant")
    if params in written:  # its source is a function of the blocks alone: the same kernel again
        return {"no_gain": True, "kernel_class": c, "evidence": evidence, "stop": (
            f"the offline author writes the {c} kernel from its block sizes alone, and every "
            f"block move it has here (moves: {', '.join(usable) or 'none'}) gives a kernel this run already wrote "
            f"(blocks {json.dumps(params, sort_keys=True)})")}
    carried = {k: base_config[k] for k in getattr(WRITERS.get(c), "CARRIED_KNOBS", ())
               if isinstance(base_config.get(k), int)}
    if carried:
        evidence.append("kept from the parent's tuned configuration: " + ", ".join(
            f"{k}={v}" for k, v in carried.items()))
    moved = levers[-1] if len(levers) > len(FIXED_LEVERS[c]) else ""
    untaken = _untaken_hint_levers(str(ctx.get("hint") or ""))
    if untaken:
        evidence.append(f"hint asks for catalogue lever(s) {', '.join(untaken)}: the {c} kernel "
                        "is written from its block sizes alone and has no such variant"
                        + (f"; a block move instead ({moved})" if moved else ""))
    return {"no_gain": False, "kernel_class": c, "levers": levers, "params": {**params, **carried},
            "evidence": evidence, **({"lever": moved} if moved else {})}


def _untaken_hint_levers(hint: str) -> list[str]:
    """The catalogue levers a hint's tag names that no block move stands for: what a class
    written from its block sizes alone cannot do, said in its plan rather than passed over."""
    return [i for i in _tagged_levers(hint) if i not in CATALOGUE_LEVERS]


def _knob_moves(knobs: tuple[str, ...]) -> list[str]:
    """One knob at a time, after the moves of every knob together: where doubling all blocks
    overshoots (a bigger row block multiplies more groups' rows, say), one knob alone may not,
    and the space is not spent after two moves."""
    return [f"{verb}_{knob}" for knob in knobs for verb in ("double", "halve")] if len(knobs) > 1 else []


def _written_params(facts: TaskFacts, ctx: dict[str, Any],
                    parent: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The block sizes this run already wrote a kernel of this class from: other nodes' plans,
    the parent's plan, and the parent's tuned configuration (its default moved there is the
    same program under other defaults)."""
    def params_of(text: str) -> dict[str, Any] | None:  # its blocks: a carried knob is no move
        decisions = plan_spec(text)
        given = decisions.get("params")
        knobs = BLOCK_KNOBS[facts.kernel_class]
        return {k: v for k, v in given.items() if k in knobs} if decisions.get(
            "kernel_class") == facts.kernel_class and isinstance(given, dict) else None

    seen = [p for p in map(params_of, map(str, ctx.get("written_plans") or [])) if p is not None]
    own = params_of(str((parent or {}).get("plan") or ""))
    if own is not None:
        config = dict((parent or {}).get("config") or {})
        seen += [own, {k: config.get(k, v) for k, v in own.items()}]
    return seen


def _choose_spec(facts: TaskFacts, ctx: dict[str, Any], parent: dict[str, Any] | None,
                 base_params: dict[str, int], base_config: dict[str, Any], usable: list[str],
                 evidence: list[str], vmem_failed: bool) -> dict[str, Any]:
    """A class with a spec: the parent's spec (its plan's, with its tuned config), the profile's
    block lever as the first choice, and the seed's pick among the catalogue's variants."""
    c, chip = facts.kernel_class, ctx.get("chip") or {}
    given = plan_spec(str((parent or {}).get("plan") or "")).get("spec")
    parent_spec = variety.spec_of(facts, given if isinstance(given, dict) else None,
                                  {**base_params, **base_config}, chip)
    profile_lever = usable[0] if usable and BLOCK_KNOBS[c] else ""
    profile_spec = None
    if profile_lever:
        moved = _apply(facts, profile_lever, base_params, chip)
        profile_spec = variety.spec_of(facts, variety.spec_dict_of(parent_spec), moved, chip)
    written = (variety.spec_of(facts, given, {}, chip) if isinstance(given, dict) else None)
    elsewhere = _written_elsewhere(facts, ctx, chip)
    choice = variety.choose_spec(facts, parent_spec, profile_spec, profile_lever, ctx,
                                 root=parent is None, vmem_failed=vmem_failed,
                                 written_spec=written, written_elsewhere=elsewhere,
                                 priced_no_faster=_failed_specs(facts, ctx, chip, "price"),
                                 failed_tests=_failed_specs(facts, ctx, chip, "test"))
    named = variety.hinted_levers(c, str(ctx.get("hint") or ""))
    if named:  # the catalogue lever itself, not the block move an older author mapped it to
        evidence = [e for e in evidence if not e.startswith("hint asks for")]
        evidence.append(f"hint asks for catalogue lever(s): {', '.join(named)}")
    evidence = evidence + choice.notes + [f"not applicable: {k}: {v}" for k, v in choice.not_applicable.items()]
    if choice.stop:
        return {"no_gain": True, "kernel_class": c, "evidence": evidence, "stop": choice.stop,
                "not_applicable": choice.not_applicable}
    spec = variety.spec_dict_of(choice.spec)
    params = {k: spec[k] for k in BLOCK_KNOBS[c]}
    return {"no_gain": False, "kernel_class": c, "levers": list(FIXED_LEVERS[c]) + list(choice.spec.levers),
            "params": params, "spec": spec, "not_applicable": choice.not_applicable,
            "evidence": evidence, "lever": choice.lever,
            "next_levers": variety.next_levers(facts, choice.spec, ctx)}


def _written_elsewhere(facts: TaskFacts, ctx: dict[str, Any], chip: dict[str, Any]) -> list[Any]:
    """The specs other nodes of the run wrote kernels from (their plans' json), untuned."""
    specs = []
    for text in ctx.get("written_plans") or []:
        decisions = plan_spec(str(text))
        given = decisions.get("spec")
        if isinstance(given, dict) and decisions.get("kernel_class") == facts.kernel_class:
            specs.append(variety.spec_of(facts, given, {}, chip))
    return specs


def _failed_specs(facts: TaskFacts, ctx: dict[str, Any], chip: dict[str, Any], phase: str) -> list[Any]:
    """The specs of this trajectory's kernels that failed at `phase`: "price" (priced no faster
    than their parent) or "test" (a wrong answer). `agents.planner` attaches each one's plan."""
    specs = []
    for failure in ctx.get("failures") or []:
        if not isinstance(failure, dict) or failure.get("phase") != phase:
            continue
        decisions = plan_spec(str(failure.get("plan") or ""))
        given = decisions.get("spec")
        if isinstance(given, dict) and decisions.get("kernel_class") == facts.kernel_class:
            specs.append(variety.spec_of(facts, given, {}, chip))
    return specs


def _apply(facts: TaskFacts, lever: str, params: dict[str, int], chip: dict[str, Any]) -> dict[str, int]:
    out = dict(params)
    ext = extents(facts)
    budget = scoped_vmem(chip) // 2
    if lever == "bigger_blocks":
        for k in out:
            if k != "block_k":
                out[k] = min(_align(k, out[k] * 2), max(ext.get(k, out[k]), knob_floor(k)))
        if vmem_bytes(facts, out)[0] > budget:
            return dict(params)
    elif lever == "smaller_blocks":
        for k in out:
            out[k] = _align(k, max(out[k] // 2, 1))
    elif lever == "full_k" and "block_k" in out:
        out["block_k"] = ext["block_k"]
        if vmem_bytes(facts, out)[0] > budget:
            out["block_k"] = params["block_k"]
    elif lever.startswith(("double_", "halve_")) and lever.partition("_")[2] in out:
        verb, _, k = lever.partition("_")
        if verb == "halve":
            out[k] = _align(k, max(out[k] // 2, 1))
            return out
        out[k] = min(_align(k, out[k] * 2), max(ext.get(k, out[k]), knob_floor(k)))
        if vmem_bytes(facts, out)[0] > ONE_KNOB_VMEM_SHARE * scoped_vmem(chip):
            return dict(params)
    elif lever == "mxu_aligned_tiles":
        mxu = int(chip.get("mxu_dim") or chip.get("mxu_size") or 256)
        for k in ("block_m", "block_n", "block_k"):
            if k in out:
                out[k] = max(mxu, out[k] // mxu * mxu)
    elif lever == "whole_kv_row" and "block_kv" in out:
        out["block_kv"] = -(-ext["block_kv"] // SUBLANES) * SUBLANES
        if vmem_bytes(facts, out)[0] > budget:
            out["block_kv"] = params["block_kv"]
    return out


def _seed_variant(facts: TaskFacts, params: dict[str, int], seed: int) -> dict[str, int]:
    out = dict(params)
    factor = (1, 2, 0.5)[seed % 3]
    for k in out:
        out[k] = _align(k, int(out[k] * factor))
    return out


def plan_text(facts: TaskFacts, decision: dict[str, Any], ctx: dict[str, Any], task_name: str) -> str:
    """The markdown plan with every section of PLAN_SECTIONS, in order."""
    chip = ctx.get("chip") or {}
    c = facts.kernel_class
    shapes = ", ".join(f"{a.name} {a.dtype}{list(a.shape)}" for a in facts.args)
    analysis = [f"Task `{task_name}` at the tuning point: {shapes} -> "
                + ", ".join(f"{dt}{list(s)}" for s, (_, dt) in zip(facts.out_shapes, facts.outs, strict=True)) + ".",
                f"Kernel class: **{c}** (from the jaxpr: {'; '.join(facts.reasons)}).",
                f"Primitives: {', '.join(facts.primitives)}. Bytes in+out {facts.io_bytes:,}, "
                f"flops {facts.flops:,}."]
    baseline = ctx.get("baseline_s")
    if isinstance(baseline, int | float) and baseline > 0:
        analysis.append(f"XLA baseline {baseline * 1e6:.2f} us.")
    analysis += [f"- {e}" for e in decision.get("evidence", [])]
    if ctx.get("feedback"):
        analysis.append(f"Human feedback taken into account: {ctx['feedback']}")
    for snippet in list(ctx.get("knowledge") or [])[:2]:
        first = str(snippet).strip().splitlines()[0][:120] if str(snippet).strip() else ""
        if first:
            analysis.append(f"Knowledge consulted: {first}")
    if decision.get("no_gain"):
        stop = decision.get("stop") or ""
        return "\n".join([
            "## Analysis", *analysis, "", "## Strategy",
            f"Stop, writing no candidate: {stop}." if stop else "Stop: no kernel will beat the baseline.",
            "```json", json.dumps({"kernel_class": c, "levers": [], "params": {},
                                   "not_applicable": decision.get("not_applicable") or {}}), "```", "",
            "## Memory layout and tiling", "Unchanged from the parent.", "",
            "## TPU levers", "None that applies here (see the reasons above)." if stop else
            "None left: the parent is at the bandwidth roofline.", "",
            "## Grid and BlockSpecs", "Unchanged.", "",
            "## Expected effect", NO_GAIN_MARKER, ""])
    params = decision["params"]
    spec = {"kernel_class": c, "levers": decision["levers"], "params": params}
    if decision.get("spec"):
        spec["spec"] = decision["spec"]
    vmem, arithmetic = vmem_bytes(facts, params) if params or not BLOCK_KNOBS[c] else (0, "")
    limit = scoped_vmem(chip)
    return "\n".join([
        "## Analysis", *analysis, "",
        "## Strategy", (f"Lever {decision['lever']}: " if decision.get("lever") else "") + _strategy(c),
        "```json", json.dumps(spec, sort_keys=True), "```", "",
        "## Memory layout and tiling", f"VMEM: {arithmetic}; scoped limit {limit:,} B "
        f"({vmem / limit:.0%} used; chip VMEM {chip.get('vmem_bytes', 'unknown')} B).",
        "Blocks keep the (8, 128) rule: second-to-last dim a multiple of 8 (or whole), last a "
        "multiple of 128 (or whole); tails through pl.cdiv grids.", "",
        "## TPU levers", *[f"- {lv}" for lv in decision["levers"]], "",
        "## Grid and BlockSpecs", _grid(c, params), "",
        "## Expected effect", _effect(facts, params), "",
        *_next_levers_section(decision.get("next_levers") or [])])


def _next_levers_section(ids: list[str]) -> list[str]:
    """What this kernel can still change, work-removing levers first (`variety.WORK_FIRST`)."""
    if not ids:
        return []
    return [f"## {NEXT_LEVERS_SECTION}", *[f"- {i}" for i in ids], ""]


def _strategy(c: str) -> str:
    return {
        "elementwise": "Row blocks of the whole width; the elementwise chain runs once per block in VMEM.",
        "rowwise": "Whole rows per step so each row's reductions stay in VMEM; one HBM read and write.",
        "rows_generic": "Blocks of independent rows; the reference's own ops evaluated per block.",
        "matmul_epilogue": "Tiled matmul with an f32 VMEM accumulator; the epilogue runs on the "
                           "finished tile at the last K step, so the product never round-trips HBM.",
        "attention": "Flash attention: online softmax over KV blocks with running max/sum in VMEM.",
        "paged_attention": paged.STRATEGY, "ragged_paged_attention": ragged.STRATEGY,
        "linear_attention": scan.STRATEGY,
        "grouped_matmul": grouped.STRATEGY, "convolution": conv.STRATEGY, "generic": generic.STRATEGY,
        "single_block": "One block holding the whole arrays; correctness first.",
    }[c]


def _grid(c: str, params: dict[str, int]) -> str:
    if c in ("elementwise", "rowwise", "rows_generic"):
        return (f"grid (cdiv(rows, {params['block_rows']}),) parallel; row arrays blocked "
                f"({params['block_rows']}, whole rest), others one whole block at index 0.")
    if c == "matmul_epilogue":
        return (f"grid (cdiv(M, {params['block_m']}), cdiv(N, {params['block_n']}), K/{params['block_k']}); "
                "(i, j) parallel, k arbitrary and innermost; a (i,k), b (k,j), out (i,j).")
    if c == "attention":
        return (f"grid (batch*heads, cdiv(Sq, {params['block_q']}), cdiv(Sk, {params['block_kv']})); "
                "first two parallel, KV arbitrary; q/out (g,i,0), k/v (g,j,0).")
    writer = WRITERS.get(c)
    if writer is not None:
        return writer.grid_text(params)
    return "grid (1,); every array one whole block."


def _effect(facts: TaskFacts, params: dict[str, int]) -> str:
    ext = extents(facts)
    steps = math.prod(-(-ext[k] // max(v, 1)) for k, v in params.items() if k in ext) if params else 1
    return (f"About {steps} grid steps at the tuning point; one pass over the {facts.io_bytes:,} "
            "bytes of inputs and outputs; fewer HBM round trips than the XLA program.")
