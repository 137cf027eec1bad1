"""The offline author's convolution class: recognised from the jaxpr, written as window-tap
matmuls in a Pallas kernel, right in TPU interpret mode for NHWC and NCHW, strides, padding,
dilation, feature groups, 2-D and 3-D, per-image and whole-batch epilogues."""

from __future__ import annotations

from pathlib import Path

import pytest
from offline_kernels import assert_matches_reference, assert_verifies, first_kernel, implemented

from agents.llm.offline import conv
from agents.llm.offline.classify import classify_task

TASKS = Path(__file__).resolve().parents[1] / "evaltasks"
CONV_TASKS = {
    "conv2d_nhwc_strided": {"spatial": 2, "strides": (2, 2), "groups": 1, "per_image": True},
    "conv2d_nchw_grouped": {"spatial": 2, "strides": (1, 1), "groups": 2, "per_image": True},
    "conv3d_ncdhw": {"spatial": 3, "strides": (1, 2, 1), "groups": 1, "per_image": True},
    "conv2d_batchnorm": {"spatial": 2, "strides": (1, 1), "groups": 1, "per_image": False},
    "conv2d_nhwc_batchnorm": {"spatial": 2, "strides": (1, 1), "groups": 1, "per_image": False},
    "conv2d_transposed": {"spatial": 2, "strides": (1, 1), "groups": 1, "per_image": True},
    "conv2d_transposed_scatter": {"spatial": 2, "strides": (1, 1), "groups": 1,
                                  "per_image": True},
}
# the full verifier (a minute each) on one task per layout and on the written-out transposed conv
VERIFIED = sorted(set(CONV_TASKS) - {"conv2d_transposed"})


@pytest.mark.parametrize("name", sorted(CONV_TASKS))
def test_a_convolution_is_its_own_class_with_its_parameters(name: str) -> None:
    facts = classify_task(TASKS / f"{name}.py")
    want = CONV_TASKS[name]
    assert facts.kernel_class == "convolution", facts.reasons
    assert not facts.unsupported
    d = facts.detail
    assert (d["spatial"], d["strides"], d["groups"]) == (want["spatial"], want["strides"], want["groups"])
    assert (d["batch"] is not None) == want["per_image"]


def test_padding_dilation_and_layouts_are_read_from_the_conv() -> None:
    nchw = classify_task(TASKS / "conv2d_nchw_grouped.py").detail
    assert nchw["padding"] == ((2, 2), (1, 1)) and nchw["dilation"] == (2, 2)
    assert nchw["lhs_spec"] == (0, 1, 2, 3) and nchw["rhs_spec"] == (0, 1, 2, 3)
    nhwc = classify_task(TASKS / "conv2d_nhwc_strided.py").detail
    assert nhwc["padding"] == ((1, 2), (1, 1)) and nhwc["lhs_spec"] == (0, 3, 1, 2)


def test_a_transposed_convolution_dilates_its_input_outside_the_kernel() -> None:
    """`lax.conv_transpose` (an input-dilated conv) and JAXBench's written-out form (a strided
    scatter into zeros, a flipped kernel) both become a stride-1 conv on the dilated input:
    the dilation an interior pad, the flip a reverse, both layout work before the kernel."""
    direct = classify_task(TASKS / "conv2d_transposed.py").detail
    assert direct["lhs_dilation"] == (2, 2) and direct["padding"] == ((1, 1), (1, 2))
    assert "LHS_DILATION = (2, 2)" in first_kernel(TASKS / "conv2d_transposed.py")
    scatter = classify_task(TASKS / "conv2d_transposed_scatter.py").detail
    assert scatter["lhs_dilation"] == (1, 1)
    operands = scatter["operands_source"]
    assert "lax.pad(" in operands and "(0, 0, 1), (0, 0, 1)" in operands
    assert "jnp.flip(" in operands and "scatter" not in operands
    assert "iota" not in scatter["epilogue_source"]  # what built the scatter's indices is gone


