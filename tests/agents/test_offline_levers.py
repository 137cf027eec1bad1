"""The offline author's levers: every catalogue lever of a class is a spec transformation
or a reasoned NotApplicable; each real one changes the rendered kernel, which stays
lint-clean and computes what the reference does; the seed picks among distinct specs."""

from __future__ import annotations

import dataclasses
import functools
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agents.llm.base import ProviderError
from agents.llm.offline import planner, variety
from agents.llm.offline.check import checked_source
from agents.llm.offline.classify import TaskFacts, classify_task
from agents.llm.offline.common import drop_unused_imports, knob_floor
from agents.llm.offline.levers import (
    REGISTRY,
    STANDING,
    LeverContext,
    NotApplicable,
    first_step,
    seed_index,
    seed_iteration,
    seed_ordinal,
    variants,
)
from searchpolicies.levers import levers_for

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "tasks"
# one shipped task per class the author keeps a spec for
CLASS_TASKS = {"matmul_epilogue": "matmul_bias_gelu", "attention": "attention", "rowwise": "rmsnorm",
               "elementwise": "gelu", "rows_generic": "cross_entropy"}
SPEC_TASKS = ["matmul", "matmul_bias_gelu", "matmul_bias_gelu_bf16", "matmul_scale_residual", "attention",
              "causal_attention", "gqa_attention", "rmsnorm", "softmax", "layernorm", "gelu", "silu_bf16",
              "cross_entropy", "topk"]


@functools.cache
def _chip() -> dict[str, Any]:
    from tools.api import chip_figures

    return chip_figures("sim-tpu-v6e")


@functools.cache
def _facts(name: str) -> TaskFacts:
    return classify_task(TASKS / f"{name}.py")


def _render(facts: TaskFacts, spec: Any, name: str) -> str:
    return drop_unused_imports(variety.WRITERS[facts.kernel_class].render(facts, spec, name))


def _catalogue_ids(kernel_class: str) -> list[str]:
    return [lv.id for lv in levers_for(kernel_class)]


def lever_counts() -> dict[str, tuple[int, int, int, list[str]]]:
    """Per class: (levers with a code path, levers that change the class default of its
    shipped task at the tuning point, catalogue levers, the ones NotApplicable there)."""
    out = {}
    for c, name in CLASS_TASKS.items():
        facts = _facts(name)
        base = variety.default_spec(facts, {}, _chip())
        ids = _catalogue_ids(c)
        na = [i for i in ids if isinstance(variants(c, base, i, LeverContext(facts, _chip())), NotApplicable)]
        paths = [i for i in ids if i not in STANDING.get(c, set())]
        out[c] = (len(paths), len(ids) - len(na), len(ids), na)
    return out


def test_every_catalogue_lever_of_a_class_has_an_answer() -> None:
    for c in CLASS_TASKS:
        missing = [i for i in _catalogue_ids(c) if i not in REGISTRY[c]]
        assert not missing, (c, missing)


def test_lever_counts_per_class(capsys: pytest.CaptureFixture[str]) -> None:
    counts = lever_counts()
    with capsys.disabled():
        for c, (paths, real, total, na) in counts.items():
            print(f"\n{c} ({CLASS_TASKS[c]}): {paths} of {total} catalogue levers have a code path; "
                  f"{real} change the class default at the tuning point; NotApplicable there: "
                  f"{', '.join(na)}")
    # before: 5 of 24 matmul and 5 of 27 attention levers changed a byte of the kernel
    assert counts["matmul_epilogue"][1] >= 8 and counts["attention"][1] >= 11
    assert counts["matmul_epilogue"][0] >= 13 and counts["attention"][0] >= 16
    assert counts["rowwise"][1] >= 6


def _cases() -> list[tuple[str, str]]:
    return [(name, i) for name in sorted(set(CLASS_TASKS.values()) | {"causal_attention", "gqa_attention"})
            for i in REGISTRY[_facts(name).kernel_class]]


@pytest.mark.parametrize(("name", "lever_id"), _cases())
def test_a_lever_changes_the_spec_and_the_source_or_says_why_not(name: str, lever_id: str) -> None:
    facts = _facts(name)
    base = variety.default_spec(facts, {}, _chip())
    got = variants(facts.kernel_class, base, lever_id, LeverContext(facts, _chip()))
    if isinstance(got, NotApplicable):
        assert len(got.reason) > 15, got
        return
    parent_source = _render(facts, base, name)
    assert got and len(set(got)) == len(got) and base not in got
    for spec in got:
        changed = {f.name for f in dataclasses.fields(spec) if getattr(spec, f.name) != getattr(base, f.name)}
        assert changed - {"levers", "vmem_limit_bytes"}, f"{lever_id} only raises the VMEM limit: {spec}"
        source = _render(facts, dataclasses.replace(spec, levers=(lever_id,)), name)
        assert source != parent_source
        past_docstring = source.split('"""', 2)[2], parent_source.split('"""', 2)[2]
        assert past_docstring[0] != past_docstring[1], f"{lever_id} changes only the docstring"
        compile(source, f"{name}_{lever_id}.py", "exec")


