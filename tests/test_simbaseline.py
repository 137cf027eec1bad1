"""The simulated XLA baseline: which program it is priced from, said wherever it is shown.

With libtpu, XLA:TPU's program; without it (found as the code finds it: no importable
``libtpu``, or ``KG_TPU_COMPILER=0``), the host program, with the reason recorded. An op the
pricer has no rule for never prices XLA:TPU's program below its work: that program is set
aside and the fallback names the op.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path

import jax
import jax.numpy as jnp
import msgspec
import pytest
from nats.aio.client import Client as NATS

from agents.base import AgentContext, Workspace
from agents.baseline import BaselineAgent
from agents.commands import MeasureBaseline
from eventstore.codec import decode_event, encode_event
from eventstore.events import BaselineMeasured
from tools import api
from tools.lowered import tpu_compiler
from tools.performance import simbaseline
from tools.performance.baseline import DotShape, dot_seconds, reference_cost
from tools.performance.chips import get_chip
from tools.performance.simbaseline import (
    HOST_PROGRAM,
    XLA_TPU_PROGRAM,
    choose,
    simulated_baseline,
)
from tools.performance.xla_tpu import XlaTpuBaseline, price_program

ROOT = Path(__file__).resolve().parent.parent
RMSNORM = ROOT / "tests" / "evaltasks" / "rmsnorm_small.py"
needs_libtpu = pytest.mark.skipif(
    not tpu_compiler.available(),
    reason="libtpu is not installed (pip install -e '.[tpu-compiler]'): no XLA:TPU program")


@pytest.fixture(autouse=True)
def _fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Nothing from an earlier test's baseline or compile is reused."""
    monkeypatch.setenv(tpu_compiler.CACHE_ENV, str(tmp_path / "tpu-compile"))
    tpu_compiler.CACHE._memory.clear()
    simbaseline.clear_cache()
    yield
    simbaseline.clear_cache()
    tpu_compiler.libtpu_version.cache_clear()


@pytest.fixture
def no_libtpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """libtpu cannot be imported (as where the extra is not installed)."""
    monkeypatch.setitem(sys.modules, "libtpu", None)  # find_spec("libtpu") is then None
    tpu_compiler.libtpu_version.cache_clear()
    assert tpu_compiler.libtpu_version() is None


def _rmsnorm(x, w):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * w


ARGS = [jax.ShapeDtypeStruct((1024, 512), jnp.float32), jax.ShapeDtypeStruct((512,), jnp.float32)]


def test_without_libtpu_the_host_program_is_priced_and_says_why(no_libtpu: None) -> None:
    found = simulated_baseline(_rmsnorm, ARGS, get_chip("v6e"))
    assert found.priced_from == "host" and found.label == HOST_PROGRAM
    assert found.fallback == "libtpu is not installed" and found.xla_tpu is None
    assert found.latency_s == found.host.latency_s > 0
    assert found.method == f"{HOST_PROGRAM} on v6e (libtpu is not installed)"
    baseline = api.measure_baseline(RMSNORM)
    assert baseline.priced_from == HOST_PROGRAM and "(libtpu is not installed)" in baseline.method


def test_switched_off_the_host_program_is_priced_and_says_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tpu_compiler.SWITCH_ENV, "0")
    found = simulated_baseline(_rmsnorm, ARGS, get_chip("v6e"))
    assert found.priced_from == "host" and found.fallback == "KG_TPU_COMPILER=0"


@needs_libtpu
@pytest.mark.slow
def test_with_libtpu_the_baseline_is_xla_tpus_program_and_the_cache_knows_which(
        monkeypatch: pytest.MonkeyPatch) -> None:
    chip = get_chip("v6e")
    found = simulated_baseline(_rmsnorm, ARGS, chip, key="rmsnorm")
    assert found.priced_from == "xla-tpu" and found.label == XLA_TPU_PROGRAM
    assert found.fallback == "" and found.xla_tpu is not None
    assert found.latency_s == found.xla_tpu["latency_s"] != found.host.latency_s
    assert simulated_baseline(_rmsnorm, ARGS, chip, key="rmsnorm") is found  # cached
    monkeypatch.setenv(tpu_compiler.SWITCH_ENV, "0")  # another pricing: another key
    assert simulated_baseline(_rmsnorm, ARGS, chip, key="rmsnorm").priced_from == "host"