def test_a_scatter_that_is_not_a_dilation_is_not_read_as_one(tmp_path: Path) -> None:
    task = tmp_path / "conv_scatter_shifted.py"
    task.write_text(
        "import jax\nimport jax.numpy as jnp\nfrom jax import lax\n\n"
        "SHAPES = [(2, 6, 6, 4), (2, 5, 7, 4)]\n\n"
        "def reference(x, w):\n"
        "    n, h, wd, c = x.shape\n"
        "    z = jnp.ones((n, 2 * h, 2 * wd, c), x.dtype)\n"  # ones, not zeros: not a pad
        "    z = z.at[:, ::2, ::2, :].set(x)\n"
        "    return lax.conv_general_dilated(z, w, (1, 1), 'VALID',\n"
        "                                    dimension_numbers=('NHWC', 'HWIO', 'NHWC'))\n\n"
        "def make_inputs(key, shape_index=0):\n"
        "    n, h, w, c = SHAPES[shape_index]\n"
        "    kx, kw = jax.random.split(key)\n"
        "    return (jax.random.normal(kx, (n, h, w, c)), jax.random.normal(kw, (3, 3, c, 8)))\n")
    facts = classify_task(task)
    assert facts.kernel_class != "convolution"
    assert any("not two inputs reached through layout ops" in r for r in facts.reasons)


@pytest.mark.parametrize("name", sorted(CONV_TASKS))
def test_the_kernel_computes_the_reference_in_interpret_mode(name: str) -> None:
    """At the tuning point and the unseen shape, against the reference, with the conv inside
    `pallas_call` (the conv with its epilogue, or the conv and then the epilogue), fused or
    not. The default configuration of a task in VERIFIED is the verifier test's."""
    source = first_kernel(TASKS / f"{name}.py", name)
    assert source.count("pl.pallas_call(") == 3 and "jnp.dot(window, weights" in source
    assert "conv_general_dilated_p" not in source and "lax.conv_general_dilated(" not in source
    if name not in VERIFIED:
        assert_matches_reference(TASKS / f"{name}.py", source, seed=3)
    assert_matches_reference(TASKS / f"{name}.py", source, seed=3, fuse_epilogue=0)
    # asked to fuse where the task does not allow it, the kernel keeps the second kernel
    assert_matches_reference(TASKS / f"{name}.py", source, seed=3, fuse_epilogue=1)


def test_an_epilogue_over_the_whole_batch_runs_in_the_conv_kernel_when_one_block_holds_it(
        ) -> None:
    """A batch norm mixes images: it runs on the conv's output in VMEM when the one block
    holds the whole batch (the default here), and in a kernel of its own on the whole batch
    when the blocks are smaller (the same answer either way)."""
    task = TASKS / "conv2d_nhwc_batchnorm.py"
    source = first_kernel(task)
    assert "FUSABLE = True" in source and "BATCH = None" in source
    assert "'fuse_epilogue': [1, 0]" in source and "block_images: int = 4" in source
    assert "one block of the whole batch" in source.split('"""')[1]
    assert "epilogue_in_conv_kernel" in source.split('"""')[1]
    assert_matches_reference(task, source, seed=11, rtol=1e-4, atol=1e-4)
    assert_matches_reference(task, source, seed=11, block_images=2, rtol=1e-4, atol=1e-4)
    # the NCHW batch norm writes channels-first: its epilogue keeps a kernel of its own
    assert "FUSABLE = False" in first_kernel(TASKS / "conv2d_batchnorm.py")


def test_a_smaller_image_block_gives_the_same_answer() -> None:
    """`block_images` (the TUNABLE) only moves work between grid steps; a block that does not
    divide the batch leaves a partial last step."""
    task = TASKS / "conv2d_nhwc_strided.py"
    source = first_kernel(task)
    assert "TUNABLES = {'block_images'" in source
    for block in (1, 3):
        assert_matches_reference(task, source, seed=5, block_images=block)