@pytest.mark.parametrize("name", ["causal_attention", "gqa_attention", "attention", "matmul_bias_gelu",
                                  "rmsnorm", "topk", "cross_entropy"])
def test_every_spec_two_levers_from_the_default_is_written_with_defined_names(name: str) -> None:
    """A lever applied after another must leave a kernel the author can write: one that does
    not (the staircase with the whole KV in one block read an undefined `kv`) refused the
    task and ended a run that already had a valid kernel."""
    facts, ctx = _facts(name), LeverContext(_facts(name), _chip())
    c = facts.kernel_class
    reached = {variety.default_spec(facts, {}, _chip()): ()}
    for _ in range(2):
        for spec, path in list(reached.items()):
            for lid in REGISTRY[c]:
                got = variants(c, spec, lid, ctx)
                for variant in [] if isinstance(got, NotApplicable) else got:
                    reached.setdefault(variant, (*path, lid))
    assert len(reached) > 10
    for spec, path in reached.items():
        try:
            checked_source(_render(facts, spec, name))
        except ProviderError as exc:
            raise AssertionError(f"{name} after {' then '.join(path)}: {exc}") from None


def _run(facts: TaskFacts, spec: Any, name: str, shape_index: int) -> tuple[np.ndarray, np.ndarray]:
    from jax.experimental.pallas import tpu as pltpu

    from tools.api import load_task

    namespace: dict[str, Any] = {"__name__": "candidate"}
    exec(compile(_render(facts, spec, name), name, "exec"), namespace)
    loaded = load_task(TASKS / f"{name}.py")
    args = loaded.make_inputs(0, shape_index)
    with pltpu.force_tpu_interpret_mode():
        got = namespace["build"]()(*args)
    return np.asarray(got, np.float32), np.asarray(loaded.reference(*args), np.float32)


def test_a_variant_that_only_raises_the_vmem_limit_is_no_kernel_of_its_own() -> None:
    """The limit alone lowers to the parent's schedule; it travels with the blocks it lets grow."""
    facts = _facts("rmsnorm")
    base = variety.default_spec(facts, {}, _chip())
    ctx = LeverContext(facts, _chip())
    limit_only = dataclasses.replace(base, vmem_limit_bytes=ctx.raised_vmem_limit())
    REGISTRY["rowwise"]["_probe"] = lambda spec, ctx: [limit_only]
    try:
        got = variants("rowwise", base, "_probe", ctx)
    finally:
        del REGISTRY["rowwise"]["_probe"]
    assert isinstance(got, NotApplicable) and "vmem_limit_bytes" in got.reason
    grown = variants("rowwise", base, "vmem_budget", ctx)
    assert isinstance(grown, NotApplicable) or all(s.block_rows > base.block_rows for s in grown)


ROWS = {"operands": "rows", "layout": "rows"}
"""(seq, head_dim) blocks and (q, kv) scores: where the levers that lay attention out
otherwise start from (a head_dim under 128 defaults to seq on the lanes)."""

# (task, small shape index, lever, parent overrides so the lever applies at that parent)
VERIFIED = [
    ("matmul_bias_gelu", 1, "inner_loop", {}), ("matmul_bias_gelu", 1, "accumulator", {}),
    ("matmul_bias_gelu", 1, "reduction_in_one_block", {}), ("matmul_bias_gelu", 1, "resident_operands", {}),
    ("matmul_bias_gelu", 1, "grid_order", {"block_m": 128, "block_n": 128}),
    ("matmul_bias_gelu", 1, "single_buffer_invariants", {"block_n": 2048}),
    ("attention", 1, "head_packing", {}), ("gqa_attention", 1, "head_packing", {}),
    ("gqa_attention", 1, "head_packing", {"layout": "transposed"}), ("attention", 1, "reduction_layout", ROWS),
    ("attention", 1, "transcendentals", {}), ("attention", 1, "reduction_in_one_block", {"block_kv": 64}),
    ("attention", 1, "inner_loop", {**ROWS, "heads_per_block": 1}), ("attention", 1, "accumulator", {}),
    ("attention", 1, "hoisting", {"block_kv": 64}), ("attention", 1, "single_buffer_invariants", {"block_kv": 64}),
    ("causal_attention", 1, "reduction_layout", {"block_q": 64, "block_kv": 64, **ROWS}),
    ("causal_attention", 1, "grid_order", {"block_q": 64, "block_kv": 64}),
    ("rmsnorm", 2, "inner_loop", {}), ("rmsnorm", 2, "single_buffer_invariants", {}),
    ("softmax", 2, "transcendentals", {}),
    ("gqa_attention", 1, "lane_dense_layout", ROWS),
    ("causal_attention", 1, "lane_dense_layout", {"block_q": 128, "block_kv": 128, **ROWS}),
    ("topk", 1, "lane_dense_layout", {}), ("topk", 2, "lane_dense_layout", {}),
]