_HLO = """HloModule m

ENTRY %main (p: f32[512,1024]) -> (f32[512,8], s32[512,8]) {
  %p = f32[512,1024]{1,0:T(8,128)} parameter(0)
  %copy = f32[512,1024]{0,1:T(8,128)S(1)} copy(%p), backend_config={"window_config":{"estimated_cycles":"6640"}}
  ROOT %reduce = (f32[512,8]{0,1:T(8,128)}, s32[512,8]{0,1:T(8,128)}) custom-call(%copy), custom_call_target="PartialReduce", backend_config={"flag_configs":[]}
}
"""


def test_an_op_without_a_pricing_rule_is_named_and_its_program_is_not_the_baseline() -> None:
    """A custom call with no rule (XLA:TPU's PartialReduce, from `lax.approx_max_k`) comes
    with no compiler cycles: the pricer names it rather than price it at a launch, and the
    program's price (which leaves it out) is set aside for the host program's, the fallback
    naming the op."""
    chip = get_chip("v6e")
    price = price_program(_HLO, chip)
    assert price.unpriced == ["custom-call reduce (PartialReduce)"]
    (copy, reduce) = price.ops
    # the compiler's cycles are kept beside; the copy (a relayout: lanes become sublanes)
    # costs the cross-lane unit's time, under its HBM bytes: its price is those and a launch
    assert copy.cycles == 6640 and copy.compiler_compute_s == pytest.approx(6640 / chip.clock_hz)
    assert copy.compute_s == pytest.approx(
        512 * 1024 * 4 / 4096 * chip.xlu_cycles("transpose", 32) / chip.clock_hz)
    assert copy.bound == "memory"
    assert copy.latency_s == pytest.approx(512 * 1024 * 4 / chip.hbm_bytes_per_s + 1e-6)
    assert reduce.bound == "unpriced" and reduce.latency_s == 0.0
    assert price.latency_s == copy.latency_s  # what is left out is not summed as free
    found = XlaTpuBaseline(price.latency_s, price.compute_s, price.memory_s, price.overhead_s,
                           None, price.ops, "v6e", "libtpu test", 0.0, unpriced=price.unpriced)
    cost = reference_cost(lambda v: jax.lax.approx_max_k(v, 8)[0],
                          [jax.ShapeDtypeStruct((512, 1024), jnp.float32)])
    chosen = choose(cost, chip, found)
    assert chosen.priced_from == "host" and chosen.latency_s == chosen.host.latency_s
    assert chosen.fallback == ("XLA:TPU's program has work the pricer has no rule for: "
                               "custom-call reduce (PartialReduce)")
    whole = choose(cost, chip, msgspec.structs.replace(found, unpriced=[]))
    assert whole.priced_from == "xla-tpu" and whole.latency_s == price.latency_s


@needs_libtpu
@pytest.mark.slow
def test_an_unpriced_op_sends_the_baseline_to_the_host_program_naming_it() -> None:
    """approx_max_k: XLA:TPU runs a PartialReduce custom call the compiler gives no cycles
    for. Its price without that op is not the baseline; the host program is, and the fallback
    says why."""
    chip = get_chip("v6e")
    x = jax.ShapeDtypeStruct((512, 1024), jnp.float32)
    found = simulated_baseline(lambda v: jax.lax.approx_max_k(v, 8)[0], [x], chip)
    assert found.priced_from == "host" and found.latency_s == found.host.latency_s
    assert "no rule for" in found.fallback and "(PartialReduce)" in found.fallback
    assert found.xla_tpu is not None and found.xla_tpu["unpriced"]


