"""The offline author's GEMM tiles: `pipeline_seconds` agrees with the cost model on the kernel
the author renders, the first kernel at each shipped GEMM tuning point is MXU-bound (its
step's fetches hide behind its step's MXU work), the VMEM limit is raised only where the
blocks need it, and TUNABLES hold no block the tuning point cannot use."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

from agents.llm.offline import matmul, matmul_blocks
from agents.llm.offline.classify import TaskFacts, classify_task
from agents.llm.offline.common import drop_unused_imports, scoped_vmem
from agents.llm.offline.levers import raised_vmem_limit

ROOT = Path(__file__).resolve().parents[2]
GEMMS = ["matmul", "matmul_bias_gelu", "matmul_bias_gelu_bf16", "matmul_scale_residual"]


@functools.cache
def _chip() -> dict[str, Any]:
    from tools.api import chip_figures

    return chip_figures("sim-tpu-v6e")


@functools.cache
def _facts(name: str) -> TaskFacts:
    return classify_task(ROOT / "tasks" / f"{name}.py")


def _priced(name: str, spec: matmul.MatmulSpec) -> float:
    """The cost model's latency of the author's kernel for `spec` at the tuning point."""
    from tools.lowered.compile_check import lower_for_tpu
    from tools.lowered.mosaic import parse_lowered
    from tools.performance.chips import get_chip
    from tools.performance.roofline import estimate_program

    facts = _facts(name)
    source = drop_unused_imports(matmul.render(facts, spec, name))
    namespace: dict[str, Any] = {"__name__": "candidate"}
    exec(compile(source, name, "exec"), namespace)
    args = [jax.ShapeDtypeStruct(a.shape, np.dtype(a.dtype)) for a in facts.args]
    text = lower_for_tpu(jax.jit(namespace["build"]()).trace(*args), chip="v6e")
    return estimate_program(parse_lowered(text), get_chip("v6e")).latency_s


@pytest.mark.parametrize(("name", "blocks"), [
    ("matmul", (1024, 1024, 2048)), ("matmul", (512, 512, 1024)), ("matmul", (2048, 1024, 512)),
    ("matmul_scale_residual", (1024, 1024, 2048)), ("matmul_bias_gelu_bf16", (2048, 1024, 2048)),
])
def test_pipeline_seconds_agree_with_the_cost_model(name: str, blocks: tuple[int, int, int]) -> None:
    facts = _facts(name)
    spec = dataclasses.replace(matmul.default_spec(facts, {}, _chip()), block_m=blocks[0],
                               block_n=blocks[1], block_k=blocks[2])
    planned = matmul_blocks.pipeline_seconds(facts, *blocks, _chip())
    assert planned == pytest.approx(_priced(name, spec), rel=0.01)


@pytest.mark.parametrize("name", GEMMS)
def test_the_first_tile_at_a_shipped_tuning_point_is_mxu_bound(name: str) -> None:
    """Each step's fetches at HBM bandwidth take no longer than its MXU work, and the choice
    beats the tiles the author used to take (512 x 512 x <= 1024)."""
    facts = _facts(name)
    chip = _chip()
    blocks = matmul.default_blocks(facts, chip)
    bm, bn, bk = blocks["block_m"], blocks["block_n"], blocks["block_k"]
    isz = np.dtype(facts.args[0].dtype).itemsize
    bf16 = isz == 2
    mxu_s = 2 * bm * bn * bk / chip["peak_bf16_flops" if bf16 else "peak_f32_flops"]
    assert (bm + bn) * bk * isz / chip["hbm_bytes_per_s"] <= mxu_s, blocks
    old = matmul_blocks.pipeline_seconds(facts, 512, 512, matmul.fit_k(1024, facts.dim_values[facts.detail["k"]]),
                                         chip)
    assert matmul_blocks.pipeline_seconds(facts, bm, bn, bk, chip) < 0.8 * old


def test_the_vmem_limit_is_raised_only_where_the_blocks_need_it() -> None:
    facts = _facts("matmul")
    small = matmul.default_spec(facts, {"block_m": 256, "block_n": 256, "block_k": 512}, _chip())
    assert small.vmem_limit_bytes is None
    large = matmul.default_spec(facts, {}, _chip())
    need = matmul_blocks.footprint(facts, large.block_m, large.block_n, large.block_k)
    assert need > scoped_vmem(_chip()) * 3 // 4
    assert large.vmem_limit_bytes == raised_vmem_limit(_chip()) and need <= large.vmem_limit_bytes * 3 // 4


def test_tunables_leave_out_blocks_the_tuning_point_cannot_use() -> None:
    facts = _facts("matmul_bias_gelu_bf16")  # M = N = K = 4096
    tunables = matmul.matmul_tunables({"block_m": 2048, "block_n": 1024, "block_k": 2048}, facts)
    assert tunables["block_m"] == [2048, 1024]  # 4096 x 1024 is past the tile cap
    assert tunables["block_n"] == [1024, 512]  # 2048 x 2048 too
    assert tunables["block_k"] == [2048, 1024]  # 2048 x 1024 x 4096 needs more VMEM than 3/4 of 96 MiB
    assert matmul.matmul_tunables({"block_m": 4096, "block_n": 256, "block_k": 4096}, facts)["block_k"] == [4096, 2048]
    # without facts (a plan's own blocks), every half and double as before
    assert matmul.matmul_tunables({"block_m": 2048, "block_n": 1024, "block_k": 2048})["block_m"] == [2048, 1024, 4096]