@pytest.mark.parametrize(("name", "shape_index", "lever_id", "parent"), VERIFIED)
def test_a_lever_kernel_computes_the_reference_in_interpret_mode(
        name: str, shape_index: int, lever_id: str, parent: dict[str, int]) -> None:
    facts = _facts(name)
    base = dataclasses.replace(variety.default_spec(facts, {}, _chip()), **parent)
    got = variants(facts.kernel_class, base, lever_id, LeverContext(facts, _chip()))
    assert not isinstance(got, NotApplicable), got
    out, want = _run(facts, got[0], name, shape_index)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("also", [{}, {"hoist_q": True}, {"accumulate": "output"}, {"heads_per_block": 2},
                                  {"kv_in_one_block": True}, {"exp": "exp2", "normalize": "reciprocal"}])
def test_seq_on_the_lanes_computes_the_reference_beside_other_levers(also: dict[str, Any]) -> None:
    """Both (head_dim, seq) variants, (kv, q) and (q, kv) scores, with a KV tail (200 over
    128-wide blocks) under the causal mask, and with the levers that touch the same code."""
    facts = _facts("causal_attention")
    base = dataclasses.replace(variety.default_spec(facts, {}, _chip()), block_q=128, block_kv=128,
                               heads_per_block=1, **ROWS)
    got = variants("attention", base, "lane_dense_layout", LeverContext(facts, _chip()))
    assert not isinstance(got, NotApplicable), got
    assert {(s.operands, s.layout) for s in got} == {("transposed", "transposed"), ("transposed", "rows")}
    for spec in got:
        spec = dataclasses.replace(spec, **also)
        if spec.accumulate == "output" and spec.layout != spec.operands:
            continue  # the accumulator lever refuses it: (q, d) is not the output block's shape
        out, want = _run(facts, spec, "causal_attention", 1)
        np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "parent"), [("causal_attention", {}), ("gqa_attention", {}),
                                              ("causal_attention", {**ROWS, "heads_per_block": 1})])
def test_a_causal_staircase_skips_the_diagonal_blocks_upper_half(
        name: str, parent: dict[str, Any], tmp_path: Path) -> None:
    """block_skipping on a causal kernel: square blocks whose diagonal one runs as q sub-tiles
    that each read only the keys they see. It computes the reference at the tuning point (a
    1024 sequence: the unseen shapes are too short for a staircase), and the model prices it
    below its parent, which computes the whole diagonal block."""
    from tools import api

    facts = _facts(name)
    base = dataclasses.replace(variety.default_spec(facts, {}, _chip()), **parent)
    got = variants("attention", base, "block_skipping", LeverContext(facts, _chip()))
    assert not isinstance(got, NotApplicable), got
    stair = got[0]
    assert stair.stair_tile and stair.block_q == stair.block_kv >= 2 * stair.stair_tile
    out, want = _run(facts, stair, name, 0)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
    prices = []
    for label, spec in (("parent", dataclasses.replace(base, block_q=stair.block_q,
                                                       block_kv=stair.block_kv)), ("stair", stair)):
        path = tmp_path / f"{label}.py"
        path.write_text(_render(facts, spec, name))
        prices.append(api.estimate(TASKS / f"{name}.py", path).latency_s)
    assert prices[1] < prices[0] * 0.95, prices


def test_block_skipping_says_why_a_kernel_has_no_staircase() -> None:
    facts = _facts("attention")
    base = variety.default_spec(facts, {}, _chip())
    got = variants("attention", base, "block_skipping", LeverContext(facts, _chip()))
    assert isinstance(got, NotApplicable) and "no mask" in got.reason
    causal = _facts("causal_attention")
    mixed = dataclasses.replace(variety.default_spec(causal, {}, _chip()), layout="rows")
    got = variants("attention", mixed, "block_skipping", LeverContext(causal, _chip()))
    assert isinstance(got, NotApplicable) and "layout" in got.reason