def test_packed_taps_fill_the_mxu_depth_and_are_a_tunable() -> None:
    """Few channels: as many taps per matmul as fit one MXU depth, the default; one tap per
    matmul and the whole window are the tuner's other choices."""
    assert conv.packed_taps(8, 9) == 9 and conv.packed_taps(64, 9) == 4
    assert conv.packed_taps(256, 9) == 1 and conv.packed_taps(512, 27) == 1
    assert conv.taps_choices(64, 9) == [4, 1, 9] and conv.taps_choices(300, 9) == [1, 9]
    source = first_kernel(TASKS / "conv2d_nhwc_strided.py")
    assert "'taps_per_dot': [9, 1]" in source and "taps_per_dot: int = 9" in source
    assert "'fuse_epilogue': [1, 0]" in source
    assert "packed_taps" in source.split('"""')[1]


def test_a_block_move_keeps_the_packing_its_parent_was_tuned_to() -> None:
    """A child of a parent the tuner moved to one tap per matmul keeps it as its default (the
    configuration the compile check prices against the parent): a block move changes the
    images per step, not the packing."""
    from agents.llm.offline import planner

    facts = classify_task(TASKS / "conv2d_nhwc_strided.py")
    chip = {"vmem_bytes": 128 * 2**20}
    root = planner.choose(facts, {"chip": chip, "seed": 1, "hint": "", "parent": None, "failures": []})
    plan = planner.plan_text(facts, root, {"chip": chip}, "conv2d_nhwc_strided")
    tuned = {**root["params"], "taps_per_dot": 1, "fuse_epilogue": 1}
    child = planner.choose(facts, {"chip": chip, "seed": 2, "hint": "[lever=block_shape]",
                                   "parent": {"plan": plan, "config": tuned}, "failures": [],
                                   "written_plans": [plan]})
    assert child["params"]["taps_per_dot"] == 1
    assert child["params"]["block_images"] != root["params"]["block_images"]
    source = implemented(TASKS / "conv2d_nhwc_strided.py", child)
    assert "'taps_per_dot': [1, 9]" in source and "taps_per_dot: int = 1" in source


@pytest.mark.parametrize(("name", "taps_per_dot"), [
    ("conv2d_nhwc_strided", 1), ("conv2d_nhwc_strided", 2), ("conv2d_nchw_grouped", 4),
    ("conv3d_ncdhw", 5), ("conv3d_ncdhw", 27)])
def test_any_number_of_taps_per_matmul_gives_the_same_answer(name: str, taps_per_dot: int) -> None:
    """`taps_per_dot` regroups the window's taps into matmuls; a count that does not divide
    the taps leaves a shorter last group."""
    task = TASKS / f"{name}.py"
    assert_matches_reference(task, first_kernel(task), seed=7, taps_per_dot=taps_per_dot)


def test_a_fixers_configuration_packs_no_taps_and_fuses_nothing() -> None:
    """The safer ladder's fixed configurations keep one tap per matmul and the epilogue in a
    kernel of its own: nothing left to fail in a lane concatenation or a fused body."""
    facts = classify_task(TASKS / "conv2d_nhwc_strided.py")
    source = conv.conv_source(facts, {"block_images": 1, "tunables": {"block_images": [1]}},
                              "conv2d_nhwc_strided")
    assert "TUNABLES = {'block_images': [1], 'taps_per_dot': [1], 'fuse_epilogue': [0]}" in source
    levers = source.split('"""')[1]
    assert "packed_taps" not in levers and "epilogue_in_conv_kernel" not in levers


@pytest.mark.slow
@pytest.mark.parametrize("name", VERIFIED)
def test_the_kernel_passes_the_verifier(name: str, tmp_path: Path) -> None:
    """The full verifier: a frozen suite in interpret mode (poisoned memory, unseen shapes),
    the TPU lowering and compile check, and the work inside pallas_call."""
    assert_verifies(TASKS / f"{name}.py", tmp_path)


