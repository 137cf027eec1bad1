"""The offline provider: classification from the jaxpr, profile-driven levers, the fixer and
the inputs writer (the shipped tasks' classes and kernels: tests/test_task_suite.py)."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from agents.llm.base import NO_GAIN_MARKER, LlmRequest, ProviderError, get_provider
from agents.llm.offline import OfflineProvider
from agents.llm.offline.classify import classify_task
from agents.llm.parsing import check_plan, extract_code, fix_summary, next_levers
from searchpolicies.levers import catalogue

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "tasks"


def _chip() -> dict[str, Any]:
    from tools.api import chip_figures

    return chip_figures("sim-tpu-v6e")


def _ctx(task: Path, **extra: Any) -> dict[str, Any]:
    base = {"task_path": str(task), "task_name": task.stem, "target": "sim-tpu-v6e", "chip": _chip(),
            "iteration": 0, "seed": 0, "parent": None, "failures": [], "hint": "",
            "knowledge": [], "baseline_s": 1e-5, "feedback": ""}
    return {**base, **extra}


def _ask(purpose: str, context: dict[str, Any], seed: int = 0) -> str:
    provider = OfflineProvider(seed=seed, model="ignored")
    request = LlmRequest(agent="test", purpose=purpose, prompt="(prose the offline author ignores)",
                         context=context, seed=seed)
    response = asyncio.run(provider.complete(request))
    assert response.model == "offline-author-1"
    return response.text


def _plan_json(plan: str) -> dict[str, Any]:
    match = re.search(r"^```json\n(.*?)^```", plan, re.M | re.S)
    assert match, plan
    return json.loads(match.group(1))


def _write_task(path: Path, body: str, shapes: str) -> Path:
    path.write_text(
        "import jax\nimport jax.numpy as jnp\n\n"
        f"SHAPES = {shapes}\n\n"
        f"{body}\n\n"
        "def make_inputs(key, shape_index=0):\n"
        "    shapes = SHAPES[shape_index]\n"
        "    keys = jax.random.split(key, len(shapes))\n"
        "    return tuple(jax.random.normal(k, s, jnp.float32) for k, s in zip(keys, shapes))\n")
    return path


# ----------------------------------------------------------------------------- (a) classes


def test_renamed_copy_keeps_its_class(tmp_path: Path) -> None:
    """The class comes from the jaxpr: softmax saved as `gelu.py` named "matmul" is rowwise."""
    copy = tmp_path / "gelu.py"
    shutil.copy(TASKS / "softmax.py", copy)
    copy.write_text(copy.read_text().replace('NAME = "softmax"', 'NAME = "matmul"'))
    assert classify_task(copy).kernel_class == "rowwise"
    attn = tmp_path / "layernorm.py"
    shutil.copy(TASKS / "causal_attention.py", attn)
    assert classify_task(attn).kernel_class == "attention"
    assert classify_task(attn).detail["causal"] is True


@pytest.mark.parametrize(("body", "shapes", "expected"), [
    ("def reference(x, y):\n    return jnp.maximum(x, 0.0) * jnp.tanh(y)",
     "[((256, 256), (256, 256)), ((96, 128), (96, 128))]", "elementwise"),
    ("def reference(x):\n    return x - jax.scipy.special.logsumexp(x, axis=-1, keepdims=True)",
     "[((256, 256),), ((96, 384),)]", "rowwise"),
    ("def reference(a, b, r):\n    return jax.nn.relu(a @ b) + r",
     "[((128, 256), (256, 384), (128, 384)), ((64, 128), (128, 256), (64, 256))]",
     "matmul_epilogue"),
    ("def reference(x):\n    return jnp.max(x, axis=1)",
     "[((64, 32, 128),), ((40, 16, 256),)]", "rows_generic"),
    ("def reference(x):\n    return x / jnp.sum(x)",
     "[((64, 128),), ((32, 256),)]", "single_block"),
    ("def reference(x):\n    return x @ x.T",
     "[((64, 128),), ((32, 256),)]", "single_block"),
])
def test_small_variants(tmp_path: Path, body: str, shapes: str, expected: str) -> None:
    task = _write_task(tmp_path / "variant.py", body, shapes)
    assert classify_task(task).kernel_class == expected


def test_an_epilogue_input_of_one_element_keeps_the_matmul_class(tmp_path: Path) -> None:
    """A (1,)-shaped epilogue input (JAXBench 48k's bias) is one block that never moves."""
    from offline_kernels import assert_matches_reference, first_kernel

    body = ("def reference(a, b, bias, shift):\n"
            "    y = a @ b + bias\n"
            "    return (y + shift) * jax.nn.sigmoid(y + shift)")
    shapes = "[((128, 256), (256, 384), (384,), (1,)), ((64, 128), (128, 256), (256,), (1,))]"
    task = _write_task(tmp_path / "matmul_shift.py", body, shapes)
    assert classify_task(task).kernel_class == "matmul_epilogue"
    source = first_kernel(task)
    assert "_EPILOGUE_KINDS = ('n', '1')" in source
    assert_matches_reference(task, source, seed=0, rtol=1e-4, atol=1e-4)


def test_a_task_with_no_class_and_no_body_is_refused_with_its_reason(tmp_path: Path) -> None:
    body = ("def reference(x):\n"
            "    step = lambda c, r: (0.5 * c + r, c)\n"
            "    return jax.lax.scan(step, jnp.zeros(x.shape[1:], x.dtype), x)[1]")
    task = _write_task(tmp_path / "decaying_sum.py", body, "[((64, 128),), ((40, 256),)]")
    facts = classify_task(task)
    assert facts.kernel_class == "single_block" and "kernel body" in facts.unsupported
    for purpose in ("plan", "implement", "fix"):
        with pytest.raises(ProviderError, match=r"^unsupported: the reference cannot be written out as a kernel body: .*; and no other kernel class fits \("):
            _ask(purpose, {**_ctx(task), "plan": "", "code": "", "diagnostics": []})


@pytest.mark.parametrize(("body", "shapes"), [
    ("def reference(x, i):\n    return jnp.take_along_axis(x, i[:, None], axis=-1)[:, 0]",
     [((64, 256), (64,)), ((40, 384), (40,))]),
    ("def reference(x):\n    return jax.lax.top_k(x, 4)",
     [((64, 256),), ((40, 384),)]),
    ("def reference(x):\n    return jnp.where(jnp.isfinite(1.0 / x), x, 0.0)",
     [((64, 256),), ((40, 384),)]),
])
def test_rewritten_primitives_compute_what_the_originals_do(body: str, shapes: list[Any]) -> None:
    """take_along_axis, a constant index, top_k and is_finite are written as other ops; run
    eagerly, the written body must agree with the reference exactly."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import export

    from agents.llm.offline.jaxpr_source import NARY_HELPER, flatten, function_source

    namespace: dict[str, Any] = {"jax": jax, "jnp": jnp}
    exec(compile(body, "reference.py", "exec"), namespace)
    reference = namespace["reference"]
    rows, width = export.symbolic_shape("R, W", constraints=("R >= 16", "W >= 256"))
    specs = [jax.ShapeDtypeStruct((rows, width), jnp.float32)]
    if len(shapes[0]) == 2:
        specs.append(jax.ShapeDtypeStruct((rows,), jnp.int32))
    invars, eqns, outvars, consts = flatten(jax.make_jaxpr(reference)(*specs))
    source = function_source("_body", eqns, invars, outvars, ["R", "W"], consts)
    assert not {"gather", "top_k", "is_finite"} & {
        line.split("lax.")[1].split("_p.bind")[0] for line in source.splitlines() if "_p.bind" in line}
    module: dict[str, Any] = {"jax": jax, "jnp": jnp, "np": np, "lax": jax.lax}
    exec(compile(NARY_HELPER + "\n" + source, "body.py", "exec"), module)
    for case in shapes:
        key = jax.random.key(len(case[0]))
        x = jax.random.normal(key, case[0], jnp.float32).at[0, :3].set(0.0)
        args = [x] if len(case) == 1 else [x, jax.random.randint(key, case[1], 0, case[0][1])]
        want = jax.tree.leaves(reference(*args))
        got = module["_body"](*args, R=case[0][0], W=case[0][1])
        for w, g in zip(want, got, strict=True):
            assert g.dtype == w.dtype and np.array_equal(np.asarray(g), np.asarray(w))


# ----------------------------------------------------------------------------- (b) kernels
# Every shipped task's class and its kernel's verdict: tests/test_task_suite.py.


# ----------------------------------------------------------------------------- (c) planner


def _profile(**overrides: Any) -> dict[str, Any]:
    base = {"target": "sim-tpu-v6e", "measured_on": "simulated", "source": "cost model",
            "latency_s": 2e-5, "baseline_s": 2e-5, "speedup": 1.0, "hbm_bytes": 8_000_000,
            "flops": 4_000_000, "achieved_bandwidth_fraction": 0.4, "achieved_compute_fraction": 0.01,
            "bound": "memory", "grid_steps": 16, "vmem_bytes": 1_000_000,
            "vmem_limit_bytes": 33_554_432, "kernels": [], "suggestions": []}
    return {**base, **overrides}


def _parent(code: str, plan: str, config: dict[str, Any], profile: dict[str, Any]) -> dict[str, Any]:
    return {"code": code, "plan": plan, "profile": profile, "config": config,
            "speedup": profile["speedup"]}


def test_many_memory_bound_steps_give_bigger_blocks() -> None:
    task = TASKS / "rmsnorm.py"
    parent = _parent("", "", {"block_rows": 128}, _profile(
        grid_steps=16, suggestions=["k: 16 grid steps at 0.50 us each; Use larger blocks (fewer steps)."]))
    plan = check_plan(_ask("plan", _ctx(task, parent=parent, iteration=1)))
    spec = _plan_json(plan)
    assert "bigger_blocks" in spec["levers"]
    assert spec["params"]["block_rows"] > 128
    code = extract_code(_ask("implement", {**_ctx(task, parent=parent), "plan": plan}))
    assert f"block_rows: int = {spec['params']['block_rows']}" in code


def test_failed_lever_is_not_repeated() -> None:
    task = TASKS / "rmsnorm.py"
    parent = _parent("", "", {"block_rows": 128}, _profile(grid_steps=16))
    failures = [{"iteration": 1, "phase": "compile", "error": "bigger_blocks: VMEM limit exceeded"}]
    spec = _plan_json(_ask("plan", _ctx(task, parent=parent, failures=failures, iteration=2)))
    assert "bigger_blocks" not in spec["levers"]
    assert spec["params"]["block_rows"] <= 128


def test_hint_steers_the_lever() -> None:
    task = TASKS / "matmul_bias_gelu.py"
    parent = _parent("", "", {"block_m": 128, "block_n": 128, "block_k": 256},
                     _profile(bound="compute", grid_steps=8))
    spec = _plan_json(_ask("plan", _ctx(task, parent=parent, hint="try full_k")))
    assert spec["levers"][-1] == "full_k"
    assert spec["params"]["block_k"] == 4096  # the whole K of the tuning point


def test_no_gain_marker_when_baseline_is_at_the_roofline() -> None:
    task = TASKS / "gelu.py"
    parent = _parent("", "", {"block_rows": 512}, _profile(
        achieved_bandwidth_fraction=0.95, speedup=1.0, grid_steps=2))
    plan = check_plan(_ask("plan", _ctx(task, parent=parent)))
    assert NO_GAIN_MARKER in plan
    assert "95%" in plan
    busy = _parent("", "", {"block_rows": 512}, _profile(achieved_bandwidth_fraction=0.5))
    assert NO_GAIN_MARKER not in _ask("plan", _ctx(task, parent=busy))


def test_plans_are_deterministic_per_seed() -> None:
    task = TASKS / "softmax.py"
    first = _ask("plan", _ctx(task, seed=0), seed=0)
    assert first == _ask("plan", _ctx(task, seed=0), seed=0)
    # 2001: a search's second expansion (0 and 1 are a run's first step: the class default).
    # It leaves out what the run wrote (the first plan), or, planning beside a sibling that
    # has written nothing yet, steps past the choice that sibling may be taking.
    after = _ctx(task, seed=2001, written_plans=[first])
    other = _ask("plan", after, seed=2001)
    assert other == _ask("plan", after, seed=2001)
    assert _plan_json(first)["params"] != _plan_json(other)["params"]
    beside = _ask("plan", _ctx(task, seed=2001, unseen_siblings=1), seed=2001)
    assert _plan_json(first)["params"] != _plan_json(beside)["params"]
    # alone and with nothing written, a second expansion takes the evidence's first choice
    assert _plan_json(_ask("plan", _ctx(task, seed=2001), seed=2001))["params"] == \
        _plan_json(first)["params"]


def test_a_plan_without_json_falls_back_to_defaults() -> None:
    task = TASKS / "layernorm.py"
    plan = "## Analysis\nx\n## Strategy\nrow blocks\n## Memory layout and tiling\n-\n" \
           "## TPU levers\n-\n## Grid and BlockSpecs\n-\n## Expected effect\n-\n"
    code = extract_code(_ask("implement", {**_ctx(task), "plan": plan}))
    assert "TUNABLES" in code and "pltpu.CompilerParams" in code


def test_registry_builds_the_offline_provider() -> None:
    provider = get_provider("offline", seed=3, temperature=0.7)
    assert isinstance(provider, OfflineProvider) and provider.name == "offline"


# ----------------------------------------------------------------------------- (d) fixer


@pytest.mark.parametrize("name", ["rmsnorm.py", "matmul.py", "attention.py"])
def test_fixer_returns_different_parseable_code(name: str) -> None:
    task = TASKS / name
    code = extract_code(_ask("implement", {**_ctx(task), "plan": _ask("plan", _ctx(task))}))
    seen = {code}
    history: list[dict[str, Any]] = []
    for round_ in (1, 2, 3):
        diagnostics = [{"message": "Mosaic lowering failed: unsupported shape", "phase": "compile",
                        "line": 40, "hint": ""}]
        answer = _ask("fix", {**_ctx(task), "code": code, "diagnostics": diagnostics,
                              "history": history, "round": round_, "api_lookup": ""})
        summary = fix_summary(answer)
        assert set(summary) == {"error", "cause", "fix"}
        fixed = extract_code(answer)
        assert fixed not in seen
        seen.add(fixed)
        history.append({"round": round_, **summary})
        code = fixed


# ----------------------------------------------------------------------------- (e) inputs


def test_inputs_writes_a_make_inputs_that_runs() -> None:
    import jax

    signature = {"args": [
        {"name": "x", "dtype": "float32", "shapes": [[64, 128], [40, 256]]},
        {"name": "ids", "dtype": "int32", "shapes": [[64], [40]]},
        {"name": "key", "dtype": "bfloat16", "shapes": [[128], [256]]},
    ]}
    answer = _ask("inputs", {**_ctx(TASKS / "gelu.py"), "reference_source": "def reference(x, ids, key): ...",
                             "signature": signature})
    namespace: dict[str, Any] = {}
    exec(compile(extract_code(answer), "make_inputs.py", "exec"), namespace)
    for index, rows in ((0, 64), (1, 40)):
        x, ids, k = namespace["make_inputs"](jax.random.key(0), shape_index=index)
        assert x.shape == (rows, 128 if index == 0 else 256) and str(x.dtype) == "float32"
        assert ids.shape == (rows,) and str(ids.dtype) == "int32"
        assert str(k.dtype) == "bfloat16"
    again = namespace["make_inputs"](jax.random.key(0), shape_index=0)
    assert bool((again[0] == namespace["make_inputs"](jax.random.key(0), 0)[0]).all())


def test_a_plan_names_the_levers_that_change_its_kernel_work_removing_first() -> None:
    known = [lv.id for lv in catalogue()]
    causal = next_levers(check_plan(_ask("plan", _ctx(TASKS / "causal_attention.py"))), known)
    assert causal[:2] == ["block_skipping", "head_packing"]  # the diagonal's masked half first
    full = next_levers(check_plan(_ask("plan", _ctx(TASKS / "attention.py"))), known)
    assert "block_skipping" not in full and full[0] == "head_packing"  # no mask: nothing to skip
    # a lever already in the kernel is not named again
    assert "transcendentals" not in next_levers(check_plan(_ask("plan", _ctx(
        TASKS / "causal_attention.py", hint="[lever=transcendentals class=attention]",
        seed=2001, written_plans=[_ask("plan", _ctx(TASKS / "causal_attention.py"))]),
        seed=2001)), known)


def test_a_variant_the_writer_cannot_write_is_left_out_of_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lever combination with no code path costs the plan nothing: it never reaches the
    implementer, whose refusal would end the run."""
    from agents.llm.offline import levers as registry

    task = TASKS / "causal_attention.py"
    first = _ask("plan", _ctx(task))
    stair = _ask("plan", _ctx(task, hint="[lever=block_skipping class=attention]", seed=2001,
                              written_plans=[first]), seed=2001)
    assert _plan_json(stair)["spec"]["stair_tile"]
    # the whole KV in one block on a staircase: the body would read keys it never named
    monkeypatch.setitem(registry.REGISTRY["attention"], "reduction_in_one_block",
                        lambda spec, ctx: [registry.changed(spec, kv_in_one_block=True)])
    parent = {"code": "", "plan": stair, "profile": {}, "config": {}, "speedup": 1.0}
    plan = _ask("plan", _ctx(task, hint="[lever=reduction_in_one_block class=attention]",
                             seed=3001, written_plans=[first, stair], parent=parent), seed=3001)
    assert "the author cannot write their kernel (reduction_in_one_block" in plan
    # nor does the staircase's own plan, asked again under the patch, name it as a next lever
    again = _ask("plan", _ctx(task, hint="[lever=block_skipping class=attention]", seed=2001,
                              written_plans=[first]), seed=2001)
    assert "reduction_in_one_block" in next_levers(first, [lv.id for lv in catalogue()])
    assert "reduction_in_one_block" not in next_levers(again, [lv.id for lv in catalogue()])
    assert not _plan_json(plan)["spec"]["kv_in_one_block"]
    assert "def build" in extract_code(_ask("implement", {**_ctx(task), "plan": plan}))


def test_a_variant_carrying_every_change_of_a_wrong_answer_goes_last() -> None:
    task = TASKS / "attention.py"
    first = _ask("plan", _ctx(task))

    def lever(hint: str, **extra: Any) -> str:
        return _ask("plan", _ctx(task, hint=f"[lever={hint} class=attention]", seed=2001, **extra),
                    seed=2001)

    both = lever("transcendentals+precision", written_plans=[first])
    alone = lever("transcendentals", written_plans=[first])
    assert _plan_json(both)["spec"]["mxu_dtype"] != _plan_json(alone)["spec"]["mxu_dtype"]
    # with exp2 alone written, the next variant of the hint is exp2 with bf16 operands ...
    after = dict(written_plans=[first, alone])
    assert _plan_json(lever("transcendentals", **after))["spec"] == _plan_json(both)["spec"]
    # ... unless the trajectory saw that pair give a wrong answer
    wrong = [{"iteration": 2, "phase": "test", "error": "max-abs error exceeds", "plan": both}]
    plan = lever("transcendentals", **after, failures=wrong)
    assert _plan_json(plan)["spec"]["mxu_dtype"] == _plan_json(alone)["spec"]["mxu_dtype"]
    assert "each makes every change of a kernel this trajectory saw give a wrong answer" in plan