def test_baseline_measured_carries_the_label_and_old_logs_still_decode(
        tmp_path: Path, no_libtpu: None) -> None:
    cmd = MeasureBaseline.create(run_id="run-b", node_id="root", task_sha256="0" * 64,
                                 task_file="rmsnorm_small.py", target_name="sim-tpu-v6e")
    workspace = Workspace(tmp_path / "work")
    Workspace.write_once(workspace.task_file(cmd.task_sha256, cmd.task_file),
                         RMSNORM.read_bytes())
    agent = BaselineAgent(NATS(), workspace=workspace)

    async def first() -> BaselineMeasured:
        async for event in agent._run(AgentContext(agent, cmd)):
            assert isinstance(event, BaselineMeasured)
            return event
        raise AssertionError("no event")

    event = asyncio.run(first())
    assert event.measured_on == "simulated" and event.priced_from == HOST_PROGRAM
    assert event.method.endswith("(libtpu is not installed)")
    assert decode_event(encode_event(event)) == event
    old = encode_event(BaselineMeasured.create(
        run_id="r", producer="p", node_id="root", latency_s=1e-5, measured_on="simulated",
        target="sim-tpu-v6e")).replace(b',"priced_from":""', b"")
    assert b"priced_from" not in old and decode_event(old).priced_from == ""