def test_seq_on_the_lanes_and_the_output_accumulator_say_when_they_do_not_apply() -> None:
    facts = _facts("gqa_attention")
    base = dataclasses.replace(variety.default_spec(facts, {}, _chip()), **ROWS)
    transposed = dataclasses.replace(base, operands="transposed")
    got = variants("attention", transposed, "lane_dense_layout", LeverContext(facts, _chip()))
    assert isinstance(got, NotApplicable) and "already" in got.reason
    refused = variants("attention", dataclasses.replace(base, layout="transposed"), "accumulator",
                       LeverContext(facts, _chip()))
    assert isinstance(refused, NotApplicable) and "output block" in refused.reason


NARROW_TASK = '''
import jax
import jax.numpy as jnp

NAME = "narrow_softmax"
SHAPES = [(512, 16), (200, 16)]


def reference(x, w):
    return jax.nn.softmax(x * w, axis=-1), jnp.sum(x, axis=-1, keepdims=True)


def make_inputs(key, shape_index=0):
    kx, kw = jax.random.split(key)
    rows, width = SHAPES[shape_index]
    return jax.random.normal(kx, (rows, width)), jax.random.normal(kw, (width,))
'''


@pytest.mark.parametrize("shape_index", [0, 1])
def test_narrow_row_arrays_as_width_by_rows_blocks_compute_the_reference(
        tmp_path: Path, shape_index: int) -> None:
    """A narrow input and two narrow outputs go as (width, rows) blocks (a row count that is
    no multiple of 128 too); the weight without a row axis stays one whole block."""
    from jax.experimental.pallas import tpu as pltpu

    from tools.api import load_task

    path = tmp_path / "narrow_softmax.py"
    path.write_text(NARROW_TASK)
    facts = classify_task(path)
    base = variety.default_spec(facts, {}, _chip())
    got = variants(facts.kernel_class, base, "lane_dense_layout", LeverContext(facts, _chip()))
    assert not isinstance(got, NotApplicable), got
    (spec,) = got
    source = _render(facts, spec, "narrow_softmax")
    assert "_IN_T = (True, False)" in source and "_OUT_T = (True, True)" in source
    namespace: dict[str, Any] = {"__name__": "candidate"}
    exec(compile(source, "narrow_softmax", "exec"), namespace)
    task = load_task(path)
    args = task.make_inputs(0, shape_index)
    with pltpu.force_tpu_interpret_mode():
        got_out = namespace["build"]()(*args)
    for out, want in zip(got_out, task.reference(*args), strict=True):
        np.testing.assert_allclose(np.asarray(out), np.asarray(want), rtol=2e-5, atol=2e-5)
    again = variants(facts.kernel_class, spec, "lane_dense_layout", LeverContext(facts, _chip()))
    assert isinstance(again, NotApplicable) and "already" in again.reason


def test_rendered_kernels_are_lint_clean(tmp_path: Path) -> None:
    """Issue 18 item 7: a generated winner failed `ruff check .` (UP034)."""
    paths = []
    for name in ("matmul_bias_gelu", "attention", "causal_attention", "rmsnorm", "layernorm", "gelu"):
        facts = _facts(name)
        base = variety.default_spec(facts, {}, _chip())
        specs = [base]
        for lever_id in REGISTRY[facts.kernel_class]:
            got = variants(facts.kernel_class, base, lever_id, LeverContext(facts, _chip()))
            specs += [] if isinstance(got, NotApplicable) else got[:1]
        for n, spec in enumerate(specs):
            path = tmp_path / f"{name}_{n}.py"
            path.write_text(_render(facts, spec, name))
            paths.append(str(path))
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--config",
                           str(ROOT / "pyproject.toml"), *paths], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]


def _plan(name: str, hint: str, seed: int, parent: dict[str, Any] | None = None) -> dict[str, Any]:
    facts = _facts(name)
    ctx = {"chip": _chip(), "seed": seed, "hint": hint, "parent": parent, "failures": []}
    return planner.choose(facts, ctx)


def _hint(lever_id: str, kernel_class: str) -> str:
    from searchpolicies.common import hint

    return hint([lever_id], kernel_class)


