"""The runner split: a traced program crosses from the worker (which imports the candidate)
to the runner (which never does) as data, is rebuilt from JAX's own primitives and classes
only, and lowers and runs the same as the original trace. End to end, a worker report forged
with programs gets its programs run, not its outputs believed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import msgspec
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from tools.child import interpret, programs
from tools.correctness.testsuite import build_suite
from tools.inputs.tasks import load_task
from tools.lowered.audit import audit_text
from tools.lowered.compile_check import lower_for_tpu
from tools.sandbox import wire
from tools.sandbox.launcher import Limits
from tools.verification.receipts import check_receipt
from tools.verification.verify import evaluate

ROOT = Path(__file__).resolve().parent.parent


def _built(path: Path, **config):
    spec = importlib.util.spec_from_file_location(f"kg_test_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build(**config)


def _inputs(task: str):
    # the first unseen shape: small, so interpret mode stays fast (matmul's tuning point is 2048 x 8192 x 2048)
    return load_task(ROOT / "tasks" / f"{task}.py").make_inputs(0, 1)


@pytest.mark.parametrize(("task", "config"), [("rmsnorm", {}), ("matmul", {"block_k": 256})])
def test_a_program_round_trips_to_the_same_kernels_and_outputs(task: str, config) -> None:
    inputs = _inputs(task)
    traced = jax.jit(_built(ROOT / "kernels" / f"{task}.py", **config)).trace(*inputs)
    rebuilt = programs.decode(programs.encode(traced.jaxpr))
    again = jax.jit(lambda *a: programs_as_function(rebuilt)(*a)).trace(*inputs)
    before, after = audit_text(lower_for_tpu(traced)), audit_text(lower_for_tpu(again))
    assert before.ok and after.ok and before.kernels == after.kernels == 1
    assert before.kernel_summaries == after.kernel_summaries
    settings = interpret.InterpretSettings(num_cores=1)
    want = interpret.interpreted(traced.jaxpr, settings)(*inputs)
    got = interpret.interpreted(again.jaxpr, settings)(*inputs)
    assert all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(want, got,
                                                                              strict=True))


def programs_as_function(closed):
    return programs.as_function(closed)


# Kernel constructs beyond the shipped kernels: scratch, fori_loop, pl.when, custom_jvp
# functions (relu, gelu), manual DMA with a semaphore, scalar prefetch, Buffered(1), a cost
# estimate, squeezed block dimensions, a bf16 matmul with compiler params.
f32 = jnp.float32
_OUT = jax.ShapeDtypeStruct((256, 256), f32)


def _rows(i):
    return (i, 0)


def _loop_kernel(x_ref, o_ref, acc):
    acc[...] = jnp.zeros_like(acc)

    def body(i, carry):
        acc[...] += jax.nn.relu(x_ref[pl.ds(i * 8, 8), :]).sum(0, keepdims=True)
        return carry + 1

    jax.lax.fori_loop(0, 8, body, 0)

    @pl.when(pl.program_id(0) == 0)
    def _():
        o_ref[...] = jnp.broadcast_to(acc[...], o_ref.shape)

    @pl.when(pl.program_id(0) != 0)
    def _():
        x = x_ref[...]
        o_ref[...] = jnp.where(x > 0.5, jnp.exp(x), jax.nn.gelu(x))


def loop(x):
    return pl.pallas_call(_loop_kernel, out_shape=_OUT, grid=(4,),
                          in_specs=[pl.BlockSpec((64, 256), _rows)],
                          out_specs=pl.BlockSpec((64, 256), _rows),
                          scratch_shapes=[pltpu.VMEM((1, 256), f32)])(x)


def _dma_kernel(x_hbm, o_ref, buf, sem):
    copy = pltpu.make_async_copy(x_hbm.at[pl.ds(pl.program_id(0) * 64, 64), :], buf, sem)
    copy.start()
    copy.wait()
    o_ref[...] = (buf[...] * 2).astype(jnp.bfloat16).astype(f32)


def dma(x):
    return pl.pallas_call(_dma_kernel, out_shape=_OUT, grid=(4,),
                          in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                          out_specs=pl.BlockSpec((64, 256), _rows),
                          scratch_shapes=[pltpu.VMEM((64, 256), f32),
                                          pltpu.SemaphoreType.DMA(())])(x)


def _prefetch_kernel(idx_ref, x_ref, o_ref):
    columns = jax.lax.broadcasted_iota(jnp.int32, o_ref.shape, 1).astype(f32)
    o_ref[...] = x_ref[...] + idx_ref[0].astype(f32) + columns


def pref(x):
    spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(4,),
        in_specs=[pl.BlockSpec((64, 256), lambda i, idx: (idx[i], 0))],
        out_specs=pl.BlockSpec((64, 256), lambda i, idx: (i, 0)))
    return pl.pallas_call(_prefetch_kernel, out_shape=_OUT, grid_spec=spec)(
        jnp.array([3, 1, 2, 0], jnp.int32), x)


def _matmul_kernel(a_ref, b_ref, o_ref):
    o_ref[...] = jnp.dot(a_ref[...].astype(jnp.bfloat16), b_ref[...].astype(jnp.bfloat16),
                         preferred_element_type=f32)


def mm(x):
    params = pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary"),
                                  vmem_limit_bytes=32 << 20)
    return pl.pallas_call(_matmul_kernel, out_shape=_OUT, grid=(2, 2),
                          in_specs=[pl.BlockSpec((128, 256), lambda i, j: (i, 0)),
                                    pl.BlockSpec((256, 128), lambda i, j: (0, j))],
                          out_specs=pl.BlockSpec((128, 128), lambda i, j: (i, j)),
                          compiler_params=params)(x, x)


def _reduce_kernel(x_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = (jnp.max(x, axis=1, keepdims=True) + jnp.sum(x ** 2, axis=1, keepdims=True)
                  + x * jax.lax.rsqrt(2.0))


def buf(x):
    return pl.pallas_call(
        _reduce_kernel, out_shape=_OUT, grid=(4,),
        in_specs=[pl.BlockSpec((64, 256), _rows, pipeline_mode=pl.Buffered(1))],
        out_specs=pl.BlockSpec((64, 256), _rows),
        cost_estimate=pl.CostEstimate(flops=1, transcendentals=0, bytes_accessed=1))(x)


def _double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


def sq(x):
    return pl.pallas_call(_double, out_shape=_OUT, grid=(4, 2),
                          in_specs=[pl.BlockSpec((None, 64, 128), lambda i, j: (0, i, j))],
                          out_specs=pl.BlockSpec((64, 128), lambda i, j: (i, j)))(x[None])


def _precise_kernel(a_ref, b_ref, o_ref):  # parameters that are enums and NamedTuples
    o_ref[...] = jax.lax.dot(a_ref[...], b_ref[...], precision=jax.lax.Precision.HIGHEST,
                             preferred_element_type=f32)


def precise(x):
    return pl.pallas_call(_precise_kernel, out_shape=_OUT, grid=(2, 2),
                          in_specs=[pl.BlockSpec((128, 256), lambda i, j: (i, 0)),
                                    pl.BlockSpec((256, 128), lambda i, j: (0, j))],
                          out_specs=pl.BlockSpec((128, 128), lambda i, j: (i, j)))(x, x)


CONSTRUCTS = {"loop": loop, "dma": dma, "prefetch": pref, "matmul": mm, "buffered": buf,
              "squeezed": sq, "precision": precise}


@pytest.mark.parametrize("name", sorted(CONSTRUCTS))
def test_kernel_constructs_round_trip(name: str) -> None:
    x = jnp.arange(256 * 256, dtype=f32).reshape(256, 256) / 1000.0
    traced = jax.jit(CONSTRUCTS[name]).trace(x)
    rebuilt = programs.decode(programs.encode(traced.jaxpr))
    again = jax.jit(programs_as_function(rebuilt)).trace(x)
    before, after = audit_text(lower_for_tpu(traced)), audit_text(lower_for_tpu(again))
    assert before.ok and after.ok and before.kernel_summaries == after.kernel_summaries
    settings = interpret.InterpretSettings(num_cores=1)
    want = interpret.interpreted(traced.jaxpr, settings)(x)
    got = interpret.interpreted(again.jaxpr, settings)(x)
    assert all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(want, got,
                                                                              strict=True))


def test_a_sub_jaxpr_shared_by_two_calls_round_trips() -> None:
    def twice(x):  # two jnp.where calls share one cached sub-jaxpr object
        return jnp.where(jnp.where(x > 0, x, 0.0) > 1, x, 1.0)

    x = jnp.linspace(-2, 2, 8 * 128, dtype=jnp.float32).reshape(8, 128)
    closed = jax.make_jaxpr(twice)(x)
    back = programs.decode(programs.encode(closed))
    (out,) = jax.core.eval_jaxpr(back.jaxpr, back.consts, x)
    assert np.array_equal(np.asarray(out), np.asarray(twice(x)))


def test_gather_and_convolution_layouts_round_trip() -> None:
    def layouts(x, w):  # GatherDimensionNumbers, GatherScatterMode, ConvDimensionNumbers
        rows = jnp.take(x, jnp.array([3, 0, 2]), axis=0, mode="clip")
        conv = jax.lax.conv_general_dilated(x[None, None], w, (1, 1), "SAME",
                                            dimension_numbers=("NCHW", "OIHW", "NCHW"))
        return rows.sum() + conv.sum()

    x, w = jnp.arange(32.0).reshape(4, 8), jnp.ones((1, 1, 3, 3))
    closed = jax.make_jaxpr(layouts)(x, w)
    back = programs.decode(programs.encode(closed))
    (out,) = jax.core.eval_jaxpr(back.jaxpr, back.consts, x, w)
    assert np.array_equal(np.asarray(out), np.asarray(layouts(x, w)))


def test_only_jax_primitives_and_listed_classes_are_rebuilt() -> None:
    traced = jax.jit(lambda x: jnp.tanh(x) + 1).trace(jax.ShapeDtypeStruct((8,), jnp.float32))
    version, body = msgspec.msgpack.decode(programs.encode(traced.jaxpr))
    body[0]["eqns"][0]["p"] = "my_own_primitive"
    with pytest.raises(programs.ProgramError, match="`my_own_primitive` is not one of JAX's own"):
        programs.decode(msgspec.msgpack.encode([version, body]))
    version, body = msgspec.msgpack.decode(programs.encode(traced.jaxpr))
    body[0]["invars"][0][1] = ["object", "os.system", [["command", "true"]]]
    with pytest.raises(programs.ProgramError):
        programs.decode(msgspec.msgpack.encode([version, body]))
    with pytest.raises(programs.ProgramError, match="not an encoded program"):
        programs.decode(b"\xc1garbage")


def test_a_candidate_primitive_cannot_be_sent() -> None:
    from jax.extend.core import Primitive

    mine = Primitive("layout_hint")
    mine.def_abstract_eval(lambda x: x)
    traced = jax.jit(lambda x: mine.bind(x)).trace(jax.ShapeDtypeStruct((8,), jnp.float32))
    with pytest.raises(programs.ProgramError, match="`layout_hint` is not one of JAX's own"):
        programs.encode(traced.jaxpr)


def test_the_runner_never_loads_candidate_code(monkeypatch) -> None:
    from tools.child import loader, runner

    def refuse(*_args, **_kwargs):
        raise AssertionError("the runner loaded candidate code")

    monkeypatch.setattr(loader, "load_in_child", refuse)
    monkeypatch.setattr(loader, "build_in_child", refuse)
    before = set(sys.modules)
    inputs = _inputs("gelu")
    traced = jax.jit(_built(ROOT / "kernels" / "gelu.py")).trace(*inputs)
    case = wire.CaseRequest("c", wire.wire_arrays(inputs))
    request = wire.EvalRequest(candidate_file="", config={}, order_seed=1,
                               groups=(wire.ShapeGroup(0, 7, (case,)),),
                               multicore_cases=0, second_poison_cases=0)
    answer = runner.run_programs(wire.RunRequest(request, {0: programs.encode(traced.jaxpr)}))
    (group,) = answer.groups
    assert not group.trace_error and group.pallas_calls_in_trace == 1
    assert audit_text(group.stablehlo).ok
    (result,) = group.cases
    assert not result.error and result.outputs
    new = {m for m in set(sys.modules) - before if "candidate" in m}
    assert not new, new


@pytest.mark.slow
def test_a_report_forged_with_a_decoy_program_is_judged_on_what_the_decoy_computes() -> None:
    task = load_task(ROOT / "tests" / "evaltasks" / "rmsnorm_small.py")
    verdict = evaluate(task.path, ROOT / "tests" / "candidates" / "forged_program.py",
                       suite=build_suite(task, seeds=(0,)), limits=Limits(wall_s=120.0))
    assert verdict.verdict == "fail"
    assert any("max-abs error" in r for r in verdict.reasons), verdict.reasons
    assert verdict.audit is not None and verdict.audit.kernels == 1  # the decoy, lowered here
    assert check_receipt(verdict.receipt).ok