@pytest.mark.slow
def test_the_receipt_says_which_program_the_baseline_was_priced_from(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tools.correctness.testsuite import build_suite
    from tools.inputs.tasks import load_task
    from tools.sandbox.launcher import Limits

    task = load_task(RMSNORM)
    suite = build_suite(task, seeds=(0,))
    verdict = api.evaluate(RMSNORM, ROOT / "kernels" / "rmsnorm.py", config={"block_rows": 64},
                           suite=suite, limits=Limits(wall_s=120.0, memory_bytes=4 << 30))
    assert verdict.verdict == "pass", verdict.reasons
    method = verdict.receipt["measurement"]["baseline_method"]
    if tpu_compiler.available():
        assert method == f"{XLA_TPU_PROGRAM} on v6e"
    else:
        assert method.startswith(f"{HOST_PROGRAM} on v6e (")
    assert verdict.measurement.breakdown["baseline_priced_from"] in method


def test_bench_says_which_program_its_runs_baselines_were_priced_from() -> None:
    from eventstore.events import RunRequested
    from kernelgraph.bench import summarise

    def run(run_id: str, priced_from: str) -> list:
        return [RunRequested.create(run_id=run_id, producer="t", node_id="root",
                                    task_name=run_id, task_sha256="h", policy="beam",
                                    target="sim-tpu-v6e", provider="offline"),
                BaselineMeasured.create(run_id=run_id, producer="t", node_id="root",
                                        latency_s=1e-5, measured_on="simulated",
                                        target="sim-tpu-v6e", priced_from=priced_from)]

    both = summarise({"a": run("a", XLA_TPU_PROGRAM), "b": run("b", HOST_PROGRAM)})
    assert both["beam"]["baseline_priced_from"] == sorted([XLA_TPU_PROGRAM, HOST_PROGRAM])
    old = summarise({"c": run("c", "")})  # a log from before the field: its origin only
    assert old["beam"]["baseline_priced_from"] == ["simulated"]


def _fusion_hlo(body: str, cycles: int, params: str = "f32[1024,1024]") -> str:
    """One fusion over ``params`` whose fused computation is ``body`` (its ROOT last)."""
    args = ", ".join(f"%p{i}" for i in range(len(params.split(";"))))
    decls = "\n".join(f"  %p{i} = {t}{{1,0:T(8,128)}} parameter({i})"
                      for i, t in enumerate(params.split(";")))
    inner = "\n".join(f"  %q{i} = {t}{{1,0:T(8,128)}} parameter({i})"
                       for i, t in enumerate(params.split(";")))
    return f"""HloModule m

%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}}

%fused (q0: f32[1024,1024]) -> f32[1024,1024] {{
{inner}
{body}
}}

ENTRY %main (p0: f32[1024,1024]) -> f32[1024,1024] {{
{decls}
  ROOT %f = f32[1024,1024]{{1,0:T(8,128)}} fusion({args}), kind=kLoop, calls=%fused, backend_config={{"window_config":{{"estimated_cycles":"{cycles}"}}}}
}}
"""


_EXP = """  %m = f32[1024,1024]{1,0:T(8,128)} multiply(%q0, %q0)
  %c = f32[] constant(2)
  %two = f32[1024,1024]{1,0} broadcast(%c), dimensions={}
  %twice = f32[1024,1024]{1,0} convert(%two)
  %d = f32[1024,1024]{1,0} add(%m, %twice)
  ROOT %e = f32[1024,1024]{1,0:T(8,128)} exponential(%d)"""


def test_the_baseline_never_takes_the_compilers_cycles() -> None:
    """A fusion whose compiler estimate is enormous (or tiny) is priced by the kernel model's
    rules: a multiply and an add (one VPU op per element each; the converted broadcast
    constant is folded), an exp (one EUP and one VPU op per element), the larger of that and
    its HBM bytes, plus a launch. The compiler's figure is kept beside, and the baseline the
    speedup divides by is the model's price whatever it says."""
    chip = get_chip("v6e")
    n = 1024 * 1024
    compute = max(3 * n / chip.vpu_ops_per_s, n / chip.transcendentals_per_s)
    memory = 2 * 4 * n / chip.hbm_bytes_per_s
    model = max(compute, memory) + 1e-6
    huge, tiny = (price_program(_fusion_hlo(_EXP, c), chip) for c in (10**9, 1))
    for price in (huge, tiny):
        assert price.unpriced == []
        (op,) = price.ops
        assert (op.vpu_ops, op.transcendentals) == (3 * n, n)
        assert op.compute_s == pytest.approx(compute) and price.latency_s == pytest.approx(model)
    assert huge.compiler_latency_s == pytest.approx(10**9 / chip.clock_hz + 1e-6)
    cost = reference_cost(lambda v: jnp.exp(v * v + 2), [jax.ShapeDtypeStruct((1024, 1024),
                                                                             jnp.float32)])
    found = XlaTpuBaseline(huge.latency_s, huge.compute_s, huge.memory_s, huge.overhead_s,
                           None, huge.ops, "v6e", "libtpu test", 0.0,
                           compiler_latency_s=huge.compiler_latency_s)
    chosen = choose(cost, chip, found)
    assert chosen.priced_from == "xla-tpu" and chosen.latency_s == pytest.approx(model)
    assert chosen.latency_s < huge.compiler_latency_s / 100


def test_reductions_and_dots_are_priced_as_the_kernel_model_prices_them() -> None:
    """A reduction costs one VPU op per input element, a pooling window one per element of
    each window, `is-finite` two (abs, compare); a convolution (XLA:TPU's form of a
    dot) takes the reference's dot priced on the MXU as the host baseline prices it; one
    without a dot shape given, or an op with no rule (a custom call it does not know), is
    named, never free; a scatter is its combiner once per element of the updates."""
    chip = get_chip("v6e")
    reduce = """  %z = f32[] constant(0)
  ROOT %r = f32[1024]{0} reduce(%q0, %z), dimensions={1}, to_apply=%add"""
    (op,) = price_program(_fusion_hlo(reduce, 5), chip).ops
    assert op.vpu_ops == 1024 * 1024 and op.transcendentals == 0
    conv = """  %q1 = f32[1024,1024]{1,0} parameter(1)
  ROOT %v = f32[1024,1024]{1,0} convolution(%q0, %q1), dim_labels=bf_io->bf"""
    hlo = _fusion_hlo(conv, 10**9, "f32[1024,1024];f32[1024,1024]")
    dot = DotShape(1, 1024, 1024, 1024, "float32")
    (op,) = price_program(hlo, chip, [dot]).ops
    assert op.mxu_s == pytest.approx(dot_seconds(dot, chip)) and op.compute_s == op.mxu_s
    assert op.latency_s == pytest.approx(max(op.mxu_s, op.memory_s) + 1e-6)
    assert price_program(hlo, chip).unpriced == [
        "fusion f (a dot or convolution with no shape given)"]
    finite = """  ROOT %k = pred[1024,1024]{1,0} is-finite(%q0)"""
    (op,) = price_program(_fusion_hlo(finite, 5), chip).ops
    assert op.vpu_ops == 2 * 1024 * 1024  # |x| < inf, as a kernel writes it
    pool = """  %z = f32[] constant(0)
  ROOT %w = f32[512,1024]{1,0} reduce-window(%q0, %z), window={size=2x1 stride=2x1}, to_apply=%add"""
    pooled = price_program(_fusion_hlo(pool, 5), chip)
    assert pooled.unpriced == [] and pooled.ops[0].vpu_ops == 512 * 1024 * 2
    # XLA:TPU's row max broadcast back to the row: every window spans the row, so it is a
    # reduction (one op per input element), not 2047 taps per output
    row_max = """  %z = f32[] constant(-inf)
  ROOT %w = f32[1024,1024]{1,0} reduce-window(%q0, %z), window={size=1x2047 pad=0_0x1023_1023}, to_apply=%add"""
    spanned = price_program(_fusion_hlo(row_max, 5), chip)
    assert spanned.unpriced == [] and spanned.ops[0].vpu_ops == 1024 * 1024
    sliding = row_max.replace("size=1x2047 pad=0_0x1023_1023", "size=1x2047 pad=0_0x1022_1024")
    assert price_program(_fusion_hlo(sliding, 5), chip).ops[0].vpu_ops == 1024 * 1024 * 2047
    scatter = """  %i = s32[8,1]{1,0} constant({{0},{1},{2},{3},{4},{5},{6},{7}})
  %u = f32[8,1024]{1,0} broadcast(%z), dimensions={}
  ROOT %s = f32[1024,1024]{1,0} scatter(%q0, %i, %u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add"""
    price = price_program(_fusion_hlo("  %z = f32[] constant(0)\n" + scatter, 100), chip)
    assert price.unpriced == [] and price.ops[0].vpu_ops == 8 * 1024  # the add per update
    mystery = '  ROOT %s = f32[1024,1024]{1,0} custom-call(%q0), custom_call_target="Mystery"'
    price = price_program(_fusion_hlo(mystery, 100), chip)
    assert price.unpriced == ["fusion f (custom-call s (Mystery))"]
    assert price.ops[0].bound == "unpriced"


_COPY = """HloModule m

%fused (q0: f32[1024,1024], q1: f32[1024,1024]) -> f32[1024,1024] {
  %q0 = f32[1024,1024]{1,0:T(8,128)} parameter(0)
  %q1 = f32[1024,1024]{1,0:T(8,128)S(1)} parameter(1)
  ROOT %m = f32[1024,1024]{1,0:T(8,128)} multiply(%q0, %q1)
}

ENTRY %main (p0: f32[1024,1024], p1: f32[1024,1024]) -> f32[1024,1024] {
  %p0 = f32[1024,1024]{1,0:T(8,128)} parameter(0)
  %p1 = f32[1024,1024]{1,0:T(8,128)} parameter(1)
  %cs = (f32[1024,1024]{1,0:T(8,128)S(1)}, f32[1024,1024]{1,0:T(8,128)}, u32[]{:S(2)}) copy-start(%p1)
  %cd = f32[1024,1024]{1,0:T(8,128)S(1)} copy-done(%cs)
  ROOT %f = f32[1024,1024]{1,0:T(8,128)} fusion(%p0, %cd), kind=kLoop, calls=%fused
}
"""


def test_an_async_copy_overlaps_the_ops_but_shares_their_hbm() -> None:
    """The copy of p1 into VMEM runs beside the fusion, but both move bytes through one HBM:
    the program takes all its HBM bytes at bandwidth plus the launch, not the fusion's alone."""
    chip = get_chip("v6e")
    price = price_program(_COPY, chip)
    copy, fusion = price.ops
    assert copy.opcode == "copy-start" and copy.hbm_bytes == 4 << 20
    assert fusion.hbm_bytes == 8 << 20 and fusion.vpu_ops == 1 << 20
    assert fusion.latency_s == pytest.approx((8 << 20) / chip.hbm_bytes_per_s + 1e-6)
    assert price.latency_s == pytest.approx((12 << 20) / chip.hbm_bytes_per_s + 1e-6)


_SLICES = """HloModule m

%fused (q0: f32[1024,1024], q1: f32[512,1024]) -> f32[512,1024] {
  %q0 = f32[1024,1024]{1,0:T(8,128)} parameter(0)
  %q1 = f32[512,1024]{1,0:T(8,128)S(1)} parameter(1)
  %top = f32[512,1024]{1,0:T(8,128)} slice(%q0), slice={[0:512], [0:1024]}
  ROOT %m = f32[512,1024]{1,0:T(8,128)} multiply(%top, %q1)
}

ENTRY %main (p0: f32[1024,1024], p1: f32[4096,1024]) -> f32[512,1024] {
  %p0 = f32[1024,1024]{1,0:T(8,128)} parameter(0)
  %p1 = f32[4096,1024]{1,0:T(8,128)} parameter(1)
  %ss = ((f32[4096,1024]{1,0:T(8,128)}), f32[256,1024]{1,0:T(8,128)S(1)}, s32[]{:S(2)}) slice-start(%p1), slice={[0:256], [0:1024]}
  %ss.1 = ((f32[4096,1024]{1,0:T(8,128)}), f32[256,1024]{1,0:T(8,128)S(1)}, s32[]{:S(2)}) slice-start(%p1), slice={[256:512], [0:1024]}
  %sd = f32[256,1024]{1,0:T(8,128)S(1)} slice-done(%ss)
  %sd.1 = f32[256,1024]{1,0:T(8,128)S(1)} slice-done(%ss.1)
  %both = f32[512,1024]{1,0:T(8,128)S(1)} custom-call(%sd, %sd.1), custom_call_target="ConcatBitcast"
  ROOT %f = f32[512,1024]{1,0:T(8,128)} fusion(%p0, %both), kind=kLoop, calls=%fused
}
"""


def test_an_async_slice_moves_its_slice_and_reading_slices_as_one_array_is_free() -> None:
    """XLA:TPU brings two quarter-megabyte slices of a 16 MiB array into VMEM (slice-start)
    and reads them as one array (ConcatBitcast): the slices' bytes cross HBM, not the
    array's, and the array read in VMEM moves nothing and launches nothing."""
    chip = get_chip("v6e")
    price = price_program(_SLICES, chip)
    assert price.unpriced == []
    first, second, fusion = price.ops
    assert (first.opcode, second.opcode) == ("slice-start", "slice-start")
    assert first.hbm_bytes == second.hbm_bytes == 256 * 1024 * 4
    assert fusion.hbm_bytes == (4 << 20) + (2 << 20)  # p0 read whole, the result written
    assert price.latency_s == pytest.approx((8 << 20) / chip.hbm_bytes_per_s + 1e-6)
    in_hbm = _SLICES.replace("f32[512,1024]{1,0:T(8,128)S(1)} custom-call",
                             "f32[512,1024]{1,0:T(8,128)} custom-call")
    moved = price_program(in_hbm, chip)
    (concat,) = [op for op in moved.ops if op.name == "both"]
    assert concat.hbm_bytes == 2 << 20 and concat.compute_s == 0.0  # written to HBM
