"""One --scale for JAXBench tasks: only entries that size an input (or bound an integer
input's values) are scaled, scaled configs that do not hold are dropped with a note, and
a scale the task cannot take is refused with the reason."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelgraph.cli import app, load_commands
from tools.api import scaled_task
from tools.correctness.testsuite import build_suite
from tools.inputs.scaling import parse_scales
from tools.inputs.tasks import TaskError, load_task

load_commands()

ROPE = """
import jax, jax.numpy as jnp

CONFIG = {'name': 'toy_rope', 'batch': 2, 'seq_len': 64, 'emb_dim': 128,
          'rope_theta': 10000, 'max_len': 64, 'num_groups': 32}

def create_inputs(dtype=jnp.float32):
    B, S, D = CONFIG['batch'], CONFIG['seq_len'], CONFIG['emb_dim']
    x = jax.random.normal(jax.random.key(0), (B, S, D), dtype)
    lengths = jnp.full((B,), LENGTH, jnp.int32)
    return x, lengths

def workload(x, lengths):
    B, S, D = x.shape
    freqs = 1.0 / CONFIG['rope_theta'] ** (jnp.arange(0, D, 2) / D)
    angles = jnp.arange(S)[:, None] * freqs[None, :]
    rotated = x * jnp.concatenate([jnp.cos(angles), jnp.sin(angles)], axis=-1)
    mask = jnp.arange(S)[None, :] < lengths[:, None]
    G = CONFIG['num_groups']
    grouped = rotated.reshape(B, S, G, D // G).mean(-1)
    return jnp.where(mask[..., None], jnp.repeat(grouped, D // G, axis=-1), 0.0) + x
"""


def _write(tmp_path: Path, text: str, folder: str = "toy") -> Path:
    path = tmp_path / folder / "baseline.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def test_only_sizes_and_indices_are_scaled_and_failing_scales_are_dropped(
    tmp_path: Path,
) -> None:
    path = _write(tmp_path, ROPE.replace("LENGTH", "CONFIG['max_len']"))
    task = load_task(path, scales=(1.0, 0.5, 0.125))
    # rope_theta is not a size; num_groups only the workload reads; max_len bounds lengths
    assert set(task.config_sizes) == {"seq_len", "emb_dim", "max_len"}
    assert [s["scale"] for s in task.shapes[:2]] == [1.0, 0.5]
    half = task._configs[1]
    assert (half["seq_len"], half["emb_dim"], half["max_len"]) == (32, 64, 32)
    assert (half["rope_theta"], half["num_groups"]) == (10000, 32)
    x, lengths = task.input_specs(1)
    assert x.shape == (2, 32, 64) and lengths.shape == (2,)
    # at 0.125 emb_dim is 16: 16 // 32 groups is 0 and the workload does not trace
    assert any(n.startswith("scale 0.125 dropped:") for n in task.notes)
    assert task.scales == (1.0, 0.5)
    suite = build_suite(task, seeds=(0,), unseen=False, probes=False)
    assert suite.scales == (1.0, 0.5) and suite.summary()["scales"] == [1.0, 0.5]
    assert any("scale 0.125 dropped" in n for n in suite.notes)


def test_an_index_that_does_not_follow_config_drops_the_scale_or_refuses_it(
    tmp_path: Path,
) -> None:
    path = _write(tmp_path, ROPE.replace("LENGTH", "64"))  # lengths fixed at 64
    task = load_task(path, scales=(1.0, 0.5))
    assert len([s for s in task.shapes
                if not str(s.get("scale")).startswith("unaligned")]) == 1
    assert any("integer input 1 keeps values up to 64" in n for n in task.notes)
    with pytest.raises(TaskError, match=r"tuning point .* integer input 1 keeps values"):
        load_task(path, scales=(0.5,))


FIXED = """
import jax, jax.numpy as jnp
CONFIG = {'name': 'fixed', 'batch_size': 32, 'channels': 64}
SHAPE = (32, 64, 16, 16)
def create_inputs(dtype=jnp.float32):
    return (jax.random.normal(jax.random.key(0), SHAPE, dtype),)
def workload(x):
    return jnp.tanh(x) * 2.0
"""


def test_a_task_whose_inputs_no_entry_sizes_runs_at_its_own_sizes_only(tmp_path: Path) -> None:
    path = _write(tmp_path, FIXED, "fixed")
    task = load_task(path)  # the default scales all give the same inputs: one shape
    assert [s.get("scale") for s in task.shapes] == [1.0]
    assert any("no CONFIG entry sizes an input" in n for n in task.notes)
    with pytest.raises(TaskError, match="--scale cannot change this task's sizes"):
        scaled_task(path, "0.5")


LITERAL = """
import jax, jax.numpy as jnp
CONFIG = {'name': 'literal', 'batch_size': 256, 'in_features': 512, 'out_features': 512}
def create_inputs(dtype=jnp.float32):
    key = jax.random.key(0)
    ka, kb = jax.random.split(jax.random.key(0xBADC0DE))
    height = width = 32
    x = jax.random.uniform(key, (256, 512), dtype=dtype)
    w = jax.random.normal(ka, (512, 512), dtype=dtype) * 0.02
    image = jax.random.normal(kb, (256, height, width), dtype=dtype)
    return x, w, image
def workload(x, w, image):
    pooled = image.reshape(256, 32 * 32).mean(-1, keepdims=True)
    return jnp.maximum(x @ w, 0.0) + pooled
"""


def test_literal_sizes_in_create_inputs_are_read_from_config_and_scale(tmp_path: Path) -> None:
    path = _write(tmp_path, LITERAL, "literal")
    full = load_task(path, scales=(1.0,))
    assert [s.shape for s in full.input_specs(0)] == [(256, 512), (512, 512), (256, 32, 32)]
    task = load_task(path, scales=(0.5, 0.25))
    # the seed 0xBADC0DE is a literal too, but it sizes nothing: it is not scaled
    assert set(task.config_sizes) == {"batch_size", "in_features", "literal_32"}
    assert any("fixes its sizes as literals" in n for n in task.notes)
    assert [s.shape for s in task.input_specs(0)] == [(128, 256), (256, 256), (128, 16, 16)]
    assert [s.shape for s in task.input_specs(1)] == [(64, 128), (128, 128), (64, 8, 8)]
    # the workload's reshape by the same literals follows them: the reference traces
    suite = build_suite(task, seeds=(0,), probes=False)
    assert suite.scales == (0.5, 0.25) and len({c.shape_index for c in suite.cases}) >= 2
    assert scaled_task(path, "0.5") != path


def test_scaled_task_writes_a_task_file_every_loader_reads_the_same_way(tmp_path: Path) -> None:
    path = _write(tmp_path, ROPE.replace("LENGTH", "CONFIG['max_len']"))
    scaled = scaled_task(path, ["0.5", "0.25"])
    assert scaled != path and scaled.parent.name == "toy" and scaled.stat().st_mode & 0o044
    assert scaled_task(scaled, "0.5,0.25") == scaled  # the original sizes, scaled once
    task = load_task(scaled)
    assert task.name == "toy_rope" and task.scales == (0.5, 0.25)
    assert task.input_specs(0)[0].shape == (2, 32, 64)
    assert scaled_task(path, None) == path
    kernelgraph_task = Path(__file__).parent / "evaltasks" / "gelu_small.py"
    with pytest.raises(TaskError, match="applies to JAXBench CONFIG sizes"):
        scaled_task(kernelgraph_task, "0.5")


def test_scale_factors_parse_from_a_list_or_commas_and_bad_ones_are_named() -> None:
    assert parse_scales("0.5,0.25") == (0.5, 0.25) == parse_scales(["0.5", "0.25"])
    assert parse_scales(None) is None
    for bad, why in (("0", "positive"), ("x", "not a number"), (",", "at least one")):
        with pytest.raises(ValueError, match=why):
            parse_scales(bad)


@pytest.mark.parametrize("command", ["verify", "tune", "profile", "estimate"])
def test_every_command_that_loads_a_task_takes_the_same_scale(command: str,
                                                              tmp_path: Path) -> None:
    runner = CliRunner()
    assert "--scale" in runner.invoke(app, [command, "--help"]).output
    task = _write(tmp_path, FIXED, "fixed")
    candidate = tmp_path / "candidate.py"
    candidate.write_text("def build():\n    return lambda x: x\n")
    result = runner.invoke(app, [command, str(task), str(candidate), "--scale", "0.5"])
    assert result.exit_code == 2  # refused before anything runs, in one line
    assert "--scale cannot change this task's sizes" in result.output
    assert "Traceback" not in result.output
