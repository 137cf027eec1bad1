from __future__ import annotations

import pytest

from tools.performance.chips import CHIP_NAMES, UnknownChip, get_chip, jax_tpu_info


@pytest.mark.parametrize("name", CHIP_NAMES)
def test_figures_match_jax_tpu_info(name: str) -> None:
    chip = get_chip(name)
    info = jax_tpu_info(name)
    assert chip.peak_bf16_flops == pytest.approx(info.bf16_ops_per_second, rel=1e-6)
    assert chip.hbm_bytes_per_s == pytest.approx(info.mem_bw_bytes_per_second, rel=1e-6)
    assert chip.vmem_bytes == info.vmem_capacity_bytes
    assert chip.smem_bytes == info.smem_capacity_bytes
    assert chip.mxu_dim == info.mxu_column_size
    assert chip.scoped_vmem_limit_bytes < chip.vmem_bytes


def test_known_values_and_aliases() -> None:
    assert get_chip("sim-tpu-v6e") == get_chip("v6e")
    assert get_chip("v5e").mxu_dim == 128
    assert get_chip("v7x").mxu_dim == 256
    assert get_chip("v5e").scoped_vmem_limit_bytes == 16 * 1024 * 1024
    assert get_chip("v6e").peak_f32_flops == pytest.approx(9.2e14 / 3)
    assert get_chip("v6e").matmul_peak("bfloat16") == 9.2e14
    assert get_chip("v6e").matmul_peak("float32") == pytest.approx(9.2e14 / 3)


def test_unknown_chip_names_the_known_ones() -> None:
    with pytest.raises(UnknownChip, match="v5e, v6e, v7"):
        get_chip("v9")