@pytest.mark.parametrize("name", SPEC_TASKS)
def test_distinct_hints_and_seeds_give_distinct_specs_until_exhausted(name: str) -> None:
    facts = _facts(name)
    c = facts.kernel_class
    root = _plan(name, "", 0)
    parent_spec = variety.spec_of(facts, root["spec"], root["params"], _chip())
    seen: dict[str, str] = {}
    for lever_id in _catalogue_ids(c):
        hint = _hint(lever_id, c)
        first = _plan(name, hint, 0, parent={"plan": "", "config": root["params"]})
        if lever_id in first["not_applicable"]:  # said why; the seed's pick is another lever's
            continue
        for seed in range(6):
            decision = _plan(name, hint, seed, parent={"plan": "", "config": root["params"]})
            spec = variety.spec_of(facts, decision["spec"], decision["params"], _chip())
            assert spec != parent_spec
            exhausted = any("exhausted" in e for e in decision["evidence"])
            key = repr(spec)
            assert key not in seen or exhausted, (lever_id, seed, seen.get(key))
            seen.setdefault(key, f"{lever_id}/{seed}")


def test_a_hinted_lever_that_does_not_apply_says_why_and_costs_no_candidate() -> None:
    """The reason is recorded and the expansion still writes a kernel: a lever the policy chose
    blind (it sees the graph, not the class) must not spend a node on nothing."""
    hint = _hint("block_skipping", "matmul")
    decision = _plan("matmul_bias_gelu", hint, 3, parent={"plan": "", "config": {}})
    assert not decision["no_gain"] and "dense" in decision["not_applicable"]["block_skipping"]
    assert "block_skipping" not in decision["levers"]
    assert any("does not apply here" in e for e in decision["evidence"])
    text = planner.plan_text(_facts("matmul_bias_gelu"), decision, {"chip": _chip()}, "matmul_bias_gelu")
    assert "block_skipping" in text and "Stop, writing no candidate" not in text


def test_a_kernel_priced_no_faster_sends_the_next_iteration_past_its_changes() -> None:
    """Iteration 1 of a node wrote the hinted lever with one more; the judge priced it no faster
    than the parent. Iteration 2 does not write a kernel made of a subset of those changes (the
    hinted lever alone): the judge saw them together and they did not pay."""
    name, facts = "attention", _facts("attention")
    hint, parent = _hint("accumulator", "attention"), {"plan": "", "config": {}}
    base = variety.spec_of(facts, _plan(name, "", 0)["spec"], {}, _chip())

    def spec(decision: dict[str, Any]) -> Any:
        return variety.spec_of(facts, decision["spec"], {}, _chip())

    def within(s: Any, failed: Any) -> bool:
        knobs = [f.name for f in dataclasses.fields(s) if f.name != "levers"]
        return all(getattr(s, k) in (getattr(base, k), getattr(failed, k)) for k in knobs)

    seeds = range(6)
    first = {seed: _plan(name, hint, seed, parent=parent) for seed in seeds}
    failed_seed = next(seed for seed in seeds if sum(
        getattr(spec(first[seed]), f.name) != getattr(base, f.name)
        for f in dataclasses.fields(base) if f.name != "levers") >= 2)
    failed = first[failed_seed]
    assert any(within(spec(first[seed]), spec(failed)) for seed in seeds if seed != failed_seed)
    text = planner.plan_text(facts, failed, {"chip": _chip()}, name)
    for seed in range(4):  # the seeds that pick among the variants not spent (there are more)
        ctx = {"chip": _chip(), "seed": seed, "hint": hint, "parent": parent, "written_plans": [text],
               "failures": [{"iteration": 1, "phase": "price", "error": "not faster", "plan": text}]}
        decision = planner.choose(facts, ctx)
        assert not within(spec(decision), spec(failed)), (seed, decision["evidence"])
        assert any("moved last" in e for e in decision["evidence"])


def test_a_parents_bound_puts_the_levers_that_relieve_it_first() -> None:
    """A memory-bound parent: a hinted lever that only relieves compute (accumulator) is first
    combined with one that can lower memory time; the same hint on a compute-bound parent
    starts with the lever alone."""
    from searchpolicies.levers import lever

    hint = _hint("accumulator", "attention")
    picks = {}
    for bound in ("memory", "compute"):
        profile = {"bound": bound, "grid_steps": 8, "achieved_bandwidth_fraction": 0.5, "speedup": 1.2,
                   "measured_on": "simulated"}
        decision = _plan("attention", hint, 0, parent={"plan": "", "config": {}, "profile": profile})
        picks[bound] = [i for i in decision["levers"] if i not in planner.FIXED_LEVERS["attention"]]
    assert picks["compute"] == ["accumulator"]
    assert picks["memory"][0] == "accumulator" and len(picks["memory"]) == 2
    assert "memory" in lever(picks["memory"][1]).relieves