def test_the_docstring_names_only_the_levers_the_kernel_takes() -> None:
    strided = first_kernel(TASKS / "conv2d_nhwc_strided.py")
    whole_batch = first_kernel(TASKS / "conv2d_batchnorm.py")
    assert "stride_phase_split" in strided and "epilogue_in_conv_kernel" in strided
    assert "epilogue_kernel_per_image_block" not in strided.split('"""')[1]
    assert "stride_phase_split" not in whole_batch
    assert "epilogue_kernel_per_image_block" not in whole_batch


def test_blocks_past_the_default_scoped_vmem_ask_for_a_limit_that_holds_them() -> None:
    """A full-size image per step (JAXBench's 128x128x64 images) needs more than the default
    scoped VMEM: the kernel asks for what its blocks need, up to the chip's cap."""
    import jax.numpy as jnp

    namespace: dict = {"__name__": "candidate"}
    exec(compile(first_kernel(TASKS / "conv2d_nhwc_strided.py"), "conv", "exec"), namespace)
    limit, scoped, cap = namespace["_vmem_limit"], namespace["SCOPED_VMEM"], namespace["VMEM_CAP"]
    assert limit([((4, 72, 8), jnp.float32)]) is None
    image = ((1, 1, 16512, 64), jnp.float32)  # 64 channels take 128 lanes in VMEM: 8.5 MB
    out = ((1, 16128, 128), jnp.float32)  # 8.3 MB, two buffers
    need = (2 * (16512 * 128 + 16128 * 128) * 4 + 16128 * 128 * 4) * 5 // 4
    assert scoped < need < cap and limit([image, out], scratch_bytes=16128 * 128 * 4) == need
    assert limit([((64, 16512, 64), jnp.float32)]) == cap
    # rows and lanes padded to (8, 128) tiles: 8 channels cost what 128 do
    assert limit([((4, 9120, 8), jnp.float32)]) == limit([((4, 9120, 128), jnp.float32)])
    assert limit([((4, 9120, 8), jnp.float32)]) == 2 * 4 * 9120 * 128 * 4 * 5 // 4


# NCHW conv, GELU and a global average pool: one (images, features) output, both narrow
POOLED = '''import jax
import jax.numpy as jnp

SHAPES = [(16, 4, 12, 12), (6, 4, 10, 10)]


def reference(x, w, b):
    y = jax.lax.conv_general_dilated(jnp.transpose(x, (0, 2, 3, 1)), jnp.transpose(w, (2, 3, 1, 0)),
                                     (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return jnp.mean(jax.nn.gelu(y + b), axis=(1, 2))


def make_inputs(key, shape_index=0):
    n, c, h, w = SHAPES[shape_index]
    kx, kw, kb = jax.random.split(key, 3)
    return (jax.random.normal(kx, (n, c, h, w)), jax.random.normal(kw, (8, c, 3, 3)) * 0.2,
            jax.random.normal(kb, (8,)) * 0.1)
'''


def test_a_narrow_pooled_output_of_the_whole_batch_is_written_transposed(tmp_path: Path) -> None:
    """(images, features) with both under the lanes: XLA:TPU keeps it images-minor, so where
    one block holds the batch (a TUNABLE value here) the kernel writes (features, images)
    and the wrapper's transpose back is a bitcast; smaller blocks write it as laid out."""
    task = tmp_path / "pooled.py"
    task.write_text(POOLED)
    assert classify_task(task).kernel_class == "convolution"
    source = first_kernel(task)
    assert "'block_images': [8, 4, 16]" in source and "_lanes_first(shape)" in source
    for block in (16, 4):
        assert_matches_reference(task, source, seed=4, rtol=1e-4, atol=1e-4, block_images=block)