@pytest.mark.parametrize("name", ["topk", "gqa_attention"])
def test_xla_ops_around_the_parents_kernels_put_the_layout_lever_first(name: str) -> None:
    """A parent whose profile spends a quarter of its time in XLA's ops around the kernel (its
    relayout copies): the first variant an unhinted child writes reads the arrays as XLA keeps
    them, whatever bound the kernel itself has; with the ops a small share, it is not first."""
    root = _plan(name, "", 0)
    if name == "gqa_attention":  # a parent that reads (seq, head_dim) blocks
        root = {**root, "spec": {**root["spec"], **ROWS}}
    parent = {"plan": "", "config": {}, "spec": root["spec"]}
    picks = {}
    for outside in (2.5e-6, 0.5e-6):
        profile = {"bound": "overhead", "grid_steps": 4, "achieved_bandwidth_fraction": 0.2,
                   "speedup": 0.9, "measured_on": "simulated", "latency_s": 10e-6,
                   "outside_ops_s": outside}
        plan = planner.plan_text(_facts(name), root, {"chip": _chip()}, name)
        decision = _plan(name, "", 0, parent={**parent, "plan": plan, "profile": profile})  # variant 0
        picks[outside] = decision["lever"]
    assert picks[2.5e-6] == "lane_dense_layout"
    assert picks[0.5e-6] != "lane_dense_layout"


def test_plans_and_kernels_replay_byte_for_byte() -> None:
    from agents.llm.offline.author import candidate_source

    facts = _facts("attention")
    for seed in (0, 1001, 2001):
        a = _plan("attention", _hint("head_packing", "attention"), seed, parent={"plan": "", "config": {}})
        b = _plan("attention", _hint("head_packing", "attention"), seed, parent={"plan": "", "config": {}})
        assert a == b
        assert (candidate_source(facts, a["params"], "attention", _chip(), None, a["spec"])
                == candidate_source(facts, b["params"], "attention", _chip(), None, b["spec"]))


def test_sibling_seeds_map_to_consecutive_variants() -> None:
    """Seeds are run*1000+ordinal per expansion and *1000+iteration per step: siblings must not
    fold onto one variant under a small modulus."""
    assert [seed_index((0 * 1000 + ordinal) * 1000 + 1) for ordinal in (1, 2, 3)] == [2, 3, 4]
    assert seed_index(7) == 7


def test_the_offline_answer_records_the_seed_it_drew_with() -> None:
    import asyncio

    from agents.llm.base import LlmRequest
    from agents.llm.offline import OfflineProvider

    ctx = {"task_path": str(TASKS / "gelu.py"), "task_name": "gelu", "chip": _chip(), "seed": 2001,
           "parent": None, "failures": [], "hint": ""}
    request = LlmRequest(agent="test", purpose="plan", prompt="-", context=ctx, seed=2001)
    response = asyncio.run(OfflineProvider().complete(request))
    assert response.seed == 2001 and response.temperature is None


@pytest.mark.slow
@pytest.mark.parametrize(("name", "lever_id"), [("softmax", "transcendentals"),
                                                ("rmsnorm", "single_buffer_invariants")])
def test_a_lever_kernel_passes_the_verifier(name: str, lever_id: str, tmp_path: Path) -> None:
    """Through the Mosaic lowering too (interpret mode alone missed a multiply written
    without its `out_dtype` parameter, which the TPU lowering rule requires)."""
    from tools.api import evaluate, freeze_suite, load_task

    facts = _facts(name)
    base = variety.default_spec(facts, {}, _chip())
    got = variants(facts.kernel_class, base, lever_id, LeverContext(facts, _chip()))
    assert not isinstance(got, NotApplicable), got
    candidate = tmp_path / f"{name}_{lever_id}.py"
    candidate.write_text(_render(facts, got[0], name))
    suite = freeze_suite(load_task(TASKS / f"{name}.py"), seeds=(0, 1))
    verdict = evaluate(TASKS / f"{name}.py", candidate, suite=suite)
    assert verdict.verdict == "pass", (verdict.reasons, [d.message for d in verdict.diagnostics][:3])


@pytest.mark.parametrize("name", SPEC_TASKS)
def test_a_child_of_a_tuned_parent_never_writes_the_parents_code_again(name: str) -> None:
    """The parent's code was written from its plan's spec; its tuned configuration moved the
    blocks. A child whose variant moves them back would write the parent's code again (a
    candidate spent on a kernel already judged), so that spec is no variant."""
    facts = _facts(name)
    root = _plan(name, "", 0)
    written = variety.spec_of(facts, root["spec"], root["params"], _chip())
    plan = planner.plan_text(facts, root, {"chip": _chip()}, name)
    for knob in root["params"]:
        tuned = {**root["params"], knob: root["params"][knob] * 2}
        for seed in range(1001, 1009):
            child = _plan(name, "", seed, parent={"plan": plan, "config": tuned})
            if child["no_gain"]:
                continue
            spec = variety.spec_of(facts, child["spec"], child["params"], _chip())
            assert spec != written, (knob, seed, child["evidence"][-3:])


@pytest.mark.parametrize("name", SPEC_TASKS)
def test_no_two_nodes_of_a_run_write_one_spec_until_the_space_is_exhausted(name: str) -> None:
    """Siblings of one parent under every hint (some not applicable here) and a few seeds: each
    is told the plans the run wrote before it, so none writes a spec another node wrote, across
    hints too (a sibling whose hinted lever does not apply falls back on the whole space)."""
    facts = _facts(name)
    c = facts.kernel_class
    root = _plan(name, "", 0)
    parent = {"plan": planner.plan_text(facts, root, {"chip": _chip()}, name), "config": root["params"]}
    written: list[str] = [parent["plan"]]
    seen = {repr(variety.spec_of(facts, root["spec"], {}, _chip())): "root"}
    for ordinal, lever_id in enumerate(_catalogue_ids(c)[:8] * 2, start=1):
        ctx = {"chip": _chip(), "seed": ordinal * 1000 + 1, "hint": _hint(lever_id, c),
               "parent": parent, "failures": [], "written_plans": list(written)}
        decision = planner.choose(facts, ctx)
        if decision["no_gain"]:
            assert "exhausted" in decision.get("stop", ""), decision["evidence"][-2:]
            continue
        spec = repr(variety.spec_of(facts, decision["spec"], {}, _chip()))
        exhausted = any("exhausted" in e for e in decision["evidence"])
        assert spec not in seen or exhausted, (lever_id, ordinal, seen.get(spec), decision["evidence"][-3:])
        seen.setdefault(spec, f"{lever_id}/{ordinal}")
        written.append(planner.plan_text(facts, decision, {"chip": _chip()}, name))


@pytest.mark.parametrize("name", ["grouped_matmul", "paged_attention", "linear_attention"])
def test_block_only_classes_stop_instead_of_writing_a_kernel_again(name: str) -> None:
    """Classes the offline author writes from their block sizes alone: a child under any hint
    either moves the blocks to sizes no node of the run wrote, or stops and says why; it never
    writes a kernel the run already has."""
    facts = _facts(name)
    c = facts.kernel_class
    root = _plan(name, "", 0)
    assert not root["no_gain"]
    parent = {"plan": planner.plan_text(facts, root, {"chip": _chip()}, name), "config": root["params"]}
    written = [parent["plan"]]
    seen = [root["params"]]
    stops = 0
    for ordinal, lever_id in enumerate(["prologue_fusion", "masking", "grid_order", "block_shape"] * 2):
        ctx = {"chip": _chip(), "seed": ordinal, "hint": _hint(lever_id, ""), "parent": parent,
               "failures": [], "written_plans": list(written)}
        decision = planner.choose(facts, ctx)
        if decision["no_gain"]:
            stops += 1
            assert "already wrote" in decision["stop"], decision
            continue
        assert decision["params"] not in seen, (lever_id, ordinal, decision["params"])
        seen.append(decision["params"])
        written.append(planner.plan_text(facts, decision, {"chip": _chip()}, name))
    assert stops, f"{c}: eight children and no stop, so the block space was never exhausted"


def _root_default(facts: TaskFacts) -> Any:
    """The spec a root expansion plans from: the class default at its default blocks."""
    return variety.spec_of(facts, None, planner.default_params(facts, _chip()), _chip())


def _root(facts: TaskFacts, hint: str, seed: int, written: list[str] | None = None) -> dict[str, Any]:
    ctx = {"chip": _chip(), "seed": seed, "hint": hint, "parent": None, "failures": [],
           "written_plans": list(written or [])}
    return planner.choose(facts, ctx)


def test_only_a_runs_first_step_is_marked_first_by_its_seed() -> None:
    """Search steps are `(run * 1000 + ordinal) * 1000 + iteration`, single trajectories
    (auto, HITL) `run * 1000 + iteration`: one step per run is the first."""
    search = {(run, o, i): first_step((run * 1000 + o) * 1000 + i)
              for run in (0, 5) for o in (1, 2, 3) for i in (1, 2)}
    assert [k for k, first in search.items() if first] == [(0, 1, 1), (5, 1, 1)]
    assert [first_step(0 * 1000 + i) for i in (1, 2, 3)] == [True, False, False]
    assert seed_ordinal((5 * 1000 + 3) * 1000 + 2) == 3 and seed_iteration(5_003_002) == 2


@pytest.mark.parametrize("name", SPEC_TASKS)
def test_a_runs_first_expansion_writes_the_class_default_whatever_its_hint(name: str) -> None:
    """A greedy search's first expansion carried a lever hint and wrote a hinted variant
    (matmul_scale_residual: 0.661x simulated) while the class default it never wrote prices
    at 0.944x: the first kernel of a run is the default, every lever measured against it.
    Only the run's first step: a second expansion (or a later iteration of the first) under
    the same hint writes the hinted variant, and so does a first one whose run already has
    the default."""
    facts = _facts(name)
    default = _root_default(facts)
    lctx = LeverContext(facts, _chip())
    lever_id = next(i for i in _catalogue_ids(facts.kernel_class)
                    if not isinstance(variants(facts.kernel_class, default, i, lctx), NotApplicable))
    hint = _hint(lever_id, facts.kernel_class)
    default_plan = ""
    for seed in (1001, 1, 5_001_001):  # search ordinal 1 (run seeds 0 and 5); auto, run seed 0
        first = _root(facts, hint, seed)
        assert first == _root(facts, hint, seed)  # a pure function of (task, plan, hint, seed)
        assert variety.spec_of(facts, first["spec"], {}, _chip()) == default, (seed, first["evidence"][-2:])
        assert lever_id not in first["levers"]
        assert any("first kernel of a run is the class's default" in e for e in first["evidence"])
        default_plan = planner.plan_text(facts, first, {"chip": _chip()}, name)
    for seed, written in ((2001, []), (1002, []), (1001, [default_plan])):
        later = _root(facts, hint, seed, written)
        assert not later["no_gain"], later["evidence"][-2:]
        assert variety.spec_of(facts, later["spec"], {}, _chip()) != default, (seed, later["evidence"][-2:])
        assert lever_id in later["levers"], (seed, later["levers"])


@pytest.mark.parametrize(("path", "lever_id"), [(TASKS / "grouped_matmul.py", "buffering"),
                                                (TASKS / "linear_attention.py", "block_shape"),
                                                (ROOT / "tests/evaltasks/conv2d_nchw_grouped.py", "block_shape"),
                                                (TASKS / "paged_attention.py", "block_shape")])
def test_a_block_only_classs_first_expansion_writes_its_default_blocks(path: Path, lever_id: str) -> None:
    """The same rule for the classes written from their block sizes alone: the hint's block
    move waits for the next step."""
    facts = classify_task(path)
    default = planner.default_params(facts, _chip())
    hint = _hint(lever_id, "")
    first = _root(facts, hint, 1001)
    assert first["params"] == default and not first["no_gain"], first["evidence"][-2:]
    assert any("first kernel of a run is the class's default" in e for e in first["evidence"])
    plan = planner.plan_text(facts, first, {"chip": _chip()}, path.stem)
    for seed, written in ((2001, []), (1001, [plan])):
        later = _root(facts, hint, seed, written)
        assert later["no_gain"] or later["params"] != default, (seed, later["evidence"][-2:])


@pytest.mark.parametrize("path", [TASKS / "grouped_matmul.py", TASKS / "linear_attention.py",
                                  ROOT / "tests/evaltasks/conv2d_nchw_grouped.py",
                                  TASKS / "paged_attention.py"])
def test_block_moves_go_the_way_they_are_named(path: Path) -> None:
    """`smaller_blocks` raised a convolution's 4 images per step to 8: the move rounded every
    knob to a multiple of 8 sublanes, though a count of images (groups, pages) is no sublane
    extent. Smaller never grows a knob and shrinks at least one; bigger never shrinks one."""
    facts = classify_task(path)
    params = planner.default_params(facts, _chip())
    smaller = planner._apply(facts, "smaller_blocks", params, _chip())
    bigger = planner._apply(facts, "bigger_blocks", params, _chip())
    assert all(smaller[k] <= v and bigger[k] >= v for k, v in params.items()), (params, smaller, bigger)
    assert smaller != params or all(v <= knob_floor(k) for k, v in params.items()), (params, smaller)
